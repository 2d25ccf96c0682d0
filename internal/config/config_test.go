package config

import (
	"crypto/sha256"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseFull(t *testing.T) {
	got := Default()
	if err := got.LoadFile("testdata/full.yaml"); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Listen: "127.0.0.1:9500", Interval: 2 * time.Second, Hostname: "gpu-node-7", LogLevel: "debug",
		Source: "nvml", NVMLLibrary: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
		HostRoot: "/host", ProcRoot: "/host/proc", CgroupRoot: "/host/sys/fs/cgroup", PasswdFile: "/host/etc/passwd", GroupFile: "/host/etc/group",
		DockerEnabled: true, DockerHost: "unix:///run/docker.sock", DockerKeep: 10 * time.Minute,
		UserLabel: "lab.user", TeamLabel: "lab.team", ProjectLabel: "lab.project",
		IdlePower: map[string]float64{"NVIDIA H100 80GB HBM3": 70, "GPU-1234": 55.5},
		DataDir:   "/srv/gpumeter", LedgerEnabled: true, LedgerDSN: "postgres://gpumeter@db.lab/gpumeter",
		FlushInterval: 10 * time.Second, MinuteRetention: 35 * 24 * time.Hour, HourRetention: 36 * time.Hour, MaxPendingRows: 50000,
		Cost: Cost{
			Currency: "EUR", GPUHour: map[string]float64{"NVIDIA H100 80GB HBM3": 2.5, "default": 1.2},
			CPUCoreHour: 0.03, RAMGBHour: 0.004, KWh: 0.25, PUE: 1.4, Basis: "used", Idle: "weighted",
			Weights: map[string]float64{"gpu": 1, "cpu": 0.5},
		},
		AdviseDigest: "off",
		Waste: WasteRules{
			Idle:          IdleRule{Enabled: true, SMPercent: 2.5, CPUCores: 0.2, Window: 2 * time.Hour, Grace: 15 * time.Minute},
			Stalled:       StalledRule{Window: 45 * time.Minute},
			OverAllocated: OverAllocatedRule{Enabled: true, Window: 90 * time.Minute, Grace: 10 * time.Minute},
			TooOld:        TooOldRule{MaxAge: 7 * 24 * time.Hour, Grace: time.Hour},
			LowEfficiency: LowEfficiencyRule{Enabled: true, Threshold: 0.25, MinGPUHours: 2, Window: 8 * time.Hour, Grace: time.Hour},
			Outside:       OutsideRule{Enabled: true, UnaccountedMemory: 2 << 30, Window: 5 * time.Minute, Grace: time.Minute},
		},
		Policy: Policy{
			Actions:     PolicyActions{Idle: ActionStop, Stalled: ActionNotify},
			Webhook:     Webhook{URL: "https://hooks.example.com/gpumeter", Timeout: 3 * time.Second, Retries: 2},
			WarningWait: 15 * time.Minute, Grace: time.Minute,
			Exempt: Selectors{Labels: []string{"keep=yes", "team=infra"}, Names: []string{"notebook-*"},
				Images: []string{"registry.lab/serving/*"}, Owners: []string{"alice", "bob"}},
		},
		Queue: DefaultQueue(), // testdata/queue-lab.yaml sets the queue
		Auth: Auth{
			Tokens: map[string]Token{
				"alice-laptop": {ID: "alice-laptop", User: "alice", Role: RoleUser, Hash: sha256.Sum256([]byte("hello")), Expires: time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)},
				"grafana":      {ID: "grafana", User: "grafana", Role: RoleViewer, Hash: sha256.Sum256([]byte("world"))},
			},
			ClientCerts: map[string]CertUser{"ops.lab": {Name: "ops.lab", User: "ops", Role: RoleAdmin}},
			Anonymous:   "viewer",
		},
		API: APILimits{
			Socket: "/run/gpumeter/api.sock", MaxBodyBytes: 16 << 10, RateLimit: 20, RateBurst: 40,
			MaxReportWindow: 90 * 24 * time.Hour, MaxReportRows: 500, ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 20 * time.Second, SessionLifetime: 8 * time.Hour,
		},
		TLS:           TLS{CertFile: "/etc/gpumeter/tls/server.crt", KeyFile: "/etc/gpumeter/tls/server.key", ClientCAFile: "/etc/gpumeter/tls/clients.pem", ClientAuth: "required"},
		WebConfigFile: "/etc/gpumeter/web.yml",
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Config{})); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	// hour_retention is shorter than minute_retention in the file.
	if err := got.Validate(); err == nil || !strings.Contains(err.Error(), "ledger.hour_retention: 36h is shorter than ledger.minute_retention 35d") {
		t.Errorf("Validate() = %v, want the retention error", err)
	}
}

// TestDurationKeys: every duration setting reads the units grammar, days
// included, and writes its default back as a file would.
func TestDurationKeys(t *testing.T) {
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "0d": 0, " 2h ": 2 * time.Hour} {
		c := Default()
		if err := c.Set("ledger.hour_retention", in); err != nil || c.HourRetention != want {
			t.Errorf("Set(ledger.hour_retention, %q) = %v, %v; want %v", in, c.HourRetention, err, want)
		}
	}
	for _, in := range []string{"", "d", "7", "-1d", "1d-2h", "x7d", "99999999d", "1.5d"} {
		c := Default()
		if err := c.Set("ledger.hour_retention", in); err == nil {
			t.Errorf("Set(ledger.hour_retention, %q) = %v, want an error", in, c.HourRetention)
		}
	}
	for name, want := range map[string]string{"ledger.hour_retention": "400d", "ledger.minute_retention": "35d", "api.max_report_window": "400d", "interval": "1s", "docker.keep_stopped": "5m", "waste.idle.window": "1h"} {
		k, _ := lookup(name)
		if got := k.Default(); got != want {
			t.Errorf("%s default = %q, want %q", name, got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top key", "listen: :1\nlisen: :2\n", `cfg.yaml:2: unknown key "lisen"`},
		{"unknown nested key", "docker:\n  hots: x\n", `cfg.yaml:2: unknown key "docker.hots"`},
		{"suggestion", "Interval: 1s\n", `did you mean "interval"?`},
		{"bad duration", "interval: fast\n", `cfg.yaml:1: interval: "fast" is not a duration`},
		{"negative duration", "docker:\n  keep_stopped: -1m\n", `cfg.yaml:2: docker.keep_stopped: "-1m" is negative`},
		{"bad bool", "docker:\n  enabled: maybe\n", `cfg.yaml:2: docker.enabled: "maybe" is not true or false`},
		{"bad enum", "source: cuda\n", `cfg.yaml:1: source: "cuda" is not one of auto, nvml, sim, demo`},
		{"bad power", "idle_power:\n  H100: lots\n", `cfg.yaml:2: idle_power.H100: "lots" is not a power`},
		{"bad price", "cost:\n  gpu_hour:\n    A100: -2\n", `cfg.yaml:3: cost.gpu_hour.A100: "-2" is not a number of at least 0`},
		{"bad int", "ledger:\n  max_pending_rows: lots\n", `cfg.yaml:2: ledger.max_pending_rows: "lots" is not a whole number`},
		{"bad basis", "cost:\n  basis: maybe\n", `cfg.yaml:2: cost.basis: "maybe" is not one of allocated, present, used`},
		{"section not mapping", "docker: yes\n", `cfg.yaml:1: docker: want a mapping of keys`},
		{"scalar wants value", "listen: [a, b]\n", `cfg.yaml:1: listen: want a single value, got a list`},
		{"map wants mapping", "idle_power: 70W\n", `cfg.yaml:1: idle_power: want a mapping`},
		{"top not mapping", "- a\n- b\n", `cfg.yaml:1: top level: want a mapping of keys`},
		{"duplicate", "listen: :1\nlisten: :2\n", `cfg.yaml:2: listen: set twice`},
		{"syntax", "listen: :1\nhostname: \"unterminated\n", `cfg.yaml:2: found unexpected end of stream`},
		{"syntax on the first line", "listen: a: b\n", `cfg.yaml:1: mapping values are not allowed in this context`},
		{"syntax further down", "listen: :1\ninterval: 1s\ndocker:\n  host: x\n bad: 1\n", `cfg.yaml:5: did not find expected key`},
		{"bad character", "listen: :1\ninterval: 1s\nhostname: a\x01b\n", `cfg.yaml:3: control characters are not allowed`},
		{"near miss", "intervl: 1s\n", `cfg.yaml:1: unknown key "intervl"; did you mean "interval"?`},
		{"near miss nested", "ledger:\n  flush_intreval: 1s\n", `cfg.yaml:2: unknown key "ledger.flush_intreval"; did you mean "ledger.flush_interval"?`},
		{"no section", "flush_interval: 1s\n", `cfg.yaml:1: unknown key "flush_interval"; did you mean "ledger.flush_interval"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			err := c.Parse("cfg.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestUnknownKeyFarFromAny: a key close to none is not given a guess.
func TestUnknownKeyFarFromAny(t *testing.T) {
	c := Default()
	err := c.Parse("cfg.yaml", []byte("colour: blue\n"))
	if want := `cfg.yaml:1: unknown key "colour"`; err == nil || err.Error() != want {
		t.Errorf("Parse() = %v, want %s", err, want)
	}
	err = c.LoadEnv([]string{"GPUMETER_INTERVL=1s"})
	if want := "environment: GPUMETER_INTERVL names no setting; did you mean GPUMETER_INTERVAL?"; err == nil || err.Error() != want {
		t.Errorf("LoadEnv() = %v, want %s", err, want)
	}
}

// TestValidatePlaced: a value that parses but makes no sense is named
// with the file and line, or the variable, it came from; a flag that
// overrides it takes the blame off the file.
func TestValidatePlaced(t *testing.T) {
	c := Default()
	if err := c.Parse("cfg.yaml", []byte("listen: :1\ninterval: 0s\nidle_power:\n  H100: 70W\ntls:\n  cert_file: /x.crt\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadEnv([]string{"GPUMETER_LEDGER_MINUTE_RETENTION=30m"}); err != nil {
		t.Fatal(err)
	}
	c.IdlePower["H100"] = -1 // as if set in code: the file's line no longer holds
	err := c.Validate()
	for _, want := range []string{
		"cfg.yaml:2: interval: 0s is outside 10ms..1h",
		"environment GPUMETER_LEDGER_MINUTE_RETENTION: ledger.minute_retention: 30m is shorter than an hour",
		"cfg.yaml:6: tls.cert_file, tls.key_file: set both or neither",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want a line %q", err, want)
		}
	}
	if err := c.Set("interval", "2h"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "\ninterval: 2h is outside 10ms..1h") && !strings.HasPrefix(err.Error(), "interval: 2h is outside") {
		t.Errorf("Validate() after a flag = %v, want the interval named without the file", err)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "~\n"} {
		c := Default()
		if err := c.Parse("cfg.yaml", []byte(in)); err != nil {
			t.Errorf("Parse(%q) = %v, want nil", in, err)
		}
		if diff := cmp.Diff(Default(), c, cmpopts.IgnoreUnexported(Config{})); diff != "" {
			t.Errorf("Parse(%q) changed the defaults:\n%s", in, diff)
		}
	}
}

func TestLoadFileMissing(t *testing.T) {
	c := Default()
	err := c.LoadFile("testdata/nope.yaml")
	if err == nil || !strings.Contains(err.Error(), "testdata/nope.yaml") {
		t.Errorf("LoadFile() error = %v, want one naming the file", err)
	}
}

// TestScenarioUnits: a config file reads the values a scenario file does
// (internal/sim's TestParseUnits): days, a bare number of watts, a
// fraction that makes whole bytes; and refuses the bytes that are not.
func TestScenarioUnits(t *testing.T) {
	c := Default()
	err := c.Parse("cfg.yaml", []byte("idle_power:\n  H100: 70\n  A100: 50.5 W\nledger:\n  minute_retention: 1d\n  hour_retention: 1d12h\nwaste:\n  outside:\n    unaccounted_memory: 1.5GiB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.IdlePower["H100"] != 70 || c.IdlePower["A100"] != 50.5 || c.MinuteRetention != 24*time.Hour || c.HourRetention != 36*time.Hour || c.Waste.Outside.UnaccountedMemory != 3<<29 {
		t.Errorf("got idle power %v, retention %v and %v, unaccounted memory %d; want 70 and 50.5, 1d and 1d12h, 1.5GiB", c.IdlePower, c.MinuteRetention, c.HourRetention, c.Waste.Outside.UnaccountedMemory)
	}
	err = c.Parse("cfg.yaml", []byte("api:\n  max_body: 0.1KiB\n"))
	if want := `cfg.yaml:2: api.max_body: "0.1KiB" is not a whole number of bytes`; err == nil || err.Error() != want {
		t.Errorf("a fraction of a byte: %v, want %s", err, want)
	}
}

func TestLoadEnv(t *testing.T) {
	c := Default()
	err := c.LoadEnv([]string{
		"PATH=/bin",
		"GPUMETER_LISTEN=:9999",
		"GPUMETER_DOCKER_HOST=tcp://127.0.0.1:2375",
		"GPUMETER_IDLE_POWER=A100=50W,H100=70",
		"GPUMETER_CONFIG=/etc/x.yaml",
		// The test suites' own variables, set as the README says.
		"GPUMETER_TEST_PG_DSN=postgres://localhost/test",
		"GPUMETER_TEST_PG_BIN=/usr/lib/postgresql/16/bin",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":9999" || c.DockerHost != "tcp://127.0.0.1:2375" {
		t.Errorf("got listen %q docker host %q", c.Listen, c.DockerHost)
	}
	if diff := cmp.Diff(map[string]float64{"A100": 50, "H100": 70}, c.IdlePower); diff != "" {
		t.Errorf("idle power (-want +got):\n%s", diff)
	}

	for env, want := range map[string]string{
		"GPUMETER_LISTN=:1":       "GPUMETER_LISTN names no setting",
		"GPUMETER_INTERVAL=1x":    `environment GPUMETER_INTERVAL: interval: "1x" is not a duration`,
		"GPUMETER_IDLE_POWER=70W": "idle_power: want name=value",
	} {
		c := Default()
		if err := c.LoadEnv([]string{env}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadEnv(%q) = %v, want it to contain %q", env, err, want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"listen", func(c *Config) { c.Listen = "9400" }, `listen: "9400" is not host:port`},
		{"interval small", func(c *Config) { c.Interval = time.Millisecond }, "interval: 1ms is outside"},
		{"interval large", func(c *Config) { c.Interval = 2 * time.Hour }, "interval: 2h is outside"},
		{"sim needs file", func(c *Config) { c.Source = "sim" }, "sim_file: source sim needs a scenario file"},
		{"empty label", func(c *Config) { c.UserLabel = "" }, "labels.user: must not be empty"},
		{"negative idle", func(c *Config) { c.IdlePower["x"] = -1 }, "idle_power.x: -1W is negative"},
		{"flush", func(c *Config) { c.FlushInterval = time.Hour }, "ledger.flush_interval: 1h is outside"},
		{"takeover", func(c *Config) { c.LeaseTakeover = 10 * time.Second }, "ledger.lease_takeover: 10s is shorter than 3 × ledger.flush_interval (15s)"},
		{"takeover negative", func(c *Config) { c.LeaseTakeover = -time.Second }, "ledger.lease_takeover: -1s is shorter"},
		{"pending", func(c *Config) { c.MaxPendingRows = 5 }, "ledger.max_pending_rows: 5 is below 1000"},
		{"pue", func(c *Config) { c.Cost.PUE = 0.5 }, "cost.pue: 0.5 is below 1"},
		{"weight", func(c *Config) { c.Cost.Weights["gpus"] = 1 }, "cost.weights.gpus: not a resource"},
		{"data dir", func(c *Config) { c.DataDir = "" }, "data_dir: must not be empty"},
		{"waste threshold", func(c *Config) { c.Waste.Idle.SMPercent = -1 }, "waste.idle.sm_percent: -1 is negative"},
		{"waste grace", func(c *Config) { c.Waste.Stalled.Grace = time.Hour }, "waste.stalled.grace: 1h0m0s is longer than the window, 30m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	c := Default()
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(Default()) = %v", err)
	}
}

func TestKeysNamesAreUnique(t *testing.T) {
	names, envs, flags := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, k := range Keys() {
		for _, c := range []struct {
			seen map[string]bool
			n    string
		}{{names, k.Name}, {envs, k.Env()}, {flags, k.Flag()}} {
			if c.seen[c.n] {
				t.Errorf("%s is used twice", c.n)
			}
			c.seen[c.n] = true
		}
	}
}

// TestReadmeDocumentsEveryKey keeps the config reference in the README in
// step with the code.
func TestReadmeDocumentsEveryKey(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !strings.Contains(string(readme), "`"+k.Name+"`") {
			t.Errorf("README.md does not document the key `%s`", k.Name)
		}
	}
}

func FuzzParse(f *testing.F) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("docker:\n  host: x\nidle_power: {a: 1W}\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := Default()
		if err := c.Parse("fuzz.yaml", data); err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		_ = c.Validate()
	})
}
