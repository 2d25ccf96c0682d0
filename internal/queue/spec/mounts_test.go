package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

func TestVerify(t *testing.T) {
	h := newHostTree(t)
	shared, scratch := filepath.Join(h.root, "shared"), filepath.Join(h.root, "scratch")
	wanted := []mount.Mount{
		{Type: mount.TypeBind, Source: shared, Target: "/data", ReadOnly: true},
		{Type: mount.TypeBind, Source: scratch, Target: "/scratch"},
	}
	good := []container.MountPoint{
		{Type: mount.TypeBind, Source: shared, Destination: "/data", RW: false},
		{Type: mount.TypeBind, Source: scratch, Destination: "/scratch", RW: true},
		{Type: mount.TypeVolume, Name: "abc", Source: "/var/lib/docker/volumes/abc/_data", Destination: "/cache", RW: true},
	}
	if err := Verify(good, wanted); err != nil {
		t.Errorf("Verify of the mounts asked for: %v", err)
	}
	if err := Verify(nil, nil); err != nil {
		t.Errorf("Verify of no mounts: %v", err)
	}
	// A source swapped for a symlink after Check: Docker follows it.
	swapped := filepath.Join(h.root, "swapped")
	if err := os.Symlink(h.out, swapped); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		created []container.MountPoint
		want    string
	}{
		{"source Docker resolved elsewhere", []container.MountPoint{
			{Type: mount.TypeBind, Source: h.out, Destination: "/data"}, good[1],
		}, "the spec asked for " + shared},
		{"read-write where read-only was asked", []container.MountPoint{
			{Type: mount.TypeBind, Source: shared, Destination: "/data", RW: true}, good[1],
		}, "read-write"},
		{"a bind mount not asked for", append([]container.MountPoint{
			{Type: mount.TypeBind, Source: "/", Destination: "/host", RW: true},
		}, good...), "did not ask for"},
		{"a mount missing", good[:1], "lacks the mount of " + scratch},
		{"a tmpfs not asked for", append([]container.MountPoint{{Type: mount.TypeTmpfs, Destination: "/t"}}, good...), "tmpfs"},
		{"source now a symlink", []container.MountPoint{
			{Type: mount.TypeBind, Source: swapped, Destination: "/data"}, good[1],
		}, "the spec asked for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.created, wanted)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Verify: %v, want %q", err, tt.want)
			}
		})
	}
	t.Run("source that no longer resolves to itself", func(t *testing.T) {
		w := []mount.Mount{{Type: mount.TypeBind, Source: swapped, Target: "/data", ReadOnly: true}}
		c := []container.MountPoint{{Type: mount.TypeBind, Source: swapped, Destination: "/data"}}
		if err := Verify(c, w); err == nil || !strings.Contains(err.Error(), "no longer resolves") {
			t.Errorf("Verify: %v, want the source to resolve elsewhere", err)
		}
	})
}
