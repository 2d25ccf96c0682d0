package docker

// Helpers for the tests that run against a real Docker engine: reaching the
// daemon, the test image, test containers, a socket proxy that can be cut,
// and a ProcReader over this machine's /proc.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/container"
)

const (
	testImage = "gpumeter-test-sleeper:1"
	testLabel = "gpumeter.test"
	// opTimeout bounds one Docker call of the test itself; an engine on a
	// busy machine can take seconds to create or start a container.
	opTimeout = time.Minute
	// settle is how long an event-driven change may take to show.
	settle = 10 * time.Second
	// sleeperExitCode is what the test binary exits with on SIGTERM, so
	// that a recorded exit code is never a default zero.
	sleeperExitCode = 3
)

// testRun names this process's test containers, so that parallel runs on
// one engine never touch each other's.
var testRun = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// dockerClient returns a client for the engine named by the environment
// (DOCKER_HOST or the default socket). Without a reachable engine the test
// is skipped, or fails when CI is set: CI must not pass by skipping.
func dockerClient(t testing.TB) *client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping Docker engine test in -short mode")
	}
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	}
	if err != nil {
		if inCI() {
			t.Fatalf("CI is set, so this test needs a Docker engine, but none is reachable: %v", err)
		}
		t.Skipf("skipping: no Docker engine reachable (%v); with CI=true this fails instead", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// inCI reports whether CI is set to anything but an explicit false.
func inCI() bool {
	v := os.Getenv("CI")
	b, err := strconv.ParseBool(v)
	return b || (err != nil && v != "")
}

const sleeperSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// The container's main process: it waits for SIGTERM and exits 3, or with
// the argument ignore-term ignores SIGTERM until it is killed.
func main() {
	if len(os.Args) > 1 && os.Args[1] == "ignore-term" {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		for {
			time.Sleep(time.Hour)
		}
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	os.Exit(3)
}
`

var buildImage struct {
	once sync.Once
	err  error
}

// sleeperImage builds testImage once per test binary: a FROM scratch image
// holding a static Go binary, so no registry is needed.
func sleeperImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	buildImage.once.Do(func() { buildImage.err = buildSleeper(cli) })
	if buildImage.err != nil {
		t.Fatalf("build %s: %v", testImage, buildImage.err)
	}
	return testImage
}

func buildSleeper(cli *client.Client) error {
	dir, err := os.MkdirTemp("", "gpumeter-sleeper")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"main.go": sleeperSource,
		"go.mod":  "module sleeper\n\ngo 1.22\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go tool is needed to build the test image: %w", err)
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", "sleeper", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "sleeper"))
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY sleeper /sleeper\nENTRYPOINT [\"/sleeper\"]\n")},
		{"sleeper", 0o755, bin},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body))}); err != nil {
			return err
		}
		if _, err := tw.Write(f.body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags:        []string{testImage},
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{testLabel: "1"},
	})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	// The build reports failure inside its JSON stream, not as an HTTP error.
	dec := json.NewDecoder(res.Body)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read build output: %w", err)
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

// spec describes a test container.
type spec struct {
	name   string
	labels map[string]string
	user   string
	env    []string
	cmd    []string
	hc     *mcontainer.HostConfig
	create bool // create only, do not start
}

// testContainer creates (and unless s.create, starts) a container named
// with this run's prefix and labelled gpumeter.test=1; it is removed when
// the test ends, pass or fail.
func testContainer(t *testing.T, cli *client.Client, s spec) (id, name string) {
	t.Helper()
	labels := map[string]string{testLabel: "1"}
	for k, v := range s.labels {
		labels[k] = v
	}
	name = "gpumeter-test-" + testRun + "-" + s.name
	img := sleeperImage(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     &mcontainer.Config{Image: img, User: s.user, Env: s.env, Cmd: s.cmd, Labels: labels},
		HostConfig: s.hc,
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { removeContainer(t, cli, res.ID) })
	if !s.create {
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
	}
	return res.ID, name
}

func removeContainer(t testing.TB, cli *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("remove container %.12s: %v", id, err)
	}
}

func inspect(t testing.TB, cli *client.Client, id string) mcontainer.InspectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %.12s: %v", id, err)
	}
	return res.Container
}

// startInventory runs an inventory for cfg until the test ends and waits
// for its first connection.
func startInventory(t *testing.T, cfg Config) *Inventory {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	inv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() = %v, want nil after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of cancel")
		}
	})
	waitFor(t, 2*settle, "inventory connected", func() (bool, string) {
		return inv.Connected(), "not connected"
	})
	return inv
}

// waitFor polls cond until it holds or timeout passes; state says what
// was seen last, for the failure message.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listed returns the inventory's containers by ID.
func listed(t testing.TB, inv *Inventory) map[string]container.Container {
	t.Helper()
	list, err := inv.Containers(context.Background(), time.Now())
	if err != nil {
		t.Errorf("Containers(): %v", err)
	}
	m := make(map[string]container.Container, len(list))
	for _, c := range list {
		m[c.ID] = c
	}
	return m
}

// socketProxy forwards a Unix socket to the engine's socket, and can be cut
// (listener and every connection closed) and restored on the same path.
type socketProxy struct {
	path, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newSocketProxy(t *testing.T, target string) *socketProxy {
	t.Helper()
	p := &socketProxy{path: filepath.Join(t.TempDir(), "docker.sock"), target: target, conns: make(map[net.Conn]struct{})}
	p.start(t)
	t.Cleanup(p.stop)
	return p
}

func (p *socketProxy) start(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
}

func (p *socketProxy) serve(c net.Conn) {
	up, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// track registers a connection pair, or closes it when the proxy has been
// cut meanwhile.
func (p *socketProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// stop closes the listener (which removes the socket file) and every
// connection, and waits until nothing is left running.
func (p *socketProxy) stop() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// engineSocket returns the path of the engine's Unix socket, or "" when the
// client reaches it some other way.
func engineSocket(cli *client.Client) string {
	path, ok := strings.CutPrefix(cli.DaemonHost(), "unix://")
	if !ok {
		return ""
	}
	return path
}

// hostProcs is a ProcReader over this machine's /proc with a fixed
// password database, so that uids map to known names.
type hostProcs struct {
	names map[int]string
}

func (h hostProcs) ProcessUser(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				break
			}
			uid, err := strconv.Atoi(fields[0])
			if err != nil {
				return "", err
			}
			if name := h.UserName(uid); name != "" {
				return name, nil
			}
			return fields[0], nil
		}
	}
	return "", fmt.Errorf("no Uid line in /proc/%d/status", pid)
}

func (h hostProcs) UserName(uid int) string { return h.names[uid] }

// Stats reads the main process only; the real adapter reads the cgroup.
func (h hostProcs) Stats(pid int) (float64, uint64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("bad stat")
	}
	fields := strings.Fields(string(stat[i+1:])) // fields[0] is field 3, state
	if len(fields) < 13 {
		return 0, 0, errors.New("short stat")
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	statm, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, 0, err
	}
	sf := strings.Fields(string(statm))
	if len(sf) < 2 {
		return 0, 0, errors.New("short statm")
	}
	rss, _ := strconv.ParseUint(sf[1], 10, 64)
	return (utime + stime) / 100, rss * uint64(os.Getpagesize()), nil
}
