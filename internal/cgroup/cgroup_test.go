package cgroup

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// IDs in the testdata/cgroup files. The files named *-hybrid* and
// host-v1-hybrid-* were captured on a cgroup v1 host with Docker's cgroupfs
// driver (the nested one with --cgroup-parent=/docker/<outer>/docker, which
// is where a Docker-in-Docker daemon puts its containers); the others hold
// lines in the exact form the named runtime and driver produce.
const (
	testID      = "a42d519714d616e9411dbceec4b52808bd6b1ee53e6f6497a281d655357d8b71"
	testOuterID = "560e3e12b1e0dafa161e62fb3327ad65c98b7cd53849b17c627e8d3e1d419d6a"
	testInnerID = "33bf6fbd7cd8379785a21e233d8e09f824e7bab459168a96312c1c882c1d7e1f"

	capturedID      = "4dc0ccd278196f803841db2f254de4f2f11bde91439aca6df4f2bf2fb980255c"
	capturedOuterID = "bd74c7622270cd2c75f6d13da3b9280f28c1f9561557e9b92588cd8bcf2b0cc9"
	capturedInnerID = "44debef46317945ea63aeab540851ecf3e81efdabb83d541e2a1336ab14fecfe"
	capturedChildID = "7706cac12f1119a16fdda46e708d956bf19f63306ad489ffdc646722bd3055f9"

	podSlice = "kubepods-burstable-pod6b3c9d2e_8f41_4a7b_9c05_1d2e3f4a5b6c.slice"
)

var parseTests = []struct {
	file string
	want Ref
}{
	// Docker, cgroup v1.
	{"docker-v1-cgroupfs.txt", Ref{testID, "docker", "/docker/" + testID}},
	{"docker-v1-systemd.txt", Ref{testID, "docker", "/system.slice/docker-" + testID + ".scope"}},
	{"docker-v1-cgroupfs-hybrid.txt", Ref{capturedID, "docker", "/docker/" + capturedID}},
	// The unified line shows containerd's cgroup, not the container's:
	// Docker on v1 leaves the v2 hierarchy alone.
	{"docker-v1-hybrid-unified-no-id.txt", Ref{testID, "docker", "/docker/" + testID}},
	{"docker-cgroup-parent-v1-hybrid.txt", Ref{capturedChildID, "", "/gpu-jobs/" + capturedChildID}},

	// Docker, cgroup v2.
	{"docker-v2-cgroupfs.txt", Ref{testID, "docker", "/docker/" + testID}},
	{"docker-v2-systemd.txt", Ref{testID, "docker", "/system.slice/docker-" + testID + ".scope"}},
	{"docker-v2-with-v1-name-systemd.txt", Ref{testID, "docker", "/system.slice/docker-" + testID + ".scope"}},
	{"docker-v2-deleted.txt", Ref{testID, "docker", "/system.slice/docker-" + testID + ".scope"}},
	// Read from inside a private cgroup namespace: still the container.
	{"docker-v2-cgroupns-relative.txt", Ref{testID, "docker", "/../docker-" + testID + ".scope"}},
	{"docker-rootless-v2-cgroupfs.txt", Ref{testID, "docker",
		"/user.slice/user-1000.slice/user@1000.service/app.slice/docker.service/docker/" + testID}},
	{"docker-rootless-v2-systemd.txt", Ref{testID, "docker",
		"/user.slice/user-1000.slice/user@1000.service/user.slice/docker-" + testID + ".scope"}},

	// Docker-in-Docker: the innermost container holds the process.
	{"dind-v1-hybrid.txt", Ref{capturedInnerID, "docker", "/docker/" + capturedOuterID + "/docker/" + capturedInnerID}},
	{"dind-v2.txt", Ref{testInnerID, "docker", "/docker/" + testOuterID + "/docker/" + testInnerID}},
	{"dind-v2-systemd.txt", Ref{testInnerID, "docker", "/system.slice/docker-" + testOuterID + ".scope/docker/" + testInnerID}},

	// containerd.
	{"containerd-service-v2.txt", Ref{testID, "containerd",
		"/system.slice/containerd.service/" + podSlice + ":cri-containerd:" + testID}},
	{"containerd-nerdctl-v2-systemd.txt", Ref{testID, "containerd", "/system.slice/nerdctl-" + testID + ".scope"}},
	{"host-containerd-shim-v2.txt", Ref{}},

	// CRI-O: conmon watches the container from outside it.
	{"crio-v2-systemd.txt", Ref{testID, "cri-o",
		"/kubepods.slice/kubepods-burstable.slice/" + podSlice + "/crio-" + testID + ".scope"}},
	{"crio-v1-cgroupfs.txt", Ref{testID, "cri-o",
		"/kubepods/burstable/pod6b3c9d2e-8f41-4a7b-9c05-1d2e3f4a5b6c/crio-" + testID}},
	{"crio-conmon-v2-systemd.txt", Ref{}},

	// Podman.
	{"podman-v2-container.txt", Ref{testID, "podman", "/machine.slice/libpod-" + testID + ".scope/container"}},
	{"podman-v2-scope.txt", Ref{testID, "podman", "/machine.slice/libpod-" + testID + ".scope"}},
	{"podman-rootless-v2.txt", Ref{testID, "podman",
		"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + testID + ".scope"}},
	{"podman-v1-cgroupfs.txt", Ref{testID, "podman", "/libpod_parent/libpod-" + testID}},
	{"podman-conmon-v2.txt", Ref{}},
	// --cgroups=split under a systemd service: the payload is the
	// container, the service's own processes are the host's.
	{"podman-v2-split-service.txt", Ref{testID, "podman", "/system.slice/webapp.service/libpod-payload-" + testID}},
	{"podman-v2-split-supervisor.txt", Ref{}},

	// Kubernetes.
	{"kubepods-v1-cgroupfs.txt", Ref{testID, "kubepods",
		"/kubepods/burstable/pod6b3c9d2e-8f41-4a7b-9c05-1d2e3f4a5b6c/" + testID}},
	{"kubepods-v2-cgroupfs.txt", Ref{testID, "kubepods",
		"/kubepods/besteffort/pod6b3c9d2e-8f41-4a7b-9c05-1d2e3f4a5b6c/" + testID}},
	{"kubepods-v2-systemd-containerd.txt", Ref{testID, "containerd",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6b3c9d2e_8f41_4a7b_9c05_1d2e3f4a5b6c.slice/cri-containerd-" + testID + ".scope"}},
	{"kubepods-v1-systemd-docker.txt", Ref{testID, "docker",
		"/kubepods.slice/kubepods-burstable.slice/" + podSlice + "/docker-" + testID + ".scope"}},

	// Host processes.
	{"host-v1-hybrid-root.txt", Ref{}},
	// A 32-hex cgroup name is not a container ID.
	{"host-v1-hybrid-sandbox.txt", Ref{}},
	{"host-v1-session.txt", Ref{}},
	{"host-v2-session.txt", Ref{}},
	{"host-v2-init.txt", Ref{}},
	{"host-v2-root.txt", Ref{}},
	{"host-v2-dockerd.txt", Ref{}},
}

var parseErrorTests = []struct {
	file string
	want string
}{
	{"bad-empty.txt", `line 1: want hierarchy-ID:controllers:path, got an empty file`},
	{"bad-too-few-colons.txt", `line 3: want hierarchy-ID:controllers:path, got "0/docker/` + testID + `"`},
	{"bad-non-numeric-id.txt", `line 2: hierarchy ID "x1" is not a number`},
	{"bad-blank-line.txt", `line 2: want hierarchy-ID:controllers:path, got ""`},
	{"bad-relative-path.txt", `line 1: cgroup path "docker/` + testID + `" does not start with /`},
	{"bad-binary.txt", `line 1: want hierarchy-ID:controllers:path, got "\x1f\x8b\b\x00:\x00\xff\xfe"`},
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cgroup", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Parse(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range parseErrorTests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Parse(readTestdata(t, tt.file))
			if err == nil {
				t.Fatalf("Parse = %+v, nil; want error %q", got, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse error = %q, want %q", err, tt.want)
			}
			if got != (Ref{}) {
				t.Errorf("Parse = %+v with error, want Ref{}", got)
			}
		})
	}
}

// TestParseCoversTestdata keeps every captured file in one of the tables
// above, so that a new file cannot sit there untested.
func TestParseCoversTestdata(t *testing.T) {
	covered := make(map[string]bool)
	for _, tt := range parseTests {
		covered[tt.file] = true
	}
	for _, tt := range parseErrorTests {
		covered[tt.file] = true
	}
	files, err := filepath.Glob(filepath.Join("testdata", "cgroup", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s is in no test table", f)
		}
	}
	if len(files) != len(covered) {
		t.Errorf("testdata/cgroup has %d files, tables name %d", len(files), len(covered))
	}
}

func TestParseLines(t *testing.T) {
	id := testID
	tests := []struct {
		name string
		in   string
		want Ref
	}{
		{"no trailing newline", "0::/docker/" + id, Ref{id, "docker", "/docker/" + id}},
		{"uppercase hex is no ID", "0::/docker/" + strings.ToUpper(id) + "\n", Ref{}},
		{"63 hex digits", "0::/docker/" + id[:63] + "\n", Ref{}},
		{"65 hex digits", "0::/docker/" + id + "0\n", Ref{}},
		{"unknown scope prefix", "0::/system.slice/foo-" + id + ".scope\n", Ref{}},
		{"scope without prefix", "0::/system.slice/-" + id + ".scope\n", Ref{}},
		{"bare ID under unknown parent", "0::/jobs/" + id + "\n", Ref{id, "", "/jobs/" + id}},
		{"bare ID at the root", "0::/" + id + "\n", Ref{id, "", "/" + id}},
		{"nearest known parent names the runtime", "0::/kubepods/docker/" + id + "\n", Ref{id, "docker", "/kubepods/docker/" + id}},
		{"kubepods slice as parent", "0::/kubepods.slice/" + id + "\n", Ref{id, "kubepods", "/kubepods.slice/" + id}},
		{"docker service is the daemon", "0::/system.slice/docker.service\n", Ref{}},
		{"colon name with unknown prefix", "0::/a.slice:foo:" + id + "\n", Ref{}},
		{"colon name without slice", "0::/:docker:" + id + "\n", Ref{}},
		{"cri-o on cgroupfs", "0::/kubepods/pod1/crio-" + id + "\n", Ref{id, "cri-o", "/kubepods/pod1/crio-" + id}},
		{"v1 first line with an ID wins", "2:memory:/docker/" + testOuterID + "\n1:cpu:/docker/" + id + "\n",
			Ref{testOuterID, "docker", "/docker/" + testOuterID}},
		{"v2 line wins over earlier v1 lines", "1:cpu:/docker/" + testOuterID + "\n0::/docker/" + id + "\n",
			Ref{id, "docker", "/docker/" + id}},
		{"path with colons", "1:name=systemd:/a:b:c/docker/" + id + "\n", Ref{id, "docker", "/a:b:c/docker/" + id}},
		{"nested cgroup below the container", "0::/docker/" + id + "/init.scope\n", Ref{id, "docker", "/docker/" + id + "/init.scope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseLineErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"only a newline", "\n", `line 1: want hierarchy-ID:controllers:path, got ""`},
		{"one colon", "0:/\n", `line 1: want hierarchy-ID:controllers:path, got "0:/"`},
		{"empty hierarchy ID", ":cpu:/\n", `line 1: hierarchy ID "" is not a number`},
		{"negative hierarchy ID", "-1:cpu:/\n", `line 1: hierarchy ID "-1" is not a number`},
		{"huge hierarchy ID", "99999999999:cpu:/\n", `line 1: hierarchy ID "99999999999" is not a number`},
		{"empty path", "0::\n", `line 1: cgroup path "" does not start with /`},
		{"NUL in path", "0::/\x00\n", `line 1: NUL byte in "0::/\x00"`},
		{"second newline at the end", "0::/\n\n", `line 2: want hierarchy-ID:controllers:path, got ""`},
		{"long junk is cut short", strings.Repeat("z", 200), `line 1: want hierarchy-ID:controllers:path, got "` +
			strings.Repeat("z", 80) + `"...`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want %q", tt.in, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse(%q) error = %q, want %q", tt.in, err, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "cgroup", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	runtimes := map[string]bool{"": true, "docker": true, "containerd": true, "cri-o": true, "podman": true, "kubepods": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		ref, err := Parse(data)
		if err != nil {
			if ref != (Ref{}) {
				t.Errorf("Parse = %+v with error %v", ref, err)
			}
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Errorf("error %q names no line", err)
			}
			return
		}
		if ref.ContainerID == "" {
			if ref != (Ref{}) {
				t.Errorf("Parse = %+v: runtime or path without an ID", ref)
			}
			return
		}
		if !isID(ref.ContainerID) {
			t.Errorf("ContainerID %q is not 64 lowercase hex digits", ref.ContainerID)
		}
		if !strings.Contains(ref.Path, ref.ContainerID) {
			t.Errorf("Path %q does not hold ContainerID %q", ref.Path, ref.ContainerID)
		}
		if !bytes.Contains(data, []byte(":"+ref.Path)) {
			t.Errorf("Path %q is in no line of %q", ref.Path, data)
		}
		if !runtimes[ref.Runtime] {
			t.Errorf("Runtime %q is not a known one", ref.Runtime)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	for _, file := range []string{"docker-v1-cgroupfs.txt", "kubepods-v2-systemd-containerd.txt", "host-v1-session.txt"} {
		data := readTestdata(b, file)
		b.Run(file, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
