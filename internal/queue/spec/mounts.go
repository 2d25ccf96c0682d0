package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

// resolvedMount is a bind mount whose source has its symlinks resolved
// and was checked against the mount roots and the submitter's access.
type resolvedMount struct {
	source   string
	target   string
	readOnly bool
}

func checkMounts(specs []string, rules Rules, who Identity) ([]resolvedMount, error) {
	var out []resolvedMount
	targets := map[string]bool{}
	for _, s := range specs {
		m, err := parseMount(s)
		if err != nil {
			return nil, err
		}
		if targets[m.target] {
			return nil, refuse(BadRequest, "mounts", "two mounts share the target %s; give each its own", m.target)
		}
		targets[m.target] = true
		src, err := underRoots(m.source, rules.MountRoots)
		if err != nil {
			return nil, err
		}
		// Opened beneath its root by descriptor, as the launcher opens
		// it again to stage it: the submitter hears now what the start
		// would refuse.
		opened, err := OpenSource(src, rules.MountRoots, who, !m.readOnly)
		if err != nil {
			return nil, err
		}
		opened.Close()
		m.source = opened.Path
		out = append(out, m)
	}
	return out, nil
}

// parseMount splits SRC:DST[:ro|:rw], refusing relative paths and ..
// in either.
func parseMount(s string) (resolvedMount, error) {
	parts := strings.Split(s, ":")
	var m resolvedMount
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && parts[2] == "ro":
		m.readOnly = true
	case len(parts) == 3 && parts[2] == "rw":
	default:
		return m, refuse(BadRequest, "mounts", "%q is not SRC:DST, SRC:DST:ro or SRC:DST:rw", s)
	}
	m.source, m.target = parts[0], parts[1]
	for _, p := range []string{m.source, m.target} {
		switch {
		case !filepath.IsAbs(p):
			return m, refuse(BadRequest, "mounts", "%q in %q is not an absolute path; give both paths from /", p, s)
		case hasDotDot(p):
			return m, refuse(MountNotAllowed, "mounts", "%q in %q holds .., which mounts may not use; give the path without ..", p, s)
		case strings.ContainsRune(p, 0) || strings.ContainsRune(p, ','):
			return m, refuse(BadRequest, "mounts", "%q in %q holds a NUL byte or a comma", p, s)
		}
	}
	m.source, m.target = filepath.Clean(m.source), filepath.Clean(m.target)
	if m.target == "/" {
		return m, refuse(BadRequest, "mounts", "%q mounts over the container's /; give a directory such as /data", s)
	}
	for _, k := range kernelDirs {
		if within(m.target, k) {
			return m, refuse(BadRequest, "mounts", "%q mounts over the container's %s, which the runtime owns; give a directory such as /data", s, k)
		}
	}
	return m, nil
}

// kernelDirs are the runtime's own file systems in the container; a bind
// mount over them fails at start, so Check refuses it at submit.
var kernelDirs = []string{"/proc", "/sys", "/dev"}

// underRoots resolves src's symlinks and returns it if it lies in one of
// the (resolved) mount roots.
func underRoots(src string, roots []string) (string, error) {
	if len(roots) == 0 {
		return "", refuse(MountNotAllowed, "mounts", "the queue allows no mounts: queue.mount_roots is empty; drop --mount or ask an admin to name the directories users may mount")
	}
	// The source must name a root before anything is resolved, so a
	// request cannot probe the host's paths outside the roots.
	lexical := false
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(filepath.Clean(root))
		lexical = lexical || within(src, filepath.Clean(root)) || err == nil && within(src, r)
	}
	if !lexical {
		return "", refuse(MountNotAllowed, "mounts", "mount source %s is outside queue.mount_roots (%s); mount a path under one of them",
			src, strings.Join(roots, ", "))
	}
	resolved, err := filepath.EvalSymlinks(src)
	if err != nil {
		return "", refuse(MountNotAllowed, "mounts", "mount source %s cannot be resolved on the host (%v); give an existing path under queue.mount_roots", src, unwrapPath(err))
	}
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(filepath.Clean(root))
		if err != nil || r == "/" {
			continue // a missing root allows nothing, nor one that is a link to /
		}
		if within(resolved, r) {
			return resolved, nil
		}
	}
	shown := src
	if resolved != src {
		shown = src + " (resolved to " + resolved + ")"
	}
	return "", refuse(MountNotAllowed, "mounts", "mount source %s is outside queue.mount_roots (%s); mount a path under one of them",
		shown, strings.Join(roots, ", "))
}

func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// unwrapPath drops the path from an error that Check's message names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// fileStat is what access checks need of a file: its mode and owner.
type fileStat struct {
	Mode fs.FileMode
	UID  uint32
	GID  uint32
}

// Permission bits of one class (owner, group or other), shifted down.
const (
	permRead  = 4
	permWrite = 2
	permExec  = 1
)

// mayAccess reports whether who may do want (permRead, permWrite,
// permExec bits) on a file with st, by the owner, group and other classes
// the kernel uses: the first class that applies decides. Root may do
// everything but run a file with no execute bit.
func mayAccess(who Identity, st fileStat, want fs.FileMode) bool {
	perm := st.Mode.Perm()
	if who.UID == 0 {
		if want&permExec != 0 && !st.Mode.IsDir() && perm&0o111 == 0 {
			return false
		}
		return true
	}
	var bits fs.FileMode
	switch {
	case who.UID == st.UID:
		bits = perm >> 6
	case who.GID == st.GID || slices.Contains(who.Groups, st.GID):
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&7&want == want
}

// Verify re-checks the mounts Docker reports on the created container
// against the mounts the spec asked for (HostConfig.Mounts, whose
// sources the launcher has replaced by their staging paths, binds only
// the agent makes and controls; see internal/queue/stage): a source
// Docker resolved elsewhere shows here. Every bind mount must be one that was asked
// for, from the same resolved source, as writable as asked and no more,
// and every mount asked for must be there. Volumes the image declares are
// Docker's own and pass.
func Verify(created []container.MountPoint, wanted []mount.Mount) error {
	found := make([]bool, len(wanted))
	for _, got := range created {
		if got.Type != mount.TypeBind {
			if got.Type == mount.TypeVolume {
				continue
			}
			return fmt.Errorf("container has a %s mount at %s that the spec did not ask for", got.Type, got.Destination)
		}
		i := slices.IndexFunc(wanted, func(w mount.Mount) bool {
			return w.Type == mount.TypeBind && w.Target == got.Destination
		})
		if i < 0 {
			return fmt.Errorf("container has a bind mount of %s at %s that the spec did not ask for", got.Source, got.Destination)
		}
		w := wanted[i]
		if got.Source != w.Source {
			return fmt.Errorf("mount at %s: Docker mounted %s, the spec asked for %s", got.Destination, got.Source, w.Source)
		}
		if now, err := filepath.EvalSymlinks(got.Source); err != nil || now != got.Source {
			return fmt.Errorf("mount at %s: source %s no longer resolves to itself (now %q, %v)", got.Destination, got.Source, now, err)
		}
		if got.RW && w.ReadOnly {
			return fmt.Errorf("mount at %s: Docker mounted %s read-write, the spec asked for read-only", got.Destination, got.Source)
		}
		found[i] = true
	}
	for i, w := range wanted {
		if !found[i] {
			return fmt.Errorf("container lacks the mount of %s at %s", w.Source, w.Target)
		}
	}
	return nil
}
