// Package cgroup finds out which container a host process belongs to and
// what a container's cgroup says about its CPU and memory use.
//
// It reads /proc/<pid>/cgroup (cgroup v1, v2 and hybrid hosts; the cgroupfs
// and systemd drivers of Docker, rootless Docker, Docker-in-Docker,
// containerd, CRI-O, Podman and Kubernetes layouts), /proc/<pid>/stat and
// /proc/<pid>/status under a configurable proc root, the passwd file for
// user names, and the cgroup filesystem for counters. Nothing here talks to
// a container engine: the cgroup path is the only link between a PID and a
// container ID.
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Ref is what a /proc/<pid>/cgroup file says about the container a process
// is in.
type Ref struct {
	// ContainerID is the full 64-hex ID; "" when the process is in no
	// container.
	ContainerID string
	// Runtime names what made the cgroup, as far as the path tells:
	// "docker", "containerd", "cri-o" or "podman" when the cgroup name says
	// so, "kubepods" for a bare ID under a kubepods hierarchy (the cgroupfs
	// driver names no engine), "" when nothing tells.
	Runtime string
	// Path is the cgroup path the ID was found in: the v2 unified path when
	// that has it, else the first v1 controller path that does.
	Path string
}

// cgLine is one line of a /proc/<pid>/cgroup file.
type cgLine struct {
	controllers string // comma-separated; "" on the v2 line
	path        string // without a trailing " (deleted)"
	v2          bool
}

// Parse reads the contents of a /proc/<pid>/cgroup file. A process in no
// container gives Ref{} and a nil error. A malformed line gives an error
// that names the line number and what is wrong with it.
func Parse(data []byte) (Ref, error) {
	lines, err := parseLines(data)
	if err != nil {
		return Ref{}, err
	}
	return refOf(lines), nil
}

// refOf picks the container from parsed lines. The v2 line wins when it
// names a container; on hybrid hosts it often does not (Docker on v1 leaves
// the unified hierarchy to systemd), so the v1 lines are searched next, in
// file order.
func refOf(lines []cgLine) Ref {
	for _, l := range lines {
		if !l.v2 {
			continue
		}
		if id, rt, ok := idInPath(l.path); ok {
			return Ref{ContainerID: id, Runtime: rt, Path: l.path}
		}
	}
	for _, l := range lines {
		if l.v2 {
			continue
		}
		if id, rt, ok := idInPath(l.path); ok {
			return Ref{ContainerID: id, Runtime: rt, Path: l.path}
		}
	}
	return Ref{}
}

const wantLine = "want hierarchy-ID:controllers:path"

// parseLines splits a /proc/<pid>/cgroup file into lines of the form
// hierarchy-ID:controller-list:cgroup-path (see cgroups(7)). The path may
// itself contain colons.
func parseLines(data []byte) ([]cgLine, error) {
	if len(data) == 0 {
		return nil, errors.New("line 1: " + wantLine + ", got an empty file")
	}
	// The kernel ends every line, the last one included, with a newline.
	data = bytes.TrimSuffix(data, []byte("\n"))
	lines := make([]cgLine, 0, bytes.Count(data, []byte("\n"))+1)
	for n := 1; ; n++ {
		raw, rest, more := bytes.Cut(data, []byte("\n"))
		l, err := parseLine(raw)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		lines = append(lines, l)
		if !more {
			return lines, nil
		}
		data = rest
	}
}

func parseLine(raw []byte) (cgLine, error) {
	hier, rest, ok1 := bytes.Cut(raw, []byte(":"))
	ctrl, path, ok2 := bytes.Cut(rest, []byte(":"))
	if !ok1 || !ok2 {
		return cgLine{}, fmt.Errorf("%s, got %s", wantLine, quote(raw))
	}
	id, err := strconv.ParseUint(string(hier), 10, 32)
	if err != nil {
		return cgLine{}, fmt.Errorf("hierarchy ID %s is not a number", quote(hier))
	}
	if len(path) == 0 || path[0] != '/' {
		return cgLine{}, fmt.Errorf("cgroup path %s does not start with /", quote(path))
	}
	if bytes.IndexByte(raw, 0) >= 0 {
		return cgLine{}, fmt.Errorf("NUL byte in %s", quote(raw))
	}
	// cgroup v2 marks a process whose cgroup was removed (a zombie, or one
	// caught while exiting); the path still names the container.
	path = bytes.TrimSuffix(path, []byte(" (deleted)"))
	return cgLine{
		controllers: string(ctrl),
		path:        string(path),
		v2:          id == 0 && len(ctrl) == 0,
	}, nil
}

// quote renders raw input for an error message, cut short so that a
// binary file cannot make a huge one.
func quote(b []byte) string {
	const limit = 80
	if len(b) > limit {
		return strconv.Quote(string(b[:limit])) + "..."
	}
	return strconv.Quote(string(b))
}

// scopePrefixes maps the prefix of "<prefix>-<id>[.scope]" cgroup names
// (systemd driver) and of "<slice>:<prefix>:<id>" names (a systemd-style
// cgroups path that a cgroupfs manager took literally) to the runtime.
// Anything else, notably "crio-conmon-" and "libpod-conmon-", holds a
// runtime's monitor process, not a container.
var scopePrefixes = map[string]string{
	"docker":         "docker",
	"cri-containerd": "containerd",
	"nerdctl":        "containerd",
	"crio":           "cri-o",
	"libpod":         "podman",
	// podman run --cgroups=split, as a systemd service runs it: the
	// payload's cgroup under the service's.
	"libpod-payload": "podman",
}

// idInPath finds the container ID in a cgroup path. The innermost
// component with an ID wins: under Docker-in-Docker the process is in the
// inner container, and Podman puts a container's processes in a child
// ("container") of the scope that names it.
func idInPath(path string) (id, runtime string, ok bool) {
	rest := path
	for rest != "" {
		i := strings.LastIndexByte(rest, '/')
		comp := rest[i+1:]
		rest = rest[:max(i, 0)]
		if id, runtime, ok = idInName(comp); ok {
			if runtime == "" {
				runtime = runtimeOfParents(rest)
			}
			return id, runtime, true
		}
	}
	return "", "", false
}

// idInName finds a container ID in one cgroup name: a bare ID (cgroupfs
// driver), "<prefix>-<id>" with an optional ".scope" (systemd driver,
// CRI-O and Podman on cgroupfs), or "<slice>:<prefix>:<id>".
func idInName(name string) (id, runtime string, ok bool) {
	if isID(name) {
		return name, "", true
	}
	if a, b, found := strings.Cut(name, ":"); found {
		prefix, id, found := strings.Cut(b, ":")
		if rt, known := scopePrefixes[prefix]; found && known && a != "" && isID(id) {
			return id, rt, true
		}
		return "", "", false
	}
	name = strings.TrimSuffix(name, ".scope")
	if len(name) < 66 || name[len(name)-65] != '-' {
		return "", "", false
	}
	id = name[len(name)-64:]
	if rt, known := scopePrefixes[name[:len(name)-65]]; known && isID(id) {
		return id, rt, true
	}
	return "", "", false
}

// runtimeOfParents names the runtime of a bare ID from the cgroups above
// it, nearest first.
func runtimeOfParents(path string) string {
	for path != "" {
		i := strings.LastIndexByte(path, '/')
		comp := path[i+1:]
		path = path[:max(i, 0)]
		switch {
		case comp == "docker":
			return "docker"
		case strings.HasPrefix(comp, "kubepods"):
			return "kubepods"
		}
	}
	return ""
}

// isID reports whether s is a full container ID: 64 lowercase hex digits.
func isID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
