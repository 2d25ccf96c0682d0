package stage

import (
	"strings"
	"testing"
)

const (
	statusAdmin = "Name:\tgpumeter\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n"
	statusNone  = "Name:\tgpumeter\nCapEff:\t0000000000000000\n"
	statusChown = "Name:\tgpumeter\nCapEff:\t0000000000000001\n"

	// The image with -v /var/lib/gpumeter:/var/lib/gpumeter:rshared.
	mountsShared = `612 540 0:50 / / rw,relatime master:300 - overlay overlay rw
640 612 254:0 /var/lib/gpumeter /var/lib/gpumeter rw,relatime shared:1 - ext4 /dev/vda rw
`
	// The same without :rshared: Docker's default rprivate.
	mountsPrivate = `612 540 0:50 / / rw,relatime master:300 - overlay overlay rw
640 612 254:0 /var/lib/gpumeter /var/lib/gpumeter rw,relatime - ext4 /dev/vda rw
`
	// A data dir on the root mount, which is shared, with a space in a
	// later mount point.
	mountsRoot = `27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
28 27 0:25 / /mnt/my\040disk rw,relatime - tmpfs tmpfs rw
`
)

func TestProbe(t *testing.T) {
	tests := []struct {
		name      string
		status    string
		mountinfo string
		dataDir   string
		sameNS    bool
		want      string // a part of the refusal; "" for none
	}{
		{"systemd unit: dockerd's namespace", statusAdmin, mountsPrivate, "/var/lib/gpumeter", true, ""},
		{"image, SYS_ADMIN, rshared", statusAdmin, mountsShared, "/var/lib/gpumeter", false, ""},
		{"below a shared root mount", statusAdmin, mountsRoot, "/srv/gpumeter", false, ""},
		{"image as shipped: no capabilities", statusNone, mountsShared, "/var/lib/gpumeter", false, "--cap-add SYS_ADMIN"},
		{"no capabilities, even in dockerd's namespace", statusNone, mountsRoot, "/var/lib/gpumeter", true, "needs CAP_SYS_ADMIN"},
		{"capabilities without SYS_ADMIN", statusChown, mountsShared, "/var/lib/gpumeter", false, "CAP_SYS_ADMIN"},
		{"SYS_ADMIN, data dir not shared", statusAdmin, mountsPrivate, "/var/lib/gpumeter", false, "-v /var/lib/gpumeter:/var/lib/gpumeter:rshared"},
		{"SYS_ADMIN, data dir on a private mount with a space", statusAdmin, mountsRoot, "/mnt/my disk/gpumeter", false, "on the mount at /mnt/my disk) is not a shared mount"},
		{"no CapEff line", "Name:\tx\n", mountsShared, "/var/lib/gpumeter", false, "no CapEff line"},
		{"no mount holds it", statusAdmin, "", "/var/lib/gpumeter", false, "no mount of its own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := probe([]byte(tt.status), []byte(tt.mountinfo), tt.dataDir, tt.sameNS)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("probe: %q, want %q", got, tt.want)
			}
			if got != "" && !strings.Contains(got, "submit without mounts") {
				t.Errorf("probe: %q does not tell the submitter what to do", got)
			}
		})
	}
}

// TestProbeHere: Probe on this process; where the engine's socket is
// served from this mount namespace (root on the test machines), it can
// stage.
func TestProbeHere(t *testing.T) {
	needMount(t)
	const sock = "/var/run/docker.sock"
	same := sameNamespace(sock)
	got := Probe(t.TempDir(), sock)
	t.Logf("dockerd in this mount namespace: %v; probe: %q", same, got)
	if same && got != "" {
		t.Errorf("Probe in dockerd's namespace: %q", got)
	}
}
