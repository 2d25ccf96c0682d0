package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

const composeDir = "deploy/compose"

// composeEnv is the environment the compose file asks the operator for.
var composeEnv = []string{"GPUMETER_HOSTNAME=gpu-node-7", "DOCKER_GID=4242", "GRAFANA_ADMIN_PASSWORD=not-admin"}

// dockerCompose runs docker-compose in dir with the environment env and
// none of the variables the compose file reads from this process's.
func dockerCompose(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	dc := harness.Tool(t, "docker-compose", "docker-compose")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dc, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"GPUMETER_HOSTNAME", "DOCKER_GID", "GPUMETER_VERSION", "GRAFANA_ADMIN_PASSWORD", "COMPOSE_FILE", "COMPOSE_PROJECT_NAME",
			"GPUMETER_PG_HOST", "GPUMETER_PG_PORT", "GPUMETER_PG_PASSWORD", "GPUMETER_PG_SSLMODE", "GPUMETER_LEDGER_LEASE_TAKEOVER", "GPUMETER_QUEUE_FLEET_API"}, k) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// composeService is what the test reads of a service in the file
// docker-compose config writes, every path absolute and every variable
// filled in.
type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	Hostname    string            `yaml:"hostname"`
	Environment map[string]string `yaml:"environment"`
	Pid         string            `yaml:"pid"`
	GroupAdd    []string          `yaml:"group_add"`
	ReadOnly    bool              `yaml:"read_only"`
	CapDrop     []string          `yaml:"cap_drop"`
	SecurityOpt []string          `yaml:"security_opt"`
	Tmpfs       []string          `yaml:"tmpfs"`
	Volumes     []string          `yaml:"volumes"`
	Command     []string          `yaml:"command"`
	Profiles    []string          `yaml:"profiles"`
	Ports       []composePort     `yaml:"ports"`
	Deploy      struct {
		Resources struct {
			Reservations struct {
				Devices []struct {
					Driver       string   `yaml:"driver"`
					Count        string   `yaml:"count"`
					Capabilities []string `yaml:"capabilities"`
				} `yaml:"devices"`
			} `yaml:"reservations"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
}

// composePort is a published port as docker-compose config writes it.
type composePort struct {
	Published int `yaml:"published"`
	Target    int `yaml:"target"`
}

// TestComposeConfig validates the compose stack with docker-compose
// config: the images (gpumeter's built from the Dockerfile, Prometheus',
// Grafana's) cannot be pulled or built here, so the stack is validated,
// not started. It then checks what the file must say for the agent to
// meter the host, and that the files it mounts exist and agree.
func TestComposeConfig(t *testing.T) {
	dir := harness.RepoFile(composeDir)
	for _, tt := range []struct{ unset, want string }{
		{"GPUMETER_HOSTNAME", "set GPUMETER_HOSTNAME to this host's name"},
		{"DOCKER_GID", "set DOCKER_GID to the Docker socket's group id"},
		// No well-known password for a dashboard on the network.
		{"GRAFANA_ADMIN_PASSWORD", "set GRAFANA_ADMIN_PASSWORD to the password of Grafana's admin user"},
	} {
		var env []string
		for _, kv := range composeEnv {
			if !strings.HasPrefix(kv, tt.unset+"=") {
				env = append(env, kv)
			}
		}
		_, stderr, err := dockerCompose(t, dir, env, "config")
		if err == nil || !strings.Contains(stderr, tt.want) {
			t.Errorf("docker-compose config without %s: %v, stderr %q; want a failure saying %q", tt.unset, err, stderr, tt.want)
		}
	}

	out, stderr, err := dockerCompose(t, dir, composeEnv, "config")
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, stderr)
	}
	var cfg struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("docker-compose config wrote what is not YAML: %v\n%s", err, out)
	}
	for _, name := range []string{"gpumeter", "prometheus", "grafana"} {
		if _, ok := cfg.Services[name]; !ok {
			t.Fatalf("the stack has no %s service:\n%s", name, out)
		}
	}

	g := cfg.Services["gpumeter"]
	if g.Build == nil || filepath.Join(g.Build.Context, g.Build.Dockerfile) != harness.RepoFile("Dockerfile") {
		t.Errorf("gpumeter builds from %+v, want the repository's Dockerfile", g.Build)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"the host's PID namespace (pid: host)", g.Pid == "host"},
		{"the host name as its hostname", g.Hostname == "gpu-node-7"},
		{"GPUMETER_HOSTNAME", g.Environment["GPUMETER_HOSTNAME"] == "gpu-node-7"},
		{"GPUMETER_DATA_DIR at the host's path", g.Environment["GPUMETER_DATA_DIR"] == "/var/lib/gpumeter"},
		{"the data directory at the same path", slices.Contains(g.Volumes, "/var/lib/gpumeter:/var/lib/gpumeter:rw")},
		{"the Docker socket", slices.Contains(g.Volumes, "/var/run/docker.sock:/var/run/docker.sock:rw")},
		{"the Docker socket's group", slices.Equal(g.GroupAdd, []string{"4242"})},
		{"the host's cgroups, read-only, where GPUMETER_HOST_CGROUP_ROOT says",
			slices.Contains(g.Volumes, "/sys/fs/cgroup:"+g.Environment["GPUMETER_HOST_CGROUP_ROOT"]+":ro")},
		{"the host's passwd file, read-only, where GPUMETER_HOST_PASSWD_FILE says",
			slices.Contains(g.Volumes, "/etc/passwd:"+g.Environment["GPUMETER_HOST_PASSWD_FILE"]+":ro")},
		{"NVIDIA_DRIVER_CAPABILITIES=utility", g.Environment["NVIDIA_DRIVER_CAPABILITIES"] == "utility"},
		{"a read-only root", g.ReadOnly},
		{"every capability dropped", slices.Equal(g.CapDrop, []string{"ALL"})},
		{"no new privileges", slices.Contains(g.SecurityOpt, "no-new-privileges:true")},
		{"a /tmp of the image's user", slices.Contains(g.Tmpfs, "/tmp:uid=65532,gid=65532")},
	}
	devs := g.Deploy.Resources.Reservations.Devices
	checks = append(checks, struct {
		what string
		ok   bool
	}{"every GPU through the nvidia driver", len(devs) == 1 && devs[0].Driver == "nvidia" && devs[0].Count == "all" && slices.Contains(devs[0].Capabilities, "gpu")})
	for _, c := range checks {
		if !c.ok {
			t.Errorf("the gpumeter service lacks %s:\n%s", c.what, out)
		}
	}

	// The files the stack mounts from the repository exist; each mount
	// target is where the service reads it.
	mounts := map[string]string{} // target -> source
	for _, name := range []string{"prometheus", "grafana"} {
		for _, v := range cfg.Services[name].Volumes {
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], "/") {
				continue // a named volume
			}
			if _, err := os.Stat(parts[0]); err != nil {
				t.Errorf("%s mounts %s, which does not exist: %v", name, parts[0], err)
			}
			mounts[parts[1]] = parts[0]
		}
	}
	checkPrometheus(t, mounts, cfg.Services["prometheus"].Command)
	checkGrafana(t, mounts)
}

// checkPrometheus: the Prometheus config the stack mounts scrapes the
// gpumeter service as job gpumeter (the rules' alerts select on it) and
// loads the rules from where the stack mounts them; promtool, with the
// rules' path put back to the repository's file, accepts it.
func checkPrometheus(t *testing.T, mounts map[string]string, command []string) {
	t.Helper()
	cfgTarget := ""
	for _, a := range command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			cfgTarget = v
		}
	}
	src, ok := mounts[cfgTarget]
	if !ok {
		t.Fatalf("prometheus reads --config.file=%q, which the stack does not mount (mounts %v)", cfgTarget, mounts)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var pc struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &pc); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	if len(pc.ScrapeConfigs) != 1 || pc.ScrapeConfigs[0].JobName != "gpumeter" || len(pc.ScrapeConfigs[0].StaticConfigs) != 1 ||
		!slices.Equal(pc.ScrapeConfigs[0].StaticConfigs[0].Targets, []string{"gpumeter:9400"}) {
		t.Errorf("%s scrapes %+v, want job gpumeter on gpumeter:9400", src, pc.ScrapeConfigs)
	}
	if len(pc.RuleFiles) != 1 || mounts[pc.RuleFiles[0]] != harness.RepoFile("deploy/prometheus/gpumeter-rules.yml") {
		t.Errorf("%s loads rules %q; the stack mounts %v, want deploy/prometheus/gpumeter-rules.yml at that path", src, pc.RuleFiles, mounts)
		return
	}
	promtool := harness.Tool(t, "promtool", "prometheus")
	local := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(b), pc.RuleFiles[0], mounts[pc.RuleFiles[0]])), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", local).CombinedOutput(); err != nil {
		t.Errorf("promtool check config (rules from the repository): %v\n%s", err, out)
	}
}

// checkGrafana: the dashboard provider finds gpumeter.json where the
// stack mounts it, and the data source is the stack's Prometheus.
func checkGrafana(t *testing.T, mounts map[string]string) {
	t.Helper()
	var provider, datasource string
	for target, src := range mounts {
		switch {
		case strings.HasPrefix(target, "/etc/grafana/provisioning/dashboards/"):
			provider = src
		case strings.HasPrefix(target, "/etc/grafana/provisioning/datasources/"):
			datasource = src
		}
	}
	if provider == "" || datasource == "" {
		t.Fatalf("grafana has no dashboard provider or no data source provisioned: mounts %v", mounts)
	}
	var p struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	b, err := os.ReadFile(provider)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &p); err != nil || len(p.Providers) != 1 {
		t.Fatalf("%s: %v, %d providers", provider, err, len(p.Providers))
	}
	dash := filepath.Join(p.Providers[0].Options.Path, "gpumeter.json")
	if mounts[dash] != harness.RepoFile("deploy/grafana/gpumeter.json") {
		t.Errorf("the provider reads %s, where the stack mounts %q, not deploy/grafana/gpumeter.json", p.Providers[0].Options.Path, mounts[dash])
	}
	var d struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	b, err = os.ReadFile(datasource)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &d); err != nil || len(d.Datasources) != 1 || d.Datasources[0].Type != "prometheus" || d.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("%s: %v, data sources %+v; want the stack's Prometheus at http://prometheus:9090", datasource, err, d.Datasources)
	}
}

// TestComposeCgroupHost: docker-compose 1.x refuses `cgroup: host`, which
// is why the file leaves it out and the README names the daemon's
// default-cgroupns-mode instead. A compose that takes it makes this test
// say so, and the file can then carry the key.
func TestComposeCgroupHost(t *testing.T) {
	ver, _, err := dockerCompose(t, t.TempDir(), nil, "version", "--short")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(harness.RepoFile(filepath.Join(composeDir, "docker-compose.yml")))
	if err != nil {
		t.Fatal(err)
	}
	with := strings.Replace(string(b), "    pid: host\n", "    pid: host\n    cgroup: host\n", 1)
	if with == string(b) {
		t.Fatal("the compose file has no `    pid: host` line to put cgroup: host after")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "docker-compose.yml"), []byte(with), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := dockerCompose(t, dir, composeEnv, "config", "--quiet")
	t.Logf("docker-compose %s with cgroup: host: %v %s", strings.TrimSpace(ver), err, strings.TrimSpace(stderr))
	if strings.HasPrefix(ver, "1.") && (err == nil || !strings.Contains(stderr, "cgroup")) {
		t.Errorf("docker-compose %s took cgroup: host (%v, %q): the file can carry it now", strings.TrimSpace(ver), err, stderr)
	}
}
