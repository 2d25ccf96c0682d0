package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// What the test stamps into the binary, through the Dockerfile's own
// -ldflags.
const (
	testVersion = "v0.0.0-e2e"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	testDate    = "2026-12-01T00:00:00Z"
	// node is the host name the container is given, as the README's
	// --hostname and GPUMETER_HOSTNAME.
	node = "e2e-image-node"
	// agentUID is the image's user.
	agentUID  = 65532
	opTimeout = 2 * time.Minute
)

// run names this test binary's images and containers.
var run = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// TestImage builds the Dockerfile's final stage ("prebuilt": the run-time
// image with a binary built here) on a glibc base made from this host's
// libraries, runs `serve --demo` in it with the README's run line (all
// but --gpus all: this engine has no NVIDIA runtime) and checks what an
// operator would: /metrics answers with the host name given, the host's
// CLI finds the agent's socket in the data directory mounted at the same
// path, the agent runs as the image's user with no capabilities and the
// Docker socket's group, the version is stamped, and SIGTERM stops it
// cleanly. The Dockerfile's builder stage (golang image, cgo) needs a
// registry and is not run here.
func TestImage(t *testing.T) {
	cli := dockertest.Client(t)
	sock := dockertest.EngineSocket(cli)
	if sock == "" {
		t.Fatalf("the engine is reached at %s, not a Unix socket the container can mount", cli.DaemonHost())
	}
	harness.Binary(t) // the host's CLI; it also tells go test's cache which sources the test reads
	bin := stampedBinary(t)
	base := glibcBase(t, cli, bin)
	img := buildImage(t, cli, base, bin)

	t.Run("config", func(t *testing.T) { checkImageConfig(t, cli, img) })
	t.Run("version", func(t *testing.T) {
		code, out, stderr := runToEnd(t, cli, img, nil, "version")
		want := fmt.Sprintf("gpumeter %s\n  commit:     %s\n  built:      %s\n", testVersion, testCommit, testDate)
		if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "cgo, NVML:  yes") {
			t.Errorf("version in the image: status %d, stdout:\n%s\nstderr: %s\nwant it to start with:\n%s", code, out, stderr, want)
		}
	})

	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	sockGID := int(fi.Sys().(*syscall.Stat_t).Gid)
	t.Run("docker socket group", func(t *testing.T) {
		// The image's user reaches Docker through the socket's group,
		// added at run time, and only through it.
		mount := func(hc *mcontainer.HostConfig) {
			hc.Binds = []string{sock + ":/var/run/docker.sock"}
			hc.ReadonlyRootfs = true
			hc.CapDrop = []string{"ALL"}
		}
		for _, tt := range []struct {
			name     string
			groupAdd []string
			want     string
		}{
			{"with --group-add", []string{strconv.Itoa(sockGID)}, "PASS"},
			{"without", nil, "FAIL"},
		} {
			_, out, stderr := runToEnd(t, cli, img, func(hc *mcontainer.HostConfig) { mount(hc); hc.GroupAdd = tt.groupAdd }, "doctor", "--format", "json")
			if got := doctorStatus(t, out, "docker.engine"); got != tt.want {
				t.Errorf("%s: doctor's docker.engine is %s, want %s; stdout:\n%s\nstderr: %s", tt.name, got, tt.want, out, stderr)
			}
		}
	})

	t.Run("PID namespace", func(t *testing.T) {
		// Without --pid=host the agent's PID 1 is itself: doctor must
		// say so, not pass. With it, PID 1 is the host's init, whose
		// namespace link the image's user may not read: a warning at
		// most.
		for _, tt := range []struct {
			name, pid string
			ok        func(string) bool
			want      string
		}{
			{"without --pid=host", "", func(s string) bool { return s == "FAIL" }, "FAIL"},
			{"with --pid=host", "host", func(s string) bool { return s == "PASS" || s == "WARN" }, "PASS or WARN"},
		} {
			_, out, stderr := runToEnd(t, cli, img, func(hc *mcontainer.HostConfig) { hc.PidMode = mcontainer.PidMode(tt.pid); hc.CapDrop = []string{"ALL"} }, "doctor", "--format", "json")
			if got := doctorStatus(t, out, "gpumeter.pid_namespace"); !tt.ok(got) {
				t.Errorf("%s: doctor's gpumeter.pid_namespace is %s, want %s; stdout:\n%s\nstderr: %s", tt.name, got, tt.want, out, stderr)
			}
		}
	})

	t.Run("serve --demo", func(t *testing.T) { serveDemo(t, cli, img, sock, sockGID) })
}

func serveDemo(t *testing.T, cli *client.Client, img, sock string, sockGID int) {
	// The data directory, at the same path inside and out, owned by the
	// image's user. Under /tmp: a socket's path has at most about 100
	// bytes.
	dataDir, err := os.MkdirTemp("", "gpm-image")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	if err := os.Chown(dataDir, agentUID, agentUID); err != nil {
		t.Fatalf("give the data directory to uid %d (the test must run as root): %v", agentUID, err)
	}
	if err := os.Chmod(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}

	// A mount root, at the same path inside and out as the README says,
	// that nobody (the job's user) may read.
	mountRoot, err := os.MkdirTemp("", "gpm-image-mnt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mountRoot) })
	if err := os.Chmod(mountRoot, 0o755); err != nil {
		t.Fatal(err)
	}

	port := network.MustParsePort("9400/tcp")
	hc := readmeHostConfig(sock, dataDir, sockGID)
	hc.Binds = append(hc.Binds, mountRoot+":"+mountRoot+":ro")
	hc.PortBindings = network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1")}}}
	cfg := &mcontainer.Config{
		Image:    img,
		Hostname: node,
		// The demo keeps its socket in a directory of its own unless
		// api.socket names one: here the data directory's, where the
		// host's CLI finds an agent's, standing in for the real one.
		Env: []string{"GPUMETER_HOSTNAME=" + node, "GPUMETER_DATA_DIR=" + dataDir, "GPUMETER_API_SOCKET=" + filepath.Join(dataDir, "api.sock"),
			"GPUMETER_HOST_CGROUP_ROOT=/host/sys/fs/cgroup", "GPUMETER_HOST_PASSWD_FILE=/host/etc/passwd", "GPUMETER_HOST_GROUP_FILE=/host/etc/group",
			"GPUMETER_QUEUE_ENABLED=true", "GPUMETER_QUEUE_IMAGES=localhost/job:*", "GPUMETER_QUEUE_MOUNT_ROOTS=" + mountRoot},
		Cmd:    []string{"serve", "--demo"},
		Labels: map[string]string{dockertest.Label: "1"},
	}
	id := create(t, cli, "agent", cfg, hc)
	start(t, cli, id)
	in := dockertest.Inspect(t, cli, id)
	binds := in.NetworkSettings.Ports[port]
	if len(binds) == 0 {
		t.Fatalf("port 9400 is not published: %v", in.NetworkSettings.Ports)
	}
	url := "http://127.0.0.1:" + binds[0].HostPort

	var metrics string
	dockertest.WaitFor(t, 30*time.Second, "/metrics of the agent in the container", func() (bool, string) {
		if st := dockertest.Inspect(t, cli, id).State; !st.Running {
			stdout, stderr := logs(t, cli, id)
			t.Fatalf("the agent's container exited with %d; stdout:\n%s\nstderr:\n%s", st.ExitCode, stdout, stderr)
		}
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		metrics = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(metrics, "DCGM_FI_DEV_GPU_UTIL{"), resp.Status
	})
	for _, re := range []string{
		`(?m)^DCGM_FI_DEV_GPU_UTIL\{[^}]*Hostname="` + node + `"`,
		`(?m)^gpumeter_build_info\{[^}]*version="` + regexp.QuoteMeta(testVersion+"+"+testCommit[:12]) + `"`,
	} {
		if !regexp.MustCompile(re).MatchString(metrics) {
			t.Errorf("/metrics has no line matching %s:\n%.3000s", re, metrics)
		}
	}

	// The agent: the image's user, the socket's group, no capabilities.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", in.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		fmt.Sprintf(`(?m)^Uid:\t%d\t%d\t%d\t%d$`, agentUID, agentUID, agentUID, agentUID),
		fmt.Sprintf(`(?m)^Groups:.*\b%d\b`, sockGID),
		`(?m)^CapEff:\t0+$`,
		`(?m)^NoNewPrivs:\t1$`,
	} {
		if !regexp.MustCompile(re).MatchString(string(status)) {
			t.Errorf("the agent's /proc/%d/status has no line matching %s:\n%s", in.State.Pid, re, status)
		}
	}

	// --pid=host and --cgroupns=host: the agent is in the engine's
	// namespaces, which are this test's (it reads the agent's /proc).
	for _, ns := range []string{"pid", "cgroup"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		agents, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", in.State.Pid, ns))
		if err1 != nil || err2 != nil || mine != agents {
			t.Errorf("the agent's %s namespace is %q (%v), this test's %q (%v): want the host's", ns, agents, err2, mine, err1)
		}
	}

	// The host's CLI finds the agent through api.sock in the data
	// directory; root needs no token on it.
	if os.Geteuid() == 0 {
		env := []string{"GPUMETER_DATA_DIR=" + dataDir, "GPUMETER_URL=", "GPUMETER_TOKEN=", "GPUMETER_CLIENT_CONFIG=", "XDG_CONFIG_HOME=" + t.TempDir()}
		ps, stderr, code := harness.RunCLI(t, env, "ps")
		if code != 0 || !strings.HasPrefix(ps, "CONTAINER ID ") {
			t.Fatalf("gpumeter ps on the host: status %d, stdout:\n%s\nstderr: %s", code, ps, stderr)
		}
		// The completion of stop asks the same agent for its containers.
		names, stderr, code := harness.RunCLI(t, env, "__complete", "stop", "")
		lines := strings.Split(strings.TrimSpace(names), "\n")
		if code != 0 || len(lines) < 2 {
			t.Fatalf("__complete stop: status %d, stdout:\n%s\nstderr: %s", code, names, stderr)
		}
		for _, l := range lines[:len(lines)-1] {
			name, _, _ := strings.Cut(l, "\t")
			if strings.HasPrefix(name, "gpumeter-test-") || strings.HasPrefix(name, "gpumeter-job-") {
				// Other tests' containers on the same engine (this
				// test's own agents among them) come and go between
				// the two calls.
				continue
			}
			if !strings.Contains(ps, " "+name+" ") {
				t.Errorf("stop completes to %q, which ps does not list:\n%s", name, ps)
			}
		}
	}

	// As shipped (uid 65532, no capabilities) the agent cannot stage a
	// job's mounts, so it refuses a job with one at submit, saying how to
	// run it so that it can; a job without mounts it takes.
	if os.Geteuid() == 0 {
		env := []string{"GPUMETER_DATA_DIR=" + dataDir, "GPUMETER_URL=", "GPUMETER_TOKEN=", "GPUMETER_CLIENT_CONFIG=", "XDG_CONFIG_HOME=" + t.TempDir()}
		submit := []string{"submit", "--as", "nobody", "--gpus", "1", "--time-limit", "5m", "--image", "localhost/job:1"}
		out, stderr, code := harness.RunCLI(t, env, append(submit, "--mount", mountRoot+":/data:ro", "--", "run")...)
		for _, want := range []string{"mount_not_allowed", "CAP_SYS_ADMIN", "--cap-add SYS_ADMIN", "-v /var/lib/gpumeter:/var/lib/gpumeter:rshared"} {
			if code == 0 || !strings.Contains(stderr, want) {
				t.Errorf("submit with a mount to the image's agent: status %d, stdout %q, stderr %q; want it refused saying %q", code, out, stderr, want)
			}
		}
		if out, stderr, code := harness.RunCLI(t, env, append(submit, "--", "run")...); code != 0 {
			t.Errorf("submit without mounts to the image's agent: status %d, stdout %q, stderr %q", code, out, stderr)
		}
	}

	// docker stop: SIGTERM, and a clean exit within the grace: status 0,
	// where the engine's kill at the grace's end would give 137.
	timeout := 20
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	began := time.Now()
	if _, err := cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	st := dockertest.Inspect(t, cli, id).State
	if st.ExitCode != 0 {
		stdout, stderr := logs(t, cli, id)
		t.Errorf("after docker stop the agent exited with %d in %v; stdout:\n%s\nstderr:\n%s", st.ExitCode, time.Since(began), stdout, stderr)
	}
}

// readmeHostConfig is the README's docker run line but for --gpus all,
// -p and the image: the host's PID and cgroup namespaces, the Docker
// socket and its group, the data directory at the same path, the host's
// cgroups, passwd and group files read-only, a read-only root, no
// capabilities and no new privileges.
func readmeHostConfig(sock, dataDir string, sockGID int) *mcontainer.HostConfig {
	return &mcontainer.HostConfig{
		PidMode:        "host",
		CgroupnsMode:   mcontainer.CgroupnsModeHost,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("uid=%d,gid=%d", agentUID, agentUID)},
		GroupAdd:       []string{strconv.Itoa(sockGID)},
		Binds: []string{
			sock + ":/var/run/docker.sock",
			dataDir + ":" + dataDir,
			"/sys/fs/cgroup:/host/sys/fs/cgroup:ro",
			"/etc/passwd:/host/etc/passwd:ro",
			"/etc/group:/host/etc/group:ro",
		},
	}
}

func checkImageConfig(t *testing.T, cli *client.Client, img string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ImageInspect(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Config
	if c == nil {
		t.Fatal("the image has no config")
	}
	if c.User != fmt.Sprintf("%d:%d", agentUID, agentUID) {
		t.Errorf("User %q, want the non-root %d:%d", c.User, agentUID, agentUID)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/gpumeter"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("Entrypoint %q Cmd %q, want gpumeter serve", c.Entrypoint, c.Cmd)
	}
	for _, e := range []string{"NVIDIA_DRIVER_CAPABILITIES=utility", "NVIDIA_VISIBLE_DEVICES=all", "GPUMETER_DATA_DIR=/var/lib/gpumeter"} {
		if !slices.Contains(c.Env, e) {
			t.Errorf("Env %q has no %s", c.Env, e)
		}
	}
	if _, ok := c.ExposedPorts["9400/tcp"]; !ok {
		t.Errorf("ExposedPorts %v, want 9400/tcp", c.ExposedPorts)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testCommit,
		"org.opencontainers.image.created":  testDate,
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s is %q, want %q", k, got, want)
		}
	}
}

// ldflagsRE finds the -ldflags of the Dockerfile's go build, which stamp
// the build arguments (the comments' examples stamp none).
var ldflagsRE = regexp.MustCompile(`-ldflags "([^"]*\$\{VERSION\}[^"]*)"`)

// stampedBinary builds gpumeter with the -ldflags of the Dockerfile's
// builder stage, its build arguments replaced by the test's, so that the
// names it stamps are checked even though that stage does not run here.
func stampedBinary(t *testing.T) string {
	t.Helper()
	df, err := os.ReadFile(harness.RepoFile("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := ldflagsRE.FindSubmatch(df)
	if m == nil {
		t.Fatal(`the Dockerfile has no -ldflags "..." in its build`)
	}
	flags := strings.NewReplacer("${VERSION}", testVersion, "${COMMIT}", testCommit, "${BUILD_DATE}", testDate).Replace(string(m[1]))
	if strings.Contains(flags, "$") {
		t.Fatalf("the Dockerfile's -ldflags %q use a build argument the test does not know", m[1])
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool builds the binary: %v", err)
	}
	out := filepath.Join(t.TempDir(), "gpumeter")
	cmd := exec.Command(goTool, "build", "-trimpath", "-buildvcs=false", "-ldflags", flags, "-o", out, "./cmd/gpumeter")
	cmd.Dir = harness.RepoFile(".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", flags, err, b)
	}
	return out
}

// glibcBase imports an image holding what a glibc base holds for the
// binary: its dynamic loader and the libraries it needs, with theirs,
// taken from this host, the others of glibc that NVML's libraries load,
// and /etc/passwd, /etc/group and /tmp. It is removed when the test ends.
func glibcBase(t *testing.T, cli *client.Client, bin string) string {
	t.Helper()
	files := map[string]bool{} // host paths, copied to the same path
	var need func(elfPath string)
	need = func(elfPath string) {
		f, err := elf.Open(elfPath)
		if err != nil {
			t.Fatalf("read %s: %v", elfPath, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimRight(string(b), "\x00")] = true
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			t.Fatal(err)
		}
		for _, lib := range libs {
			p, ok := findLib(lib)
			if !ok {
				t.Fatalf("%s needs %s, which is in none of %s", elfPath, lib, strings.Join(libDirs(), ", "))
			}
			if !files[p] {
				files[p] = true
				need(p)
			}
		}
	}
	need(bin)
	// What NVML's libraries and the resolver open besides.
	for _, lib := range []string{"libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1", "libresolv.so.2"} {
		if p, ok := findLib(lib); ok {
			files[p] = true
		}
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(d string, mode int64) {
		var chain []string
		for ; d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			dirs[chain[i]] = true
			m := int64(0o755)
			if i == 0 {
				m = mode
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(chain[i], "/") + "/", Mode: m}); err != nil {
				t.Fatal(err)
			}
		}
	}
	addFile := func(name string, mode int64, body []byte) {
		addDir(path.Dir(name), 0o755)
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(name, "/"), Mode: mode, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		body, err := os.ReadFile(p) // the file a link names, at the link's path
		if err != nil {
			t.Fatal(err)
		}
		addFile(p, 0o755, body)
	}
	addFile("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"))
	addFile("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	addFile("/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\n"))
	addDir("/tmp", 0o1777)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	ref := "gpumeter-test-base:" + run
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{"LABEL " + dockertest.Label + "=1"}})
	if err != nil {
		t.Fatalf("docker import %s: %v", ref, err)
	}
	defer res.Close()
	if err := dockertest.StreamError(res); err != nil {
		t.Fatalf("docker import %s: %v", ref, err)
	}
	t.Cleanup(func() { removeImage(t, cli, ref) })
	t.Logf("base %s: %s", ref, strings.Join(paths, " "))
	return ref
}

// libDirs are where the host's dynamic loader looks for libraries.
func libDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	dirs := []string{"/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	if triplet != "" {
		dirs = append([]string{"/lib/" + triplet, "/usr/lib/" + triplet}, dirs...)
	}
	return dirs
}

func findLib(name string) (string, bool) {
	for _, d := range libDirs() {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, true
		}
	}
	return "", false
}

// buildImage builds the Dockerfile's "prebuilt" target on base with bin,
// with the build arguments a release would give. It is removed when the
// test ends.
func buildImage(t *testing.T, cli *client.Client, base, bin string) string {
	t.Helper()
	df, err := os.ReadFile(harness.RepoFile("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{{"Dockerfile", 0o644, df}, {"gpumeter", 0o755, body}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ref := "gpumeter-test-image:" + run
	arg := func(s string) *string { return &s }
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags:       []string{ref},
		Dockerfile: "Dockerfile",
		Target:     "prebuilt",
		BuildArgs: map[string]*string{"BASE": arg(base), "VERSION": arg(testVersion), "COMMIT": arg(testCommit),
			"BUILD_DATE": arg(testDate), "BINARY": arg("gpumeter")},
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{dockertest.Label: "1"},
	})
	if err != nil {
		t.Fatalf("docker build --target prebuilt: %v", err)
	}
	defer res.Body.Close()
	// Removed even when the build fails halfway, leaving the tag.
	t.Cleanup(func() { removeImage(t, cli, ref) })
	if err := dockertest.StreamError(res.Body); err != nil {
		t.Fatalf("docker build --target prebuilt --build-arg BASE=%s: %v", base, err)
	}
	return ref
}

func removeImage(t *testing.T, cli *client.Client, ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("remove image %s: %v", ref, err)
	}
}

var seq int

// create creates a container of the test's, labelled, removed when the
// test ends.
func create(t *testing.T, cli *client.Client, name string, cfg *mcontainer.Config, hc *mcontainer.HostConfig) string {
	t.Helper()
	seq++
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: fmt.Sprintf("gpumeter-test-image-%s-%s-%d", run, name, seq), Config: cfg, HostConfig: hc})
	if err != nil {
		t.Fatalf("create the %s container: %v", name, err)
	}
	t.Cleanup(func() { dockertest.Remove(t, cli, res.ID) })
	return res.ID
}

func start(t *testing.T, cli *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %.12s: %v", id, err)
	}
}

// runToEnd runs img with args, a read-only root and no capabilities
// unless host says otherwise, and returns its exit status and output.
func runToEnd(t *testing.T, cli *client.Client, img string, host func(*mcontainer.HostConfig), args ...string) (code int, stdout, stderr string) {
	t.Helper()
	hc := &mcontainer.HostConfig{ReadonlyRootfs: true, CapDrop: []string{"ALL"}}
	if host != nil {
		host(hc)
	}
	id := create(t, cli, args[0], &mcontainer.Config{Image: img, Cmd: args, Labels: map[string]string{dockertest.Label: "1"}}, hc)
	start(t, cli, id)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	w := cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: mcontainer.WaitConditionNotRunning})
	select {
	case r := <-w.Result:
		code = int(r.StatusCode)
	case err := <-w.Error:
		t.Fatalf("wait for %q: %v", args, err)
	}
	stdout, stderr = logs(t, cli, id)
	return code, stdout, stderr
}

func logs(t *testing.T, cli *client.Client, id string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs of %.12s: %v", id, err)
	}
	defer rc.Close()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, rc); err != nil {
		t.Fatalf("logs of %.12s: %v", id, err)
	}
	return out.String(), errb.String()
}

// doctorStatus is the status doctor's JSON gives the check id.
func doctorStatus(t *testing.T, out, id string) string {
	t.Helper()
	var rep struct {
		Checks []struct{ ID, Status string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --format json: %v\n%s", err, out)
	}
	for _, c := range rep.Checks {
		if c.ID == id {
			return c.Status
		}
	}
	return "missing"
}
