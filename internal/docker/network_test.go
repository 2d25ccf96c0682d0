package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// netEnv is one test's node on the machine's engine: its own node name,
// so its isolated network and job containers are its own, and both
// removed when the test ends.
type netEnv struct {
	cli   *client.Client
	jobs  *Jobs
	node  string
	image string
	rules spec.Rules
}

func newNetEnv(t testing.TB) *netEnv {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.LockGPUs(t) // the job containers name GPUs in their env
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &netEnv{cli: cli, node: "nettest-" + hex.EncodeToString(b), image: dockertest.ProbeImage(t, cli)}
	e.jobs = newJobs(t, "", e.node)
	// Registered before any container's removal, so run after it.
	t.Cleanup(func() { dockertest.RemoveNetwork(t, cli, spec.NetworkName(e.node)) })
	e.rules = spec.Rules{Images: []string{"gpumeter-test-probe:*"}, PublishPorts: []spec.PortRange{{First: 1024, Last: 65535}}}
	return e
}

// job starts a job container of the probe for who, running cmd, on the
// rules' network; it is removed when the test ends.
func (e *netEnv) job(t testing.TB, who spec.Identity, publish []string, cmd ...string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	req := spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: e.image, Command: cmd, Publish: publish}
	s, err := spec.Build(req, e.rules, who, "t-"+hex.EncodeToString(b), []string{"GPU-test-0"}, spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	s.ForNode(e.node)
	s.Config.Labels[dockertest.Label] = "1"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := e.jobs.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.Remove(t, e.cli, id) })
	if err := e.jobs.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// logs is what container id has printed so far.
func (e *netEnv) logs(t testing.TB, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b bytes.Buffer
	if err := e.jobs.Logs(ctx, id, false, &b); err != nil {
		t.Fatalf("logs of %.12s: %v", id, err)
	}
	return b.String()
}

// exited waits for container id to exit and returns its exit code and
// output.
func (e *netEnv) exited(t testing.TB, id string) (int, string) {
	t.Helper()
	var code int
	dockertest.WaitFor(t, 2*time.Minute, "the probe to exit", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := e.jobs.Inspect(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		code = c.ExitCode
		return c.Exited, fmt.Sprintf("%+v", c)
	})
	return code, e.logs(t, id)
}

// address is container id's address on network name.
func (e *netEnv) address(t testing.TB, id, name string) netip.Addr {
	t.Helper()
	got := dockertest.Inspect(t, e.cli, id)
	ep, ok := got.NetworkSettings.Networks[name]
	if !ok || !ep.IPAddress.IsValid() {
		t.Fatalf("container %.12s has no address on %s: %+v", id, name, got.NetworkSettings.Networks)
	}
	return ep.IPAddress
}

var (
	netAlice = spec.Identity{UID: 4242, GID: 4242, User: "alice"}
	netBob   = spec.Identity{UID: 4243, GID: 4243, User: "bob"}
)

// dialTimeout bounds a dial that must fail: a dropped SYN is never
// answered, so a refused connection shows as this timeout passing.
const dialTimeout = "5s"

// TestIsolatedNetwork: on the node's isolated network bob's job cannot
// reach alice's listening job at its address, while the host can (so it
// was listening); a job reaches a listener on the host at the network's
// gateway; and alice's published port answers on the publish address.
func TestIsolatedNetwork(t *testing.T) {
	e := newNetEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nw, err := e.jobs.EnsureIsolatedNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !nw.Created || nw.Name != spec.NetworkName(e.node) || !nw.Gateway.IsValid() {
		t.Fatalf("network %+v, want %s created with a gateway", nw, spec.NetworkName(e.node))
	}
	e.rules.Network = nw.Name

	hostPort := freePort(t)
	alice := e.job(t, netAlice, []string{strconv.Itoa(hostPort) + ":8080"}, "listen", "8080")
	dockertest.WaitFor(t, 2*time.Minute, "alice's job to listen", func() (bool, string) {
		out := e.logs(t, alice)
		return strings.Contains(out, dockertest.ProbeListening), out
	})
	addr := netip.AddrPortFrom(e.address(t, alice, nw.Name), 8080).String()

	// The host reaches alice's job at its address: it listens.
	if line, err := greet(addr); err != nil || line != dockertest.ProbeGreeting {
		t.Fatalf("the host's dial of alice's job at %s: %q, %v", addr, line, err)
	}
	// alice's published port answers on the publish address.
	published := net.JoinHostPort(spec.DefaultPublishAddress, strconv.Itoa(hostPort))
	if line, err := greet(published); err != nil || line != dockertest.ProbeGreeting {
		t.Errorf("alice's published port %s: %q, %v", published, line, err)
	}

	bob := e.job(t, netBob, nil, "dial", addr, dialTimeout)
	if code, out := e.exited(t, bob); code == 0 || !strings.Contains(out, "dial failed") {
		t.Errorf("bob's job dialled alice's at %s: exit %d, %q; want it refused", addr, code, out)
	}

	// A service on the host, at the network's gateway address.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(nw.Gateway, 0).String())
	if err != nil {
		t.Fatalf("listen on the gateway %s: %v", nw.Gateway, err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, dockertest.ProbeGreeting)
			c.Close()
		}
	}()
	toHost := e.job(t, netBob, nil, "dial", ln.Addr().String(), "1m")
	if code, out := e.exited(t, toHost); code != 0 || !strings.Contains(out, "dial ok: "+dockertest.ProbeGreeting) {
		t.Errorf("bob's job dialled the host at %s: exit %d, %q; want the greeting", ln.Addr(), code, out)
	}

	// The control: on a bridge with traffic between containers on, as
	// Docker's default bridge has it, the same dial gets through, so the
	// refusal above is the isolation's.
	shared := "gpumeter-test-" + e.node + "-shared"
	if _, err := e.cli.NetworkCreate(ctx, shared, client.NetworkCreateOptions{Driver: "bridge", Labels: map[string]string{dockertest.Label: "1"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.RemoveNetwork(t, e.cli, shared) })
	e.rules.Network = shared
	listener := e.job(t, netAlice, nil, "listen", "8080")
	dockertest.WaitFor(t, 2*time.Minute, "alice's job on the shared network to listen", func() (bool, string) {
		out := e.logs(t, listener)
		return strings.Contains(out, dockertest.ProbeListening), out
	})
	addr = netip.AddrPortFrom(e.address(t, listener, shared), 8080).String()
	dialer := e.job(t, netBob, nil, "dial", addr, "1m")
	if code, out := e.exited(t, dialer); code != 0 || !strings.Contains(out, "dial ok: "+dockertest.ProbeGreeting) {
		t.Errorf("on a shared network bob's job dialled alice's at %s: exit %d, %q; want the greeting", addr, code, out)
	}
}

// greet dials addr from the host and reads the line it answers.
func greet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// freePort is a TCP port no one on the host listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestEnsureIsolatedNetworkOwnership: the agent reuses the network it
// made, refuses one of the name it did not make, and removes its own when
// no container is on it.
func TestEnsureIsolatedNetworkOwnership(t *testing.T) {
	e := newNetEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := e.jobs.EnsureIsolatedNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.jobs.EnsureIsolatedNetwork(ctx)
	if err != nil || again.ID != first.ID || again.Created {
		t.Errorf("second ensure: %+v, %v; want %.12s found, not created", again, err, first.ID)
	}
	got, err := e.cli.NetworkInspect(ctx, first.ID, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Network; n.Driver != "bridge" || n.Options[iccOption] != "false" ||
		n.Labels[NetworkLabel] != NetworkIsolated || n.Labels[spec.NodeLabel] != e.node {
		t.Errorf("network: driver %q options %v labels %v", n.Driver, n.Options, n.Labels)
	}
	if err := e.jobs.RemoveIsolatedNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.NetworkInspect(ctx, first.ID, client.NetworkInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect after remove: %v, want not found", err)
	}
	if err := e.jobs.RemoveIsolatedNetwork(ctx); err != nil {
		t.Errorf("remove of a network already gone: %v", err)
	}

	// A network of the name that someone else made.
	name := spec.NetworkName(e.node)
	if _, err := e.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Labels: map[string]string{dockertest.Label: "1"}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.jobs.EnsureIsolatedNetwork(ctx)
	if err == nil || !strings.Contains(err.Error(), "gpumeter did not create it") || !strings.Contains(err.Error(), "docker network rm "+name) {
		t.Errorf("ensure over a foreign network: %v, want a refusal naming the fix", err)
	}
	if err := e.jobs.RemoveIsolatedNetwork(ctx); err == nil {
		t.Error("remove of a foreign network: no error, want a refusal")
	}
	dockertest.RemoveNetwork(t, e.cli, name)

	// One labelled as ours whose traffic between containers is on.
	if _, err := e.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge",
		Labels: map[string]string{NetworkLabel: NetworkIsolated, spec.NodeLabel: e.node}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.EnsureIsolatedNetwork(ctx); err == nil || !strings.Contains(err.Error(), iccOption+"=false") {
		t.Errorf("ensure over a network with traffic between containers on: %v, want a refusal", err)
	}
}

// BenchmarkJobStartByNetwork is Docker's own time to take a job container
// from create to running (create + start; start returns once the process
// runs) on the node's isolated network and on none; p50_ms and p90_ms are
// over the iterations (run it with -benchtime=30x).
func BenchmarkJobStartByNetwork(b *testing.B) {
	for _, mode := range []string{"none", spec.IsolatedNetwork} {
		b.Run(mode, func(b *testing.B) {
			e := newNetEnv(b)
			e.rules.Network = mode
			if mode == spec.IsolatedNetwork {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				nw, err := e.jobs.EnsureIsolatedNetwork(ctx)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				e.rules.Network = nw.Name
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				buf := make([]byte, 4)
				_, _ = rand.Read(buf)
				req := spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: e.image, Command: []string{"listen", "8080"}}
				s, err := spec.Build(req, e.rules, netAlice, "b-"+hex.EncodeToString(buf), []string{"GPU-test-0"}, spec.Env)
				if err != nil {
					b.Fatal(err)
				}
				s.ForNode(e.node)
				s.Config.Labels[dockertest.Label] = "1"
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				b.StartTimer()
				start := time.Now()
				id, err := e.jobs.Create(ctx, s)
				if err == nil {
					err = e.jobs.Start(ctx, id)
				}
				took = append(took, time.Since(start))
				b.StopTimer()
				cancel()
				if id != "" {
					// Another test's clean-up may be removing it too.
					rm, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, rmErr := e.cli.ContainerRemove(rm, id, client.ContainerRemoveOptions{Force: true})
					cancel()
					if rmErr != nil && !cerrdefs.IsNotFound(rmErr) && !cerrdefs.IsConflict(rmErr) {
						b.Fatalf("remove %.12s: %v", id, rmErr)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1e3, "p50_ms")
			b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1e3, "p90_ms")
		})
	}
}

// TestIsolatedJobsMakeTheNetworkFirst: an agent that started while the
// engine was away creates its first job on a network made for it then;
// and an engine that is not there is told apart from one that refuses.
func TestIsolatedJobsMakeTheNetworkFirst(t *testing.T) {
	gone := newJobs(t, "unix://"+t.TempDir()+"/no-docker.sock", "nowhere")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := gone.EnsureIsolatedNetwork(ctx); !CannotReach(err) {
		t.Errorf("ensure with no engine: %v, want one CannotReach knows", err)
	}

	e := newNetEnv(t)
	e.rules.Network = spec.NetworkName(e.node)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	req := spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: e.image, Command: []string{"listen", "8080"}}
	s, err := spec.Build(req, e.rules, netAlice, "t-"+hex.EncodeToString(b), []string{"GPU-test-0"}, spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	s.ForNode(e.node)
	s.Config.Labels[dockertest.Label] = "1"
	id, err := IsolatedJobs{Jobs: e.jobs}.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.Remove(t, e.cli, id) })
	if err := e.jobs.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.address(t, id, e.rules.Network)
	if CannotReach(errors.New("no such image")) {
		t.Error("CannotReach of a refusal: true")
	}
}
