package run

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// privateDaemon is a dockerd of the test's own, with its socket, data
// root, exec root and pidfile under a short directory in /tmp (a Unix
// socket's path has at most 107 bytes), no bridge and no iptables rules,
// and a network namespace of its own, so that it touches nothing of the
// machine's engine. The test stops
// and starts it as an engine restart would.
type privateDaemon struct {
	bin, dir, sock string
	args           []string
	cmd            *exec.Cmd
	done           chan error
	cli            *client.Client
}

// newPrivateDaemon starts a private dockerd, with --live-restore when
// liveRestore is set. It is stopped, its mounts detached and its
// directory removed when the test ends.
func newPrivateDaemon(t *testing.T, liveRestore bool) *privateDaemon {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping a private Docker engine in -short mode")
	}
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		testenv.SkipUnlessCI(t, "no dockerd to start a private engine with (%v)", err)
	}
	if os.Geteuid() != 0 {
		testenv.SkipUnlessCI(t, "a private dockerd needs root")
	}
	dir, err := os.MkdirTemp("/tmp", "gmd")
	if err != nil {
		t.Fatal(err)
	}
	d := &privateDaemon{bin: bin, dir: dir, sock: filepath.Join(dir, "d.sock")}
	t.Cleanup(func() { d.close(t) })
	// The machine's daemon.json sets data-root, and dockerd refuses a
	// setting given both in a file and as a flag: an empty file of its own.
	if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.args = []string{"--config-file", filepath.Join(dir, "c.json"), "--bridge=none", "--iptables=false",
		"--host", "unix://" + d.sock, "--data-root", filepath.Join(dir, "root"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "d.pid")}
	if liveRestore {
		d.args = append(d.args, "--live-restore")
	}
	d.start(t)
	if d.cli, err = client.New(client.WithHost("unix://" + d.sock)); err != nil {
		t.Fatal(err)
	}
	return d
}

// start starts dockerd and waits until it answers.
func (d *privateDaemon) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(d.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	d.cmd = exec.Command(d.bin, d.args...)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	// A network namespace of its own: dockerd with --bridge=none deletes
	// any docker0 it sees, which in the machine's namespace is the
	// machine's engine's bridge (every container start on it fails then).
	// Its jobs run with network none, so it needs no network.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	d.done = make(chan error, 1)
	go func(c *exec.Cmd, done chan<- error) { done <- c.Wait() }(d.cmd, d.done)
	cli, err := client.New(client.WithHost("unix://" + d.sock))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	dockertest.WaitFor(t, time.Minute, "the private dockerd answering", func() (bool, string) {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("the private dockerd exited: %v; its log ends: %s", err, d.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// stop sends dockerd SIGTERM, as systemctl stop does, and waits for it
// to exit.
func (d *privateDaemon) stop(t *testing.T) {
	t.Helper()
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(2 * time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("the private dockerd did not stop on SIGTERM; killed; its log ends: %s", d.logTail())
	}
	d.cmd = nil
}

// close removes the daemon's containers, stops it, detaches every mount
// under its directory (dockerd leaves its data root a shared bind mount,
// and the overlay mounts of its containers), and removes the directory.
func (d *privateDaemon) close(t *testing.T) {
	t.Helper()
	if d.cmd != nil && d.cli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true}); err == nil {
			for _, c := range res.Items {
				if _, err := d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
					t.Errorf("remove a private engine's container: %v", err)
				}
			}
		}
		cancel()
	}
	if d.cli != nil {
		d.cli.Close()
		d.cli = nil
	}
	d.stop(t)
	mounts, err := mountsUnder(d.dir)
	if err != nil {
		t.Error(err)
	}
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			t.Errorf("unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(d.dir); err != nil {
		t.Errorf("remove the private engine's directory: %v", err)
	}
}

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (d *privateDaemon) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// loadImage copies image from the machine's engine into the private one.
func (d *privateDaemon) loadImage(t *testing.T, from *client.Client, image string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	saved, err := from.ImageSave(ctx, []string{image})
	if err != nil {
		t.Fatalf("save %s: %v", image, err)
	}
	defer saved.Close()
	loaded, err := d.cli.ImageLoad(ctx, saved)
	if err != nil {
		t.Fatalf("load %s into the private engine: %v", image, err)
	}
	defer loaded.Close()
	if err := dockertest.StreamError(loaded); err != nil {
		t.Fatalf("load %s into the private engine: %v", image, err)
	}
	_, _ = io.Copy(io.Discard, loaded)
}

// newPrivateEngineEnv is a queue over the private daemon d, with
// queue.network none (the daemon has no bridge).
func newPrivateEngineEnv(t *testing.T, d *privateDaemon, n int) *engineEnv {
	t.Helper()
	return newEngineEnvAt(t, n, func(cli *client.Client) string {
		d.loadImage(t, cli, dockertest.SleeperImage(t, cli))
		return "unix://" + d.sock
	}, func(c *Config) { c.Rules.Network = "none" })
}

// machineEngineStillWorks fails the test when the machine's engine no
// longer starts a container after a private daemon ran beside it.
func machineEngineStillWorks(t *testing.T, d *privateDaemon) {
	t.Helper()
	d.close(t)
	cli := dockertest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("gpumeter-test-after-private-dockerd-%d", os.Getpid())
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
		Config: &mcontainer.Config{Image: dockertest.SleeperImage(t, cli), Cmd: []string{"exit-after", "0s", "0"}}})
	if err != nil {
		t.Fatalf("the machine's engine no longer creates a container after the private dockerd: %v", err)
	}
	defer func() {
		if _, err := cli.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove %s: %v", name, err)
		}
	}()
	// On the default bridge: the network a private dockerd broke before.
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Errorf("the machine's engine no longer starts a container after the private dockerd: %v", err)
	}
}

// TestEngineRestartWithLiveRestore: jobs running on a dockerd with
// --live-restore, restarted under them (SIGTERM, then started again),
// end succeeded, with no attempt or requeue counted and one container
// each: the queue adopts them once the engine is back.
func TestEngineRestartWithLiveRestore(t *testing.T) {
	d := newPrivateDaemon(t, true)
	e := newPrivateEngineEnv(t, d, 2)
	var ids []string
	for range 2 {
		ids = append(ids, e.submit(t, "alice", e.exitAfter("20s", "0")).ID)
	}
	for _, id := range ids {
		e.waitState(t, id, queue.Running)
	}
	d.stop(t)
	time.Sleep(2 * time.Second)
	d.start(t)
	for _, id := range ids {
		j := e.waitEnded(t, id)
		if j.State != queue.Succeeded || exitCode(j) != "0" || j.Attempts != 0 || j.Requeues != 0 {
			t.Errorf("job %s across a live-restore restart: %s (%s: %s) exit %s, %d attempts, %d requeues; want succeeded, exit 0, none",
				id, j.State, j.Reason, j.ReasonText, exitCode(j), j.Attempts, j.Requeues)
		}
	}
	if n := e.engine.createdCount(); n != len(ids) {
		t.Errorf("%d containers created for %d jobs", n, len(ids))
	}
	e.stop()
	machineEngineStillWorks(t, d)
}

// TestEngineStopKillsJobs: without --live-restore, a daemon's stop kills
// the running job containers (these ignore SIGTERM, as a process that is
// PID 1 without a handler does, so they die of the SIGKILL after the stop
// timeout). Once the daemon is back, the jobs are back in the queue as
// engine_failure, counting no requeue (a lost job's requeue would count
// one), and run again in new containers.
func TestEngineStopKillsJobs(t *testing.T) {
	d := newPrivateDaemon(t, false)
	e := newPrivateEngineEnv(t, d, 2)
	var ids []string
	old := map[string]string{}
	for range 2 {
		r := e.sleeper()
		r.Command = []string{"ignore-term"}
		ids = append(ids, e.submit(t, "alice", r).ID)
	}
	for _, id := range ids {
		old[id] = e.waitState(t, id, queue.Running).ContainerID
	}
	d.stop(t)
	d.start(t)
	for _, id := range ids {
		dockertest.WaitFor(t, 2*time.Minute, id+" running again in a new container", func() (bool, string) {
			j, err := e.q.Job(context.Background(), id)
			if err != nil {
				return false, err.Error()
			}
			return j.State == queue.Running && j.ContainerID != old[id], fmt.Sprintf("%s %s: %s", j.State, j.Reason, j.ReasonText)
		})
		j, _ := e.q.Job(context.Background(), id)
		if j.Requeues != 0 || j.Attempts != 0 {
			t.Errorf("job %s: %d requeues, %d attempts; want none counted for the engine's stop", id, j.Requeues, j.Attempts)
		}
	}
	requeued := 0
	for _, a := range e.auditActions(t) {
		if action, id, _ := strings.Cut(a, " "); action == "jobs.requeue" && slices.Contains(ids, id) {
			requeued++
		}
	}
	if requeued != len(ids) {
		t.Errorf("%d requeues audited, want %d", requeued, len(ids))
	}
	e.stop()
	machineEngineStillWorks(t, d)
}
