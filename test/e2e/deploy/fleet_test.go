package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// fleetFiles are the compose files of a fleet's host, as the fleet
// file's comment says to name them.
const fleetFiles = "docker-compose.yml:docker-compose.fleet.yml"

// fleetEnv is what the fleet file asks of a host besides composeEnv.
var fleetEnv = []string{"GPUMETER_PG_HOST=gpu-1", "GPUMETER_PG_PASSWORD=0f3a9c5e7b21d4"}

// fleetConfig reads what docker-compose config makes of the fleet's
// files with env.
func fleetConfig(t *testing.T, env []string) (map[string]composeService, string) {
	t.Helper()
	out, stderr, err := dockerCompose(t, harness.RepoFile(composeDir), append([]string{"COMPOSE_FILE=" + fleetFiles}, env...), "config")
	if err != nil {
		t.Fatalf("docker-compose config of %s: %v\n%s", fleetFiles, err, stderr)
	}
	var cfg struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("docker-compose config wrote what is not YAML: %v\n%s", err, out)
	}
	return cfg.Services, out
}

// TestComposeFleet validates the fleet's compose file over the host's
// with docker-compose config (the images cannot be pulled here): it
// refuses to start without the database's host and password, makes the
// agent one of a fleet on that PostgreSQL, and offers PostgreSQL, with
// the same password, only under the profile "database". The agent's
// environment is then given to the real binary, on a PostgreSQL cluster
// of Debian's binaries: it takes it, joins the fleet and lists itself up.
func TestComposeFleet(t *testing.T) {
	for _, tt := range []struct{ unset, want string }{
		{"GPUMETER_PG_HOST", "set GPUMETER_PG_HOST to the host of the fleet's PostgreSQL"},
		{"GPUMETER_PG_PASSWORD", "set GPUMETER_PG_PASSWORD to the fleet's PostgreSQL password"},
		{"GPUMETER_HOSTNAME", "set GPUMETER_HOSTNAME to this host's name"},
	} {
		var env []string
		for _, kv := range append(slices.Clone(composeEnv), fleetEnv...) {
			if !strings.HasPrefix(kv, tt.unset+"=") {
				env = append(env, kv)
			}
		}
		_, stderr, err := dockerCompose(t, harness.RepoFile(composeDir), append(env, "COMPOSE_FILE="+fleetFiles), "config")
		if err == nil || !strings.Contains(stderr, tt.want) {
			t.Errorf("docker-compose config of the fleet without %s: %v, stderr %q; want a failure saying %q", tt.unset, err, stderr, tt.want)
		}
	}

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	node := "e2e-fleet-" + hex.EncodeToString(suffix)
	services, out := fleetConfig(t, append([]string{"GPUMETER_HOSTNAME=" + node, "DOCKER_GID=4242", "GRAFANA_ADMIN_PASSWORD=not-admin"}, fleetEnv...))
	g, pg := services["gpumeter"], services["postgres"]
	dsn, err := url.Parse(g.Environment["GPUMETER_LEDGER_DSN"])
	if err != nil {
		t.Fatalf("GPUMETER_LEDGER_DSN: %v", err)
	}
	password, _ := dsn.User.Password()
	checks := []struct {
		what string
		ok   bool
	}{
		{"the queue on", g.Environment["GPUMETER_QUEUE_ENABLED"] == "true"},
		{"the queue one of a fleet's", g.Environment["GPUMETER_QUEUE_FLEET"] == "true"},
		{"a DSN to the database's host as gpumeter", dsn.Scheme == "postgres" && dsn.Host == "gpu-1:5432" && dsn.User.Username() == "gpumeter" && dsn.Path == "/gpumeter"},
		{"the password in the DSN", password == "0f3a9c5e7b21d4"},
		{"the lease takeover of every host, 45s unless set", g.Environment["GPUMETER_LEDGER_LEASE_TAKEOVER"] == "45s"},
		{"the node's own name", g.Hostname == node && g.Environment["GPUMETER_HOSTNAME"] == node},
		{"the host's settings file, read-only", slices.Contains(g.Volumes, "/etc/gpumeter:/etc/gpumeter:ro")},
		// What docker-compose.yml gives the agent stays.
		{"the host's PID namespace", g.Pid == "host"},
		{"a read-only root", g.ReadOnly},
		{"the data directory at the same path", slices.Contains(g.Volumes, "/var/lib/gpumeter:/var/lib/gpumeter:rw")},
		{"PostgreSQL under the profile database only", slices.Equal(pg.Profiles, []string{"database"})},
		{"PostgreSQL's role and database gpumeter", pg.Environment["POSTGRES_USER"] == "gpumeter" && pg.Environment["POSTGRES_DB"] == "gpumeter"},
		{"PostgreSQL's password the DSN's", pg.Environment["POSTGRES_PASSWORD"] == password},
		{"PostgreSQL's data on the host", slices.ContainsFunc(pg.Volumes, func(v string) bool {
			return strings.HasPrefix(v, "/var/lib/gpumeter-postgres:/var/lib/postgresql/data")
		})},
		{"PostgreSQL's port published for the other hosts", slices.ContainsFunc(pg.Ports, func(p composePort) bool { return p.Published == 5432 && p.Target == 5432 })},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("the fleet's compose file lacks %s:\n%s", c.what, out)
		}
	}
	if t.Failed() {
		return
	}

	// The agent's environment, its paths taken back through the
	// service's volumes to this host's, the data directory the test's,
	// and the DSN the test cluster's with the compose DSN's options.
	hostPath := map[string]string{}
	for _, v := range g.Volumes {
		parts := strings.Split(v, ":")
		hostPath[parts[1]] = parts[0]
	}
	testDSN, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	q := testDSN.Query()
	for k, v := range dsn.Query() {
		q[k] = v
	}
	testDSN.RawQuery = q.Encode()
	dir := t.TempDir()
	// The settings docker-compose.fleet.yml leaves to /etc/gpumeter:
	// the test engine has no NVIDIA runtime.
	settings := harness.WriteFile(t, filepath.Join(dir, "gpumeter.yaml"), "queue:\n  images: [\"ghcr.io/lab/*\"]\n  gpu_passing: env\n", 0o644)
	scenario := harness.WriteText(t, filepath.Join(dir, "scenario.yaml"), fmt.Sprintf("version: 1\nnode: %s\nduration: 1h\ngpus:\n  - count: 2\n    model: NVIDIA H100 80GB HBM3\n    memory: 80GiB\n    idle_power: 100W\n    max_power: 500W\n", node))
	var env []string
	for k, v := range g.Environment {
		switch {
		case k == "GPUMETER_DATA_DIR":
			v = filepath.Join(dir, "data")
		case k == "GPUMETER_LEDGER_DSN":
			v = testDSN.String()
		case hostPath[v] != "":
			v = hostPath[v]
		}
		env = append(env, k+"="+v)
	}
	env = append(env, "GPUMETER_CONFIG="+settings)
	cli := dockertest.Client(t)
	t.Cleanup(func() { dockertest.RemoveNetwork(t, cli, spec.NetworkName(node)) })
	a := harness.Serve(t, env, "--sim", scenario, "--interval", "200ms")

	// The node registers with its first pass.
	var stdout string
	harness.WaitFor(t, 20*time.Second, node+" up in gpumeter nodes", func() bool {
		out, stderr, code := harness.RunCLI(t, []string{"GPUMETER_URL=" + a.URL, "GPUMETER_TOKEN=" + a.Token}, "nodes", "--format", "json")
		if code != 0 {
			t.Fatalf("gpumeter nodes: exit %d: %s", code, stderr)
		}
		stdout = out
		var ns apitype.Nodes
		if err := json.Unmarshal([]byte(out), &ns); err != nil {
			t.Fatalf("gpumeter nodes --format json: %v\n%s", err, out)
		}
		return len(ns.Nodes) == 1 && ns.Nodes[0].Node == node && ns.Nodes[0].State == apitype.NodeUp && len(ns.Nodes[0].GPUs) == 2
	})
	t.Logf("gpumeter nodes --format json: %s", stdout)
}
