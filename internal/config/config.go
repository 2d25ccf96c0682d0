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
	"os"
	"path/filepath"
	"time"
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

	// HostRoot is where the host's root file system is seen: "/" on the
	// host, a mount point in a container. doctor reads host files under it.
	HostRoot   string
	ProcRoot   string
	CgroupRoot string
	PasswdFile string
	// GroupFile is the host's group file, for a job's supplementary
	// groups.
	GroupFile string

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
	// AdviseDigest is off, or weekly: every Monday at 00:00 UTC the agent
	// sends the past week's advice (gpumeter advise) to the policy's
	// webhook.
	AdviseDigest string
	Waste        WasteRules

	// Policy is what the agent does about live findings.
	Policy Policy

	// Queue is the GPU job queue.
	Queue Queue

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
	// SessionLifetime is how long a browser stays signed in after it
	// exchanged a token for a session cookie.
	SessionLifetime time.Duration
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
		HostRoot:      "/",
		ProcRoot:      "/proc",
		CgroupRoot:    "/sys/fs/cgroup",
		PasswdFile:    "/etc/passwd",
		GroupFile:     "/etc/group",
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
		AdviseDigest: "off",
		Waste:        DefaultWasteRules(),

		Policy: DefaultPolicy(),

		Queue: DefaultQueue(),

		Auth: Auth{Tokens: map[string]Token{}, ClientCerts: map[string]CertUser{}, Anonymous: "none"},
		API: APILimits{
			MaxBodyBytes:      64 << 10,
			RateLimit:         50,
			RateBurst:         100,
			MaxReportWindow:   400 * 24 * time.Hour,
			MaxReportRows:     10_000,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			SessionLifetime:   12 * time.Hour,
		},
		TLS: TLS{ClientAuth: "optional"},
	}
}
