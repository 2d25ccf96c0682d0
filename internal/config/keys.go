package config

import (
	"time"

	"github.com/gpumeter/gpumeter/internal/units"
)

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
		intKey("policy.webhook.retries", "how many more times a webhook call that may succeed later (network error, 5xx, 429) is tried, with a doubling backoff", func(c *Config) *int { return &c.Policy.Webhook.Retries }),
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
