package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/units"
)

// Validate checks values that parse but make no sense together.
func (c *Config) Validate() error {
	var errs []error
	if c.AdviseDigest == "weekly" && c.Policy.Webhook.URL == "" {
		errs = append(errs, fmt.Errorf("advise.digest: weekly sends the advice to policy.webhook.url, which is not set"))
	}
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
	for name, v := range map[string]string{"labels.user": c.UserLabel, "labels.team": c.TeamLabel, "labels.project": c.ProjectLabel, "host.root": c.HostRoot, "host.proc_root": c.ProcRoot, "host.cgroup_root": c.CgroupRoot} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s: must not be empty", name))
		}
	}
	if c.HostRoot != "" && !filepath.IsAbs(c.HostRoot) {
		errs = append(errs, fmt.Errorf("host.root: %q is not an absolute path", c.HostRoot))
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
	errs = append(errs, c.QueueErrors()...)
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
	if c.API.SessionLifetime < time.Minute || c.API.SessionLifetime > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("api.session_lifetime: %s is outside 1m..30d", units.FormatDuration(c.API.SessionLifetime)))
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
