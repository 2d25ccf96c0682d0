package queue

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// scenario is a host of four GPUs whose GPU processes are the real
// containers that carry gpumeter.sim labels or are given GPUs.
const scenario = `version: 1
node: e2e-queue
duration: 24h
docker:
  containers: from_labels
gpus:
  - count: 4
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 100W
    max_power: 500W
`

// The host users of the tests: their uids are the jobs' uids.
const (
	aliceUID = 2001
	bobUID   = 2002
	carolUID = 2003
	labGID   = 3000 // a supplementary group of alice and bob
)

// host is what the agents of one test share: the engine, the config,
// the ledger's directory, the tokens, the node name. Its agents are
// killed, and every job container of its node removed, when the test
// ends.
type host struct {
	cli       *client.Client
	image     string
	node      string
	dir       string // config, scenario, passwd and group files
	dataDir   string // ledger and socket
	mountRoot string
	config    string
	// port is the one host port queue.publish_ports allows: free when
	// the host was made, so that tests beside this one (in this package
	// or another checkout's) do not want the same port of the engine.
	port int
	// The secrets of the tokens of the test's users, and the admin's.
	alice, bob, carol, viewer, rooty, admin string
	agent                                   *agent
	// listen, when set, is the address the agent serves on (a fleet's
	// agents give theirs to each other); else a free one each start.
	listen string
}

// agent is one run of `gpumeter serve` on a host.
type agent struct {
	*harness.Agent
	h *host
}

// newHost writes the config of an agent with the queue on, and extra
// (YAML under queue:) added to its queue section.
func newHost(t *testing.T, extra string) *host {
	t.Helper()
	dockertest.LockGPUs(t)
	return makeHost(t, extra)
}

// makeHost is newHost for a test that holds the GPU lock already: one
// whose hosts share the engine (a fleet).
func makeHost(t *testing.T, extra string) *host {
	t.Helper()
	cli := dockertest.Client(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	h := &host{cli: cli, image: dockertest.SleeperImage(t, cli), node: "e2e-q-" + hex.EncodeToString(suffix), dir: t.TempDir(), port: freePort(t)}
	// Registered first, so run last: after the agents are killed.
	t.Cleanup(func() { removeJobContainers(t, cli, h.node) })
	var err error
	// A short directory: a socket's path has at most 107 bytes.
	if h.dataDir, err = os.MkdirTemp("", "gq"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A killed agent leaves its running jobs' mounts staged under
		// the data directory: detached first, so that RemoveAll never
		// deletes a job's source through its bind.
		detachBelow(t, h.dataDir)
		os.RemoveAll(h.dataDir)
	})
	if err := os.Chmod(h.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Jobs run as alice and bob: the mount root must be theirs to read.
	h.mountRoot = filepath.Join(h.dir, "mnt")
	for _, d := range []string{h.dir, h.mountRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(h.dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	passwd := harness.WriteText(t, filepath.Join(h.dir, "passwd"), fmt.Sprintf(
		"root:x:0:0::/root:/bin/sh\nalice:x:%d:%d::/home/alice:/bin/sh\nbob:x:%d:%d::/home/bob:/bin/sh\ncarol:x:%d:%d::/home/carol:/bin/sh\nrooty:x:0:0::/root:/bin/sh\n",
		aliceUID, aliceUID, bobUID, bobUID, carolUID, carolUID))
	group := harness.WriteText(t, filepath.Join(h.dir, "group"), fmt.Sprintf(
		"root:x:0:\nalice:x:%d:\nbob:x:%d:\ncarol:x:%d:\nlab:x:%d:alice,bob\n", aliceUID, bobUID, carolUID, labGID))
	harness.WriteText(t, filepath.Join(h.dir, "scenario.yaml"), scenario)

	var tokens strings.Builder
	for _, u := range []struct {
		secret *string
		name   string
		role   config.Role
	}{{&h.alice, "alice", config.RoleUser}, {&h.bob, "bob", config.RoleUser}, {&h.carol, "carol", config.RoleUser}, {&h.viewer, "vera", config.RoleViewer}, {&h.rooty, "rooty", config.RoleUser}} {
		secret, tok, err := auth.NewToken(u.name, u.name, u.role, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		*u.secret = secret
		fmt.Fprintf(&tokens, "    %s: %s\n", tok.ID, strconv.Quote(tok.Entry()))
	}
	h.admin = harness.AdminToken()
	cfg := fmt.Sprintf(`hostname: %s
docker:
  enabled: true
host:
  passwd_file: %s
  group_file: %s
api:
  rate_limit: 0
auth:
  tokens:
%squeue:
  enabled: true
  images: ["gpumeter-test-sleeper:*", "gpumeter-test-probe:*", "gpumeter-test-swapper:*"]
  gpu_passing: env
  mount_roots: [%s]
  stop_grace: 1s
  publish_ports: ["%d"]
%s`, h.node, strconv.Quote(passwd), strconv.Quote(group), tokens.String(), strconv.Quote(h.mountRoot), h.port, extra)
	h.config = harness.WriteFile(t, filepath.Join(h.dir, "gpumeter.yaml"), cfg, 0o600)
	return h
}

// freePort is a TCP port no one listens on now, as the kernel picks one.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs an agent on h and waits for its first sample; it is
// stopped when the test ends unless the test ended it.
func (h *host) start(t *testing.T) *agent {
	t.Helper()
	args := []string{"--config", h.config, "--sim", filepath.Join(h.dir, "scenario.yaml"), "--interval", "200ms"}
	if h.listen != "" {
		args = append(args, "--listen", h.listen)
	}
	a := harness.Launch(t, h.dataDir, args...)
	// One the test did not end gets SIGTERM and must exit cleanly, jobs
	// running or not (before Launch's own cleanup, which would kill it).
	t.Cleanup(func() {
		select {
		case <-a.Exited:
		default:
			a.Stop(t)
		}
	})
	h.agent = &agent{Agent: a, h: h}
	return h.agent
}

// socket is the agent's CLI socket: root on it is an admin.
func (h *host) socket() string { return filepath.Join(h.dataDir, "api.sock") }

// rootCLI runs the command line as root on the agent's socket.
func (h *host) rootCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return harness.RunCLI(t, []string{"GPUMETER_URL=unix://" + h.socket(), "GPUMETER_DATA_DIR=" + h.dataDir}, args...)
}

// userCLI runs the command line over HTTP with token.
func (a *agent) userCLI(t *testing.T, token string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return harness.RunCLI(t, []string{"GPUMETER_URL=" + a.URL, "GPUMETER_TOKEN=" + token}, args...)
}

// submitCLI submits a job for user with the command line on the socket
// and returns its id.
func (h *host) submitCLI(t *testing.T, user string, gpus int, limit string, cmd ...string) string {
	t.Helper()
	args := append([]string{"submit", "--as", user, "--gpus", strconv.Itoa(gpus), "--time-limit", limit, "--image", h.image, "--"}, cmd...)
	out, errOut, code := h.rootCLI(t, args...)
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "j-") {
		t.Fatalf("gpumeter %s: exit %d, stdout %q, stderr %s", strings.Join(args, " "), code, out, errOut)
	}
	return id
}

// call sends a request with token ("" sends none) and body (nil sends
// none), and returns the status and body of the answer.
func (a *agent) call(t *testing.T, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				t.Fatal(err)
			}
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// request is a job request of one GPU running the sleeper with cmd.
func (h *host) request(gpus int, limit string, cmd ...string) apitype.JobRequest {
	return apitype.JobRequest{GPUs: gpus, TimeLimit: limit, Image: h.image, Command: cmd}
}

// submit posts req with token and wants it accepted.
func (a *agent) submit(t *testing.T, token string, req apitype.JobRequest) apitype.Job {
	t.Helper()
	status, body := a.call(t, http.MethodPost, "/api/v1/jobs", token, req)
	if status != http.StatusOK && status != http.StatusCreated {
		t.Fatalf("POST /api/v1/jobs: %d %s", status, body)
	}
	var j apitype.Job
	if err := json.Unmarshal(body, &j); err != nil || j.ID == "" {
		t.Fatalf("POST /api/v1/jobs: %v: %s", err, body)
	}
	return j
}

// refused posts body with token and wants a 400 with code and, for
// code refused, the reason.
func (a *agent) refused(t *testing.T, token string, body any, code, reason string) apitype.Error {
	t.Helper()
	status, out := a.call(t, http.MethodPost, "/api/v1/jobs", token, body)
	var e apitype.Error
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("POST /api/v1/jobs: %d, body %s: %v", status, out, err)
	}
	if status != http.StatusBadRequest || e.Code != code || e.Reason != reason {
		t.Errorf("POST /api/v1/jobs: %d code %q reason %q (%s); want 400 code %q reason %q", status, e.Code, e.Reason, e.Message, code, reason)
	}
	if e.Message == "" {
		t.Errorf("POST /api/v1/jobs: refused with no message: %s", out)
	}
	return e
}

// job reads a job as the admin.
func (a *agent) job(t *testing.T, id string) apitype.Job {
	t.Helper()
	status, body := a.call(t, http.MethodGet, "/api/v1/jobs/"+id, a.h.admin, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/v1/jobs/%s: %d %s", id, status, body)
	}
	var j apitype.Job
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// await waits until job id is in one of states and returns it.
func (a *agent) await(t *testing.T, id string, timeout time.Duration, states ...string) apitype.Job {
	t.Helper()
	var j apitype.Job
	dockertest.WaitFor(t, timeout, "job "+id+" in "+strings.Join(states, "|"), func() (bool, string) {
		j = a.job(t, id)
		return slices.Contains(states, j.State), j.State + " " + j.Reason + ": " + j.ReasonText
	})
	return j
}

// post sends a verb (cancel, hold, release) on job id with token.
func (a *agent) post(t *testing.T, id, verb, token string) (int, apitype.Error) {
	t.Helper()
	status, body := a.call(t, http.MethodPost, "/api/v1/jobs/"+id+"/"+verb, token, []byte(`{}`))
	var e apitype.Error
	if status != http.StatusOK {
		_ = json.Unmarshal(body, &e)
	}
	return status, e
}

// queueGPUs is gpumeter_queue_gpus by state.
func (a *agent) queueGPUs(t *testing.T) map[string]float64 {
	t.Helper()
	m := a.Scrape(t)
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "gpumeter_queue_gpus{") {
			continue
		}
		for _, s := range []string{"held", "free", "outside"} {
			if strings.Contains(k, `state="`+s+`"`) {
				out[s] += v
			}
		}
	}
	return out
}

// jobContainers lists the containers of the engine named for job id on
// node, running or not.
func jobContainers(t *testing.T, cli *client.Client, node, id string) []mcontainer.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("name", spec.ContainerName(node, id))})
	if err != nil {
		t.Fatal(err)
	}
	var out []mcontainer.Summary
	for _, c := range res.Items {
		// The name filter matches a part of the name.
		if slices.Contains(c.Names, "/"+spec.ContainerName(node, id)) {
			out = append(out, c)
		}
	}
	return out
}

// removeJobContainers removes every job container of node, and then the
// node's isolated network, which an agent killed before it could remove
// it leaves behind.
func removeJobContainers(t *testing.T, cli *client.Client, node string) {
	harness.RemoveNodeJobs(t, cli, node)
}

// detachBelow detaches every mount below dir, deepest first.
func detachBelow(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("read the mounts: %v", err)
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("detach %s: %v", p, err)
		}
	}
}

// fmtGPUs shows gpumeter_queue_gpus for a failure message.
func fmtGPUs(g map[string]float64) string {
	return fmt.Sprintf("held %v, free %v, outside %v", g["held"], g["free"], g["outside"])
}
