// Package config holds gpumeter's settings: defaults, strict loading from a
// YAML file, overrides from GPUMETER_* environment variables and flags, and
// validation. Every setting goes through one table of keys, so a file, the
// environment and a flag reject a bad value with the same message.
//
// The settings are plain types, and config imports no package of ours
// but units: the packages that act on them (cost, waste, policy, auth)
// take config's types, never the other way round.
package config

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/units"
)

// Config is the whole of gpumeter's settings.
type Config struct {
	Listen   string
	Interval time.Duration
	Hostname string
	LogLevel string

	// Source is auto, nvml, sim or demo.
	Source      string
	SimFile     string
	NVMLLibrary string

	ProcRoot   string
	CgroupRoot string
	PasswdFile string

	DockerEnabled bool
	DockerHost    string
	DockerKeep    time.Duration

	UserLabel    string
	TeamLabel    string
	ProjectLabel string

	// IdlePower is the idle power in watts by GPU model name or UUID.
	IdlePower map[string]float64

	DataDir string
	// DataGroup, when set, may read the agent's files (0640), for CLI
	// users who are not root.
	DataGroup     string
	LedgerEnabled bool
	LedgerDSN     string
	FlushInterval time.Duration
	// LeaseTakeover is how long a node's lease must be silent before
	// another agent takes it over; 0 means the recorder's default for
	// FlushInterval.
	LeaseTakeover   time.Duration
	MinuteRetention time.Duration
	HourRetention   time.Duration
	MaxPendingRows  int

	Cost Cost

	// WasteEnabled runs the waste rules on the live ticks; Waste are the
	// rules, for the agent and for `gpumeter waste`.
	WasteEnabled bool
	Waste        WasteRules

	// Policy is what the agent does about live findings.
	Policy Policy

	// Auth is who may call the API; API limits what one call may take;
	// TLS secures the listener; WebConfigFile is an exporter-toolkit web
	// config for /metrics and /healthz.
	Auth          Auth
	API           APILimits
	TLS           TLS
	WebConfigFile string

	// origin is where each setting a file or the environment gave was
	// set ("cfg.yaml:3", "environment GPUMETER_INTERVAL"), by key name
	// (idle_power.H100 for an entry), so that Validate can say where a
	// value that makes no sense came from.
	origin map[string]string
}

// Auth is who may call the API.
type Auth struct {
	Tokens      map[string]Token    // by ID
	ClientCerts map[string]CertUser // by certificate common name
	Anonymous   string              // none or viewer
}

// APILimits bound what callers of the API may take.
type APILimits struct {
	// Socket is the Unix socket the CLI reaches the agent on; "" means
	// api.sock under DataDir, "none" turns it off.
	Socket            string
	MaxBodyBytes      uint64
	RateLimit         float64 // requests per second per caller; 0: off
	RateBurst         int
	MaxReportWindow   time.Duration
	MaxReportRows     int
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
}

// SocketPath is where the agent's Unix socket is, or "" when it is off.
func (c *Config) SocketPath() string {
	switch c.API.Socket {
	case "none":
		return ""
	case "":
		return filepath.Join(c.DataDir, "api.sock")
	}
	return c.API.Socket
}

// TLS is the listener's certificate and how clients prove who they are.
type TLS struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string
	ClientAuth   string // optional or required, when ClientCAFile is set
}

// Cost is the price list reports and the waste rules charge by; the cost
// package prices with it (cost.Model).
type Cost struct {
	// Currency is an ISO 4217 code.
	Currency string
	// GPUHour is the price of one GPU-hour by GPU model name, as NVML
	// reports it ("NVIDIA H100 80GB HBM3"), matched exactly. The key
	// "default" prices every model not listed; a model with neither
	// costs 0.
	GPUHour map[string]float64
	// CPUCoreHour is the price of one CPU core-hour.
	CPUCoreHour float64
	// RAMGBHour is the price of one GiB (2^30 bytes) held for one hour.
	RAMGBHour float64
	// KWh is the price of one kWh drawn from the grid, which is PUE times
	// what the GPU metered.
	KWh float64
	// PUE is the power usage effectiveness, at least 1.
	PUE float64
	// Basis is which GPU-hours are charged: allocated, present or used.
	Basis string
	// Idle is how the idle pool is shared: none, weighted or even.
	Idle string
	// Weights multiply each resource's cost, as Slurm's
	// TRESBillingWeights: charge = Σ weight · resource cost. Keys are
	// "gpu", "cpu", "ram" and "energy"; a missing key weighs 1.
	Weights map[string]float64
}

// LedgerPath is the SQLite ledger under the data directory.
func (c *Config) LedgerPath() string { return filepath.Join(c.DataDir, "ledger.db") }

// DefaultDataDir is /var/lib/gpumeter for root, and the user's state
// directory otherwise.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/gpumeter"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "gpumeter")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "gpumeter")
	}
	return filepath.Join(os.TempDir(), "gpumeter")
}

// Default returns the settings gpumeter uses when nothing overrides them.
func Default() Config {
	return Config{
		Listen:        ":9400",
		Interval:      time.Second,
		LogLevel:      "info",
		Source:        "auto",
		ProcRoot:      "/proc",
		CgroupRoot:    "/sys/fs/cgroup",
		PasswdFile:    "/etc/passwd",
		DockerEnabled: true,
		DockerHost:    "unix:///var/run/docker.sock",
		DockerKeep:    5 * time.Minute,
		UserLabel:     "gpumeter.user",
		TeamLabel:     "gpumeter.team",
		ProjectLabel:  "gpumeter.project",
		IdlePower:     map[string]float64{},

		DataDir:         DefaultDataDir(),
		LedgerEnabled:   true,
		FlushInterval:   5 * time.Second,
		MinuteRetention: 35 * 24 * time.Hour,
		HourRetention:   400 * 24 * time.Hour,
		MaxPendingRows:  100_000,

		Cost: Cost{Currency: "USD", GPUHour: map[string]float64{}, PUE: 1, Basis: "allocated", Idle: "none", Weights: map[string]float64{}},

		WasteEnabled: true,
		Waste:        DefaultWasteRules(),

		Policy: DefaultPolicy(),

		Auth: Auth{Tokens: map[string]Token{}, ClientCerts: map[string]CertUser{}, Anonymous: "none"},
		API: APILimits{
			MaxBodyBytes:      64 << 10,
			RateLimit:         50,
			RateBurst:         100,
			MaxReportWindow:   400 * 24 * time.Hour,
			MaxReportRows:     10_000,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
		},
		TLS: TLS{ClientAuth: "optional"},
	}
}

// Key is one setting: its name in the file, its environment variable and
// flag, and how to parse it.
type Key struct {
	Name string // dotted path in the YAML file, e.g. docker.host
	Help string
	// set parses one value; for map keys, sub is the map key.
	set func(c *Config, sub, v string) error
	get func(c *Config) string
	// isMap marks keys whose YAML value is a mapping of sub-keys.
	isMap bool
	// boolean marks true/false keys.
	boolean bool
	// kind is what the key takes, as help names it; see Kind.
	kind string
	// defaultText says what an empty default stands for, or how a
	// default is worked out; "" when Default says it all.
	defaultText string
	// example is a value the flag and the environment accept, shown in
	// help.
	example string
}

// Env is the environment variable that overrides the key.
func (k Key) Env() string {
	return "GPUMETER_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k.Name))
}

// Flag is the command-line flag that overrides the key.
func (k Key) Flag() string { return strings.ReplaceAll(strings.ReplaceAll(k.Name, ".", "-"), "_", "-") }

// Default renders the key's default value.
func (k Key) Default() string {
	c := Default()
	return k.get(&c)
}

// IsMap reports whether the key takes a mapping (in a file) or
// name=value pairs (in the environment and on the command line).
func (k Key) IsMap() bool { return k.isMap }

// IsBool reports whether the key is true or false, so that a bare flag
// (--ledger-enabled) can mean true.
func (k Key) IsBool() bool { return k.boolean }

func stringKey(name, help string, p func(*Config) *string) Key {
	return Key{Name: name, Help: help, kind: "string",
		set: func(c *Config, _, v string) error { *p(c) = v; return nil },
		get: func(c *Config) string { return *p(c) }}
}

func enumKey(name, help string, p func(*Config) *string, allowed ...string) Key {
	return Key{Name: name, Help: help + " (" + strings.Join(allowed, ", ") + ")", kind: "string",
		set: func(c *Config, _, v string) error {
			if !slices.Contains(allowed, v) {
				return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
			}
			*p(c) = v
			return nil
		},
		get: func(c *Config) string { return *p(c) }}
}

func durationKey(name, help string, p func(*Config) *time.Duration) Key {
	return Key{Name: name, Help: help, kind: "duration",
		set: func(c *Config, _, v string) error {
			d, err := units.ParseDuration(v)
			if err != nil {
				return err
			}
			*p(c) = d
			return nil
		},
		get: func(c *Config) string { return units.FormatDuration(*p(c)) }}
}

func boolKey(name, help string, p func(*Config) *bool) Key {
	return Key{Name: name, Help: help, boolean: true, kind: "bool",
		set: func(c *Config, _, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q is not true or false", v)
			}
			*p(c) = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*p(c)) }}
}

func intKey(name, help string, p func(*Config) *int) Key {
	return Key{Name: name, Help: help, kind: "int",
		set: func(c *Config, _, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*p(c)) }}
}

func floatKey(name, help string, p func(*Config) *float64) Key {
	return Key{Name: name, Help: help, kind: "number",
		set: func(c *Config, _, v string) error {
			f, err := parsePrice(v)
			if err != nil {
				return err
			}
			*p(c) = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*p(c), 'f', -1, 64) }}
}

// mapKey is a setting holding name: number pairs; unit is appended when
// the values are rendered. kind names the pair, such as model=power.
func mapKey(name, help, kind string, p func(*Config) *map[string]float64, parse func(string) (float64, error), unit string) Key {
	return Key{Name: name, Help: help, isMap: true, kind: kind,
		set: func(c *Config, sub, v string) error {
			if sub == "" {
				return errors.New("want name=value")
			}
			f, err := parse(v)
			if err != nil {
				return err
			}
			m := p(c)
			if *m == nil {
				*m = map[string]float64{}
			}
			(*m)[sub] = f
			return nil
		},
		get: func(c *Config) string {
			m := *p(c)
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				parts = append(parts, k+"="+strconv.FormatFloat(m[k], 'f', -1, 64)+unit)
			}
			return strings.Join(parts, ",")
		}}
}

// thresholdKey is a setting holding any finite number: Validate, not the
// parser, says which make no sense, so that every source of a value gets
// the same words.
func thresholdKey(name, help string, p func(*Config) *float64) Key {
	return Key{Name: name, Help: help, kind: "number",
		set: func(c *Config, _, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("%q is not a number", v)
			}
			*p(c) = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*p(c), 'f', -1, 64) }}
}

func sizeKey(name, help string, p func(*Config) *uint64) Key {
	return Key{Name: name, Help: help, kind: "size",
		set: func(c *Config, _, v string) error {
			n, err := units.ParseSize(v)
			if err != nil {
				return err
			}
			if n > math.MaxInt64 {
				return fmt.Errorf("%q is too large", v)
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return units.FormatSize(*p(c)) }}
}

func parsePrice(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number of at least 0", s)
	}
	return f, nil
}

// actionKey is the policy action of one waste rule; outside use has no
// container to stop.
func actionKey(rule string, p func(*Config) *string) Key {
	allowed := []string{ActionReport, ActionNotify, ActionStop}
	if rule == RuleOutside {
		allowed = allowed[:2]
	}
	k := enumKey("policy.rules."+rule+".action", "what is done about "+rule+" findings", p, allowed...)
	get := k.get
	k.get = func(c *Config) string {
		if v := get(c); v != "" {
			return v
		}
		return ActionReport
	}
	return k
}

// listKey is a setting holding a comma-separated list.
func listKey(name, help string, p func(*Config) *[]string) Key {
	return Key{Name: name, Help: help + " (comma-separated)", kind: "list",
		set: func(c *Config, _, v string) error {
			var out []string
			for _, part := range strings.Split(v, ",") {
				if part = strings.TrimSpace(part); part != "" {
					out = append(out, part)
				}
			}
			*p(c) = out
			return nil
		},
		get: func(c *Config) string { return strings.Join(*p(c), ",") }}
}

// Keys lists every setting in the order the reference shows them.
func Keys() []Key {
	return []Key{
		stringKey("listen", "address of the metrics, API and web listener", func(c *Config) *string { return &c.Listen }),
		durationKey("interval", "sampling interval", func(c *Config) *time.Duration { return &c.Interval }),
		stringKey("hostname", "node name in metrics and the ledger", func(c *Config) *string { return &c.Hostname }).defaultIs("the host name, or a scenario's node"),
		enumKey("log_level", "log verbosity", func(c *Config) *string { return &c.LogLevel }, "debug", "info", "warn", "error"),
		enumKey("source", "GPU source: auto tries NVML and says what to do when it is missing", func(c *Config) *string { return &c.Source }, "auto", "nvml", "sim", "demo"),
		stringKey("sim_file", "scenario file played by source sim", func(c *Config) *string { return &c.SimFile }),
		stringKey("nvml_library", "path of libnvidia-ml.so.1", func(c *Config) *string { return &c.NVMLLibrary }).defaultIs("the loader's search path"),
		stringKey("host.proc_root", "the host's /proc (under a container: where it is mounted)", func(c *Config) *string { return &c.ProcRoot }),
		stringKey("host.cgroup_root", "the host's cgroup file system", func(c *Config) *string { return &c.CgroupRoot }),
		stringKey("host.passwd_file", "the host's passwd file, for uid to user names", func(c *Config) *string { return &c.PasswdFile }),
		boolKey("docker.enabled", "read the container inventory from Docker", func(c *Config) *bool { return &c.DockerEnabled }),
		stringKey("docker.host", "Docker Engine API address", func(c *Config) *string { return &c.DockerHost }),
		durationKey("docker.keep_stopped", "how long a stopped container stays listed", func(c *Config) *time.Duration { return &c.DockerKeep }),
		stringKey("labels.user", "container label naming the user", func(c *Config) *string { return &c.UserLabel }),
		stringKey("labels.team", "container label naming the team", func(c *Config) *string { return &c.TeamLabel }),
		stringKey("labels.project", "container label naming the project", func(c *Config) *string { return &c.ProjectLabel }),
		mapKey("idle_power", "idle power by GPU model or UUID, in watts", "model=power", func(c *Config) *map[string]float64 { return &c.IdlePower }, units.ParsePower, "W").defaultIs("the lowest power seen").exampleIs("NVIDIA H100 80GB HBM3=70W"),
		stringKey("data_dir", "where the agent keeps its SQLite ledger, audit log and socket", func(c *Config) *string { return &c.DataDir }).defaultIs("/var/lib/gpumeter for root, ~/.local/state/gpumeter otherwise"),
		stringKey("data_group", "a group whose members may read the ledger and the audit log (files 0640, data_dir 0750)", func(c *Config) *string { return &c.DataGroup }).defaultIs("none, files 0600"),
		boolKey("ledger.enabled", "write usage to the ledger", func(c *Config) *bool { return &c.LedgerEnabled }),
		stringKey("ledger.dsn", "PostgreSQL DSN of a shared ledger", func(c *Config) *string { return &c.LedgerDSN }).defaultIs("SQLite under data_dir"),
		durationKey("ledger.flush_interval", "how often usage is committed to the ledger: a crash loses at most this much plus one sampling interval", func(c *Config) *time.Duration { return &c.FlushInterval }),
		durationKey("ledger.lease_takeover", "how long the lease of a node must be silent before another agent may take it over (0: 3 × ledger.flush_interval plus the write deadline of max(30s, 3 × ledger.flush_interval), 45s at the defaults; if set, at least 3 × ledger.flush_interval)", func(c *Config) *time.Duration { return &c.LeaseTakeover }),
		durationKey("ledger.minute_retention", "how long per-minute rows are kept", func(c *Config) *time.Duration { return &c.MinuteRetention }),
		durationKey("ledger.hour_retention", "how long hourly rows are kept", func(c *Config) *time.Duration { return &c.HourRetention }),
		intKey("ledger.max_pending_rows", "rows held in memory while the ledger cannot be written; past it the oldest minutes are dropped", func(c *Config) *int { return &c.MaxPendingRows }),
		stringKey("cost.currency", "currency of prices and reports", func(c *Config) *string { return &c.Cost.Currency }),
		mapKey("cost.gpu_hour", "price per GPU-hour by GPU model, \"default\" for the rest", "model=price", func(c *Config) *map[string]float64 { return &c.Cost.GPUHour }, parsePrice, "").exampleIs("default=2.5"),
		floatKey("cost.cpu_core_hour", "price per CPU core-hour", func(c *Config) *float64 { return &c.Cost.CPUCoreHour }),
		floatKey("cost.ram_gb_hour", "price per GiB-hour of RAM", func(c *Config) *float64 { return &c.Cost.RAMGBHour }),
		floatKey("cost.kwh", "price per kWh of GPU energy", func(c *Config) *float64 { return &c.Cost.KWh }),
		floatKey("cost.pue", "power usage effectiveness the energy price is multiplied by (at least 1)", func(c *Config) *float64 { return &c.Cost.PUE }),
		enumKey("cost.basis", "which GPU-hours are charged", func(c *Config) *string { return &c.Cost.Basis }, "allocated", "present", "used"),
		enumKey("cost.idle", "how the cost of idle GPUs is shared", func(c *Config) *string { return &c.Cost.Idle }, "none", "weighted", "even"),
		mapKey("cost.weights", "billing weights per resource (gpu, cpu, ram, energy)", "resource=weight", func(c *Config) *map[string]float64 { return &c.Cost.Weights }, parsePrice, "").defaultIs("1 for each").exampleIs("gpu=2"),
		boolKey("waste.enabled", "run the waste rules on live ticks (/api/v1/waste, gpumeter_waste_* metrics)", func(c *Config) *bool { return &c.WasteEnabled }),
		boolKey("waste.idle.enabled", "find idle containers", func(c *Config) *bool { return &c.Waste.Idle.Enabled }),
		thresholdKey("waste.idle.sm_percent", "SM utilisation (%) under which a held GPU is idle; over_allocated uses it too", func(c *Config) *float64 { return &c.Waste.Idle.SMPercent }),
		thresholdKey("waste.idle.cpu_cores", "CPU use (cores) under which a container is idle", func(c *Config) *float64 { return &c.Waste.Idle.CPUCores }),
		durationKey("waste.idle.window", "how long a container must stay idle", func(c *Config) *time.Duration { return &c.Waste.Idle.Window }),
		durationKey("waste.idle.grace", "how much longer before it is reported", func(c *Config) *time.Duration { return &c.Waste.Idle.Grace }),
		boolKey("waste.stalled.enabled", "find stalled containers (GPU memory held, SM 0 %, CPU busy)", func(c *Config) *bool { return &c.Waste.Stalled.Enabled }),
		durationKey("waste.stalled.window", "how long a container must stay stalled", func(c *Config) *time.Duration { return &c.Waste.Stalled.Window }),
		durationKey("waste.stalled.grace", "how much longer before it is reported", func(c *Config) *time.Duration { return &c.Waste.Stalled.Grace }),
		boolKey("waste.over_allocated.enabled", "find containers that use fewer GPUs than they hold", func(c *Config) *bool { return &c.Waste.OverAllocated.Enabled }),
		durationKey("waste.over_allocated.window", "the window GPU use is judged over", func(c *Config) *time.Duration { return &c.Waste.OverAllocated.Window }),
		durationKey("waste.over_allocated.grace", "how much longer before it is reported", func(c *Config) *time.Duration { return &c.Waste.OverAllocated.Grace }),
		durationKey("waste.too_old.max_age", "containers running longer than this are reported (0: never)", func(c *Config) *time.Duration { return &c.Waste.TooOld.MaxAge }),
		durationKey("waste.too_old.grace", "how much longer before it is reported", func(c *Config) *time.Duration { return &c.Waste.TooOld.Grace }),
		boolKey("waste.low_efficiency.enabled", "find containers whose efficiency, used / held GPU-hours, stays low", func(c *Config) *bool { return &c.Waste.LowEfficiency.Enabled }),
		thresholdKey("waste.low_efficiency.threshold", "efficiency (used / held GPU-hours: held is the whole time a container had a GPU, shared or not) under which a container is reported", func(c *Config) *float64 { return &c.Waste.LowEfficiency.Threshold }),
		thresholdKey("waste.low_efficiency.min_gpu_hours", "allocated GPU-hours a container must hold over the window to be judged", func(c *Config) *float64 { return &c.Waste.LowEfficiency.MinGPUHours }),
		durationKey("waste.low_efficiency.window", "the window efficiency is judged over", func(c *Config) *time.Duration { return &c.Waste.LowEfficiency.Window }),
		durationKey("waste.low_efficiency.grace", "how much longer before it is reported", func(c *Config) *time.Duration { return &c.Waste.LowEfficiency.Grace }),
		boolKey("waste.outside.enabled", "find GPU processes outside containers and GPU memory no process accounts for", func(c *Config) *bool { return &c.Waste.Outside.Enabled }),
		sizeKey("waste.outside.unaccounted_memory", "GPU memory no process accounts for above which a GPU is reported (live only)", func(c *Config) *uint64 { return &c.Waste.Outside.UnaccountedMemory }),
		durationKey("waste.outside.window", "how long outside use must last", func(c *Config) *time.Duration { return &c.Waste.Outside.Window }),
		durationKey("waste.outside.grace", "how much longer before it is reported", func(c *Config) *time.Duration { return &c.Waste.Outside.Grace }),
		boolKey("policy.dry_run", "log and audit what the policy would do, and do nothing", func(c *Config) *bool { return &c.Policy.DryRun }),
		actionKey("idle", func(c *Config) *string { return &c.Policy.Actions.Idle }),
		actionKey("stalled", func(c *Config) *string { return &c.Policy.Actions.Stalled }),
		actionKey("over_allocated", func(c *Config) *string { return &c.Policy.Actions.OverAllocated }),
		actionKey("too_old", func(c *Config) *string { return &c.Policy.Actions.TooOld }),
		actionKey("low_efficiency", func(c *Config) *string { return &c.Policy.Actions.LowEfficiency }),
		actionKey("outside", func(c *Config) *string { return &c.Policy.Actions.Outside }),
		stringKey("policy.webhook.url", "URL notifications and warnings are POSTed to as JSON (with a Slack-compatible text field)", func(c *Config) *string { return &c.Policy.Webhook.URL }),
		durationKey("policy.webhook.timeout", "how long one webhook attempt may take", func(c *Config) *time.Duration { return &c.Policy.Webhook.Timeout }),
		intKey("policy.webhook.retries", "how many more times a failed webhook call is tried, with a doubling backoff", func(c *Config) *int { return &c.Policy.Webhook.Retries }),
		durationKey("policy.stop.warning_wait", "time between the warning and the stop", func(c *Config) *time.Duration { return &c.Policy.WarningWait }),
		durationKey("policy.stop.grace", "how long docker stop waits before it kills the container", func(c *Config) *time.Duration { return &c.Policy.Grace }),
		listKey("policy.exempt.labels", "containers with any of these labels (key=value, or key for any value) are left alone; gpumeter.exempt=true always is", func(c *Config) *[]string { return &c.Policy.Exempt.Labels }),
		listKey("policy.exempt.names", "container name patterns left alone", func(c *Config) *[]string { return &c.Policy.Exempt.Names }),
		listKey("policy.exempt.images", "image patterns left alone", func(c *Config) *[]string { return &c.Policy.Exempt.Images }),
		listKey("policy.exempt.owners", "users, teams or projects left alone", func(c *Config) *[]string { return &c.Policy.Exempt.Owners }),
		entryKey("auth.tokens", "API tokens by name: \"user=NAME role=admin|user|viewer sha256=HASH [expires=TIME]\", as \"gpumeter token create\" prints them", "name=token",
			func(c *Config, id, v string) error {
				t, err := ParseToken(id, v)
				if err == nil {
					setEntry(&c.Auth.Tokens, id, t)
				}
				return err
			},
			func(c *Config) map[string]string { return entries(c.Auth.Tokens, Token.Entry) }),
		entryKey("auth.client_certs", "client certificates by subject common name: \"user=NAME role=ROLE\" (needs tls.client_ca_file)", "name=user",
			func(c *Config, cn, v string) error {
				cu, err := ParseCertUser(cn, v)
				if err == nil {
					setEntry(&c.Auth.ClientCerts, cn, cu)
				}
				return err
			},
			func(c *Config) map[string]string { return entries(c.Auth.ClientCerts, CertUser.Entry) }),
		enumKey("auth.anonymous", "what callers without credentials may do on the API; /metrics and /healthz are always open unless web.config_file sets basic auth", func(c *Config) *string { return &c.Auth.Anonymous }, "none", "viewer"),
		stringKey("api.socket", "Unix socket (mode 0600) for the CLI on this host; root and the agent's user need no token on it (none: off)", func(c *Config) *string { return &c.API.Socket }).defaultIs("api.sock in data_dir"),
		sizeKey("api.max_body", "largest request body accepted", func(c *Config) *uint64 { return &c.API.MaxBodyBytes }),
		floatKey("api.rate_limit", "API requests per second allowed to each caller (token, certificate or address); 0: no limit", func(c *Config) *float64 { return &c.API.RateLimit }),
		intKey("api.rate_burst", "API requests a caller may make at once above the rate", func(c *Config) *int { return &c.API.RateBurst }),
		durationKey("api.max_report_window", "longest window a usage report over the API may cover", func(c *Config) *time.Duration { return &c.API.MaxReportWindow }),
		intKey("api.max_report_rows", "most rows a usage report over the API may return", func(c *Config) *int { return &c.API.MaxReportRows }),
		durationKey("api.read_header_timeout", "how long a client may take to send its request headers", func(c *Config) *time.Duration { return &c.API.ReadHeaderTimeout }),
		durationKey("api.read_timeout", "how long a client may take to send its whole request", func(c *Config) *time.Duration { return &c.API.ReadTimeout }),
		stringKey("tls.cert_file", "certificate (PEM) the listener serves HTTPS with; re-read on SIGHUP", func(c *Config) *string { return &c.TLS.CertFile }),
		stringKey("tls.key_file", "private key (PEM) of tls.cert_file", func(c *Config) *string { return &c.TLS.KeyFile }),
		stringKey("tls.client_ca_file", "CA bundle (PEM) client certificates are verified against", func(c *Config) *string { return &c.TLS.ClientCAFile }),
		enumKey("tls.client_auth", "whether every client must show a certificate signed by tls.client_ca_file", func(c *Config) *string { return &c.TLS.ClientAuth }, "optional", "required"),
		stringKey("web.config_file", "Prometheus exporter-toolkit web config: basic_auth_users guard /metrics and /healthz, tls_server_config may serve HTTPS instead of tls.*", func(c *Config) *string { return &c.WebConfigFile }),
	}
}

// entryKey is a setting holding name: text entries that set parses.
func entryKey(name, help, kind string, set func(c *Config, sub, v string) error, get func(c *Config) map[string]string) Key {
	return Key{Name: name, Help: help, isMap: true, kind: kind,
		set: func(c *Config, sub, v string) error {
			if sub == "" {
				return errors.New("want name=value")
			}
			return set(c, sub, v)
		},
		get: func(c *Config) string {
			m := get(c)
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				parts = append(parts, k+"="+m[k])
			}
			return strings.Join(parts, ",")
		}}
}

func setEntry[T any](m *map[string]T, k string, v T) {
	if *m == nil {
		*m = map[string]T{}
	}
	(*m)[k] = v
}

func entries[T any](m map[string]T, render func(T) string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = render(v)
	}
	return out
}

func lookup(name string) (Key, bool) {
	for _, k := range Keys() {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// Set parses value into the setting named name, as a flag or environment
// variable gives it. A map key takes sub=value.
func (c *Config) Set(name, value string) error {
	k, ok := lookup(name)
	if !ok {
		return fmt.Errorf("unknown setting %q", name)
	}
	if k.isMap {
		sub, v, found := strings.Cut(value, "=")
		if !found {
			return fmt.Errorf("%s: want name=value, got %q", name, value)
		}
		sub = strings.TrimSpace(sub)
		c.setOrigin(name+"."+sub, "")
		if err := k.set(c, sub, strings.TrimSpace(v)); err != nil {
			// Name the entry, as a file's error does: one variable may
			// hold several.
			if sub != "" {
				name += "." + sub
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	c.setOrigin(name, "")
	if err := k.set(c, "", value); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// LoadFile reads a YAML config file over c. Unknown keys, wrong shapes and
// bad values are errors that name the file, line and key.
func (c *Config) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	return c.Parse(path, data)
}

// Parse reads YAML config data over c; name is used in errors.
func (c *Config) Parse(name string, data []byte) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file changes nothing
		}
		line, msg := syntaxError(err, data)
		return fmt.Errorf("%s:%d: %s", name, line, msg)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	return c.walk(name, "", root)
}

func (c *Config) walk(file, prefix string, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		where := prefix
		if where == "" {
			where = "top level"
		}
		return fmt.Errorf("%s:%d: %s: want a mapping of keys, got %s", file, n.Line, where, kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		name := kn.Value
		if prefix != "" {
			name = prefix + "." + kn.Value
		}
		if seen[name] {
			return fmt.Errorf("%s:%d: %s: set twice", file, kn.Line, name)
		}
		seen[name] = true
		if k, ok := lookup(name); ok {
			if err := c.setNode(file, k, vn); err != nil {
				return err
			}
			continue
		}
		if isSection(name) {
			if err := c.walk(file, name, vn); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("%s:%d: unknown key %q%s", file, kn.Line, name, suggest(name))
	}
	return nil
}

func (c *Config) setNode(file string, k Key, vn *yaml.Node) error {
	if k.isMap {
		if vn.Kind != yaml.MappingNode {
			return fmt.Errorf("%s:%d: %s: want a mapping of name: value, got %s", file, vn.Line, k.Name, kindName(vn))
		}
		// A mapping node keeps both of two equal keys, and setting them
		// in turn would let the last win unseen: a second token or price
		// under one name is a mistake to report.
		seen := map[string]bool{}
		for i := 0; i+1 < len(vn.Content); i += 2 {
			sk, sv := vn.Content[i], vn.Content[i+1]
			if seen[sk.Value] {
				return fmt.Errorf("%s:%d: %s.%s: set twice", file, sk.Line, k.Name, sk.Value)
			}
			seen[sk.Value] = true
			if sv.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s:%d: %s.%s: want a single value, got %s", file, sv.Line, k.Name, sk.Value, kindName(sv))
			}
			if err := k.set(c, sk.Value, sv.Value); err != nil {
				return fmt.Errorf("%s:%d: %s.%s: %w", file, sv.Line, k.Name, sk.Value, err)
			}
			c.setOrigin(k.Name+"."+sk.Value, fmt.Sprintf("%s:%d", file, sv.Line))
		}
		return nil
	}
	if vn.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s:%d: %s: want a single value, got %s", file, vn.Line, k.Name, kindName(vn))
	}
	if err := k.set(c, "", vn.Value); err != nil {
		return fmt.Errorf("%s:%d: %s: %w", file, vn.Line, k.Name, err)
	}
	c.setOrigin(k.Name, fmt.Sprintf("%s:%d", file, vn.Line))
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

func isSection(name string) bool {
	for _, k := range Keys() {
		if strings.HasPrefix(k.Name, name+".") {
			return true
		}
	}
	return false
}

// suggest names the known key nearest to name, if one is near.
func suggest(name string) string {
	if k, ok := Nearest(name); ok {
		return fmt.Sprintf("; did you mean %q?", k.Name)
	}
	return ""
}

// LoadEnv applies GPUMETER_* variables from environ (as os.Environ gives
// them). A variable that names no setting is an error, so a typo is not
// silently ignored.
func (c *Config) LoadEnv(environ []string) error {
	byEnv := map[string]Key{}
	for _, k := range Keys() {
		byEnv[k.Env()] = k
	}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "GPUMETER_") || envNotSettings[name] || strings.HasPrefix(name, "GPUMETER_TEST_") {
			continue
		}
		k, ok := byEnv[name]
		if !ok {
			if near, ok := Nearest(strings.TrimPrefix(name, "GPUMETER_")); ok {
				return fmt.Errorf("environment: %s names no setting; did you mean %s?", name, near.Env())
			}
			return fmt.Errorf("environment: %s names no setting", name)
		}
		if k.isMap {
			for _, part := range strings.Split(value, ",") {
				if strings.TrimSpace(part) == "" {
					continue
				}
				if err := c.Set(k.Name, part); err != nil {
					return fmt.Errorf("environment %s: %w", name, err)
				}
				sub, _, _ := strings.Cut(part, "=")
				c.setOrigin(k.Name+"."+strings.TrimSpace(sub), "environment "+name)
			}
			continue
		}
		if err := c.Set(k.Name, value); err != nil {
			return fmt.Errorf("environment %s: %w", name, err)
		}
		c.setOrigin(k.Name, "environment "+name)
	}
	return nil
}

// envNotSettings are GPUMETER_* variables that are not settings: the
// config file path and the API client's address. GPUMETER_TEST_* are the
// test suites' own (a PostgreSQL DSN, say), left set in a developer's
// shell while the binary runs.
var envNotSettings = map[string]bool{
	"GPUMETER_CONFIG": true, "GPUMETER_URL": true, "GPUMETER_TOKEN": true,
	"GPUMETER_CLIENT_CONFIG": true, "GPUMETER_CA_FILE": true,
}

// Validate checks values that parse but make no sense together.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %q is not host:port", c.Listen))
	}
	if c.Interval < 10*time.Millisecond || c.Interval > time.Hour {
		errs = append(errs, fmt.Errorf("interval: %s is outside 10ms..1h", units.FormatDuration(c.Interval)))
	}
	if c.Source == "sim" && c.SimFile == "" {
		errs = append(errs, errors.New("sim_file: source sim needs a scenario file"))
	}
	if c.DockerKeep < 0 {
		errs = append(errs, fmt.Errorf("docker.keep_stopped: %s is negative", units.FormatDuration(c.DockerKeep)))
	}
	for name, v := range map[string]string{"labels.user": c.UserLabel, "labels.team": c.TeamLabel, "labels.project": c.ProjectLabel, "host.proc_root": c.ProcRoot, "host.cgroup_root": c.CgroupRoot} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s: must not be empty", name))
		}
	}
	for model, w := range c.IdlePower {
		if w < 0 {
			errs = append(errs, fmt.Errorf("idle_power.%s: %gW is negative", model, w))
		}
	}
	if c.FlushInterval < 100*time.Millisecond || c.FlushInterval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("ledger.flush_interval: %s is outside 100ms..10m", units.FormatDuration(c.FlushInterval)))
	}
	if c.LeaseTakeover < 0 || c.LeaseTakeover != 0 && c.LeaseTakeover < 3*c.FlushInterval {
		errs = append(errs, fmt.Errorf("ledger.lease_takeover: %s is shorter than 3 × ledger.flush_interval (%s): a live agent would lose its lease between two flushes", units.FormatDuration(c.LeaseTakeover), units.FormatDuration(3*c.FlushInterval)))
	}
	if c.MinuteRetention < time.Hour {
		errs = append(errs, fmt.Errorf("ledger.minute_retention: %s is shorter than an hour", units.FormatDuration(c.MinuteRetention)))
	}
	if c.HourRetention < c.MinuteRetention {
		errs = append(errs, fmt.Errorf("ledger.hour_retention: %s is shorter than ledger.minute_retention %s", units.FormatDuration(c.HourRetention), units.FormatDuration(c.MinuteRetention)))
	}
	if c.MaxPendingRows < 1000 {
		errs = append(errs, fmt.Errorf("ledger.max_pending_rows: %d is below 1000", c.MaxPendingRows))
	}
	if c.LedgerEnabled && c.LedgerDSN == "" && c.DataDir == "" {
		errs = append(errs, errors.New("data_dir: must not be empty while the ledger is on"))
	}
	if c.Cost.PUE < 1 {
		errs = append(errs, fmt.Errorf("cost.pue: %g is below 1", c.Cost.PUE))
	}
	for name := range c.Cost.Weights {
		if !slices.Contains([]string{"gpu", "cpu", "ram", "energy"}, name) {
			errs = append(errs, fmt.Errorf("cost.weights.%s: not a resource (gpu, cpu, ram, energy)", name))
		}
	}
	errs = append(errs, c.securityErrors()...)
	errs = append(errs, c.WasteErrors()...)
	if err := c.Policy.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			errs = append(errs, errors.New("policy."+line))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	for i, err := range errs {
		errs[i] = c.placed(err)
	}
	return errors.Join(errs...)
}

// securityErrors are the errors of the auth, api and tls keys.
func (c *Config) securityErrors() []error {
	var errs []error
	if err := c.tokenError(); err != nil {
		errs = append(errs, err)
	}
	if c.API.MaxBodyBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("api.max_body: %s is below 1KiB", units.FormatSize(c.API.MaxBodyBytes)))
	}
	if c.API.RateLimit > 0 && c.API.RateBurst < 1 {
		errs = append(errs, fmt.Errorf("api.rate_burst: %d is below 1 while api.rate_limit is on", c.API.RateBurst))
	}
	if c.API.MaxReportWindow < time.Hour {
		errs = append(errs, fmt.Errorf("api.max_report_window: %s is shorter than an hour", units.FormatDuration(c.API.MaxReportWindow)))
	}
	if c.API.MaxReportRows < 1 {
		errs = append(errs, fmt.Errorf("api.max_report_rows: %d is below 1", c.API.MaxReportRows))
	}
	if c.API.ReadHeaderTimeout < 100*time.Millisecond || c.API.ReadHeaderTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("api.read_header_timeout: %s is outside 100ms..1m", units.FormatDuration(c.API.ReadHeaderTimeout)))
	}
	if c.API.ReadTimeout < c.API.ReadHeaderTimeout || c.API.ReadTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("api.read_timeout: %s is outside api.read_header_timeout..10m", units.FormatDuration(c.API.ReadTimeout)))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("tls.cert_file, tls.key_file: set both or neither"))
	}
	if c.TLS.ClientCAFile != "" && c.TLS.CertFile == "" {
		errs = append(errs, errors.New("tls.client_ca_file: client certificates need HTTPS: set tls.cert_file and tls.key_file too"))
	}
	if c.TLS.ClientAuth == "required" && c.TLS.ClientCAFile == "" {
		errs = append(errs, errors.New("tls.client_auth: required needs tls.client_ca_file"))
	}
	if len(c.Auth.ClientCerts) > 0 && c.TLS.ClientCAFile == "" && c.WebConfigFile == "" {
		errs = append(errs, errors.New("auth.client_certs: no client certificate can be verified without tls.client_ca_file"))
	}
	return errs
}

// tokenError is the first mistake auth.tokens makes as a whole: one name
// twice, or one token under two names, which the audit log could not
// tell apart.
func (c *Config) tokenError() error {
	ids := map[string]bool{}
	byHash := map[[sha256.Size]byte]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Auth.Tokens)) {
		t := c.Auth.Tokens[name]
		if ids[t.ID] {
			return fmt.Errorf("auth.tokens.%s: given twice", t.ID)
		}
		ids[t.ID] = true
		if prev, dup := byHash[t.Hash]; dup {
			return fmt.Errorf("auth.tokens.%s: the same token as auth.tokens.%s; create a new one for each", t.ID, prev)
		}
		byHash[t.Hash] = t.ID
	}
	return nil
}
