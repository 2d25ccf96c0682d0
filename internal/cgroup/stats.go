package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stats is a container's CPU and memory use as its cgroup counts it.
type Stats struct {
	// CPUSeconds is the CPU time (user and system) of every process that
	// has run in the cgroup.
	CPUSeconds float64
	// MemoryBytes is the memory in use minus inactive file cache, the
	// figure docker stats shows.
	MemoryBytes uint64
}

// ReadStats reads the CPU time and resident memory of the cgroup that the
// process pid (normally a container's main process) is in, as
// /proc/<pid>/cgroup under procRoot names it. cgroupRoot is where the
// cgroup filesystems are mounted, normally /sys/fs/cgroup. On cgroup v1
// and hybrid hosts the v1 cpuacct and memory controllers count; on v2 the
// unified hierarchy does.
func ReadStats(procRoot, cgroupRoot string, pid int) (Stats, error) {
	if pid <= 0 {
		return Stats{}, fmt.Errorf("pid %d: not a process", pid)
	}
	file := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	data, err := os.ReadFile(file)
	if err != nil {
		return Stats{}, procErr(uint32(pid), err)
	}
	lines, err := parseLines(data)
	if err != nil {
		return Stats{}, fmt.Errorf("pid %d: %s: %w", pid, file, err)
	}
	h := hierarchiesOf(lines, cgroupRoot)

	var s Stats
	switch {
	case h.cpuacct != nil:
		ns, err := readUint(h.v1Dirs(h.cpuacct, "cpuacct"), "cpuacct.usage")
		if err != nil {
			return Stats{}, fmt.Errorf("pid %d: cpu: %w", pid, err)
		}
		s.CPUSeconds = float64(ns) / 1e9
	case h.v2 != nil:
		us, err := readKey(h.v2Dirs(), "cpu.stat", "usage_usec")
		if err != nil {
			return Stats{}, fmt.Errorf("pid %d: cpu: %w", pid, err)
		}
		s.CPUSeconds = float64(us) / 1e6
	default:
		return Stats{}, fmt.Errorf("pid %d: %s names no cpuacct or v2 cgroup", pid, file)
	}

	switch {
	case h.memory != nil:
		s.MemoryBytes, err = readMemory(h.v1Dirs(h.memory, "memory"), "memory.usage_in_bytes", "total_inactive_file", "inactive_file")
	case h.v2 != nil:
		s.MemoryBytes, err = readMemory(h.v2Dirs(), "memory.current", "inactive_file")
	default:
		err = fmt.Errorf("%s names no memory or v2 cgroup", file)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("pid %d: memory: %w", pid, err)
	}
	return s, nil
}

// hierarchies are the lines of a /proc/<pid>/cgroup file that ReadStats
// needs, with the root the cgroup filesystems are mounted under.
type hierarchies struct {
	root            string
	hybrid          bool // v1 lines next to the v2 one: v2 is under root/unified
	cpuacct, memory *cgLine
	v2              *cgLine
}

func hierarchiesOf(lines []cgLine, root string) hierarchies {
	h := hierarchies{root: root}
	for i := range lines {
		l := &lines[i]
		if l.v2 {
			h.v2 = l
			continue
		}
		h.hybrid = true
		for c := range strings.SplitSeq(l.controllers, ",") {
			switch c {
			case "cpuacct":
				h.cpuacct = l
			case "memory":
				h.memory = l
			}
		}
	}
	return h
}

// v1Dirs lists where the cgroup of line l may be: under a mount named
// for all the line's controllers ("cpu,cpuacct", as systemd mounts them)
// or under one named for the controller alone (a separate mount, or the
// symlink systemd adds next to the joint one).
func (h hierarchies) v1Dirs(l *cgLine, controller string) []string {
	mounts := []string{l.controllers}
	if l.controllers != controller {
		mounts = append(mounts, controller)
	}
	dirs := make([]string, 0, len(mounts))
	for _, m := range mounts {
		dirs = append(dirs, cgroupDir(h.root, m, l.path))
	}
	return dirs
}

// v2Dirs lists where the unified cgroup may be: the root itself on a pure
// v2 host, root/unified on a hybrid one.
func (h hierarchies) v2Dirs() []string {
	if h.hybrid {
		return []string{cgroupDir(h.root, "unified", h.v2.path), cgroupDir(h.root, "", h.v2.path)}
	}
	return []string{cgroupDir(h.root, "", h.v2.path)}
}

// errOutside marks a cgroup path shown relative to a cgroup namespace the
// reader is not at the root of: it cannot be found under the mount.
var errOutside = errors.New("cgroup path lies outside this cgroup namespace (run with the host's cgroup namespace)")

// cgroupDir joins a cgroup path to its mount. It returns "" for a path
// that climbs above the mount, which readFirst turns into errOutside.
func cgroupDir(root, mount, path string) string {
	for c := range strings.SplitSeq(path, "/") {
		if c == ".." {
			return ""
		}
	}
	return filepath.Join(root, mount, path)
}

// readFirst reads name from the first of dirs that has it.
func readFirst(dirs []string, name string) ([]byte, string, error) {
	var err error
	for _, d := range dirs {
		if d == "" {
			return nil, "", errOutside
		}
		p := filepath.Join(d, name)
		var b []byte
		if b, err = os.ReadFile(p); err == nil {
			return b, p, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	return nil, "", err
}

func readUint(dirs []string, name string) (uint64, error) {
	b, p, err := readFirst(dirs, name)
	if err != nil {
		return 0, err
	}
	v, ok := parseDec(bytes.TrimSpace(b))
	if !ok {
		return 0, fmt.Errorf("%s: %q is not a number", p, bytes.TrimSpace(b))
	}
	return v, nil
}

// readKey reads the value of key from a flat-keyed file ("key value"
// lines, as cpu.stat and memory.stat are).
func readKey(dirs []string, name string, keys ...string) (uint64, error) {
	b, p, err := readFirst(dirs, name)
	if err != nil {
		return 0, err
	}
	for _, key := range keys {
		if v, found, err := keyValue(b, key); found {
			if err != nil {
				return 0, fmt.Errorf("%s: %w", p, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s: no %s", p, strings.Join(keys, " or "))
}

func keyValue(b []byte, key string) (v uint64, found bool, err error) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		k, val, ok := bytes.Cut(line, []byte(" "))
		if !ok || string(k) != key {
			continue
		}
		v, ok := parseDec(bytes.TrimSpace(val))
		if !ok {
			return 0, true, fmt.Errorf("%s %q is not a number", key, val)
		}
		return v, true, nil
	}
	return 0, false, nil
}

// readMemory reads usage from usageFile and subtracts the first of
// inactiveKeys that memory.stat in the same directory has, the way docker
// stats does: on v1 total_inactive_file (this cgroup and its children), on
// v2 inactive_file.
func readMemory(dirs []string, usageFile string, inactiveKeys ...string) (uint64, error) {
	b, p, err := readFirst(dirs, usageFile)
	if err != nil {
		return 0, err
	}
	usage, ok := parseDec(bytes.TrimSpace(b))
	if !ok {
		return 0, fmt.Errorf("%s: %q is not a number", p, bytes.TrimSpace(b))
	}
	inactive, err := readKey([]string{filepath.Dir(p)}, "memory.stat", inactiveKeys...)
	if err != nil {
		return 0, err
	}
	if inactive < usage {
		return usage - inactive, nil
	}
	return usage, nil
}
