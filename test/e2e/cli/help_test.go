package cli

// End-to-end tests of what serve tells a person: its help, the messages
// about a bad config, a data directory it cannot write, and a reload that
// leaves a setting for the next restart.

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestServeHelp: serve --help groups its flags by section, gives each one
// default, written as a config file writes it, shows booleans as
// booleans, offers only the values a flag takes, and its examples are
// accepted by the flags they are the examples of.
func TestServeHelp(t *testing.T) {
	help, stderr, code := harness.RunCLI(t, nil, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help: exit status %d; stderr:\n%s", code, stderr)
	}
	// The sections, in order, each heading a group of flags.
	at := -1
	for _, s := range config.Sections {
		i := strings.Index(help, "\n"+s+":\n")
		if i < at {
			t.Errorf("section %q is missing or out of order in:\n%s", s, help)
		}
		at = i
	}
	flags := map[string]string{} // flag name -> its line
	for _, line := range strings.Split(help, "\n") {
		if m := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`).FindStringSubmatch(line); m != nil {
			flags[m[1]] = line
			if n := strings.Count(line, "(default"); n > 1 {
				t.Errorf("%d defaults in %q", n, line)
			}
		}
	}
	for _, k := range config.Keys() {
		if _, ok := flags[k.Flag()]; !ok && k.Name != "sim_file" {
			t.Errorf("no --%s in the help", k.Flag())
		}
	}
	for _, tt := range []struct {
		flag, want string
		not        []string
	}{
		{"ledger-hour-retention", "--ledger-hour-retention duration ", nil},
		{"ledger-hour-retention", " how long hourly rows are kept (default 400d)", nil},
		{"ledger-minute-retention", "(default 35d)", nil},
		{"api-max-report-window", "(default 400d)", nil},
		{"docker-keep-stopped", "(default 5m)", nil},
		{"hostname", "(default the host name, or a scenario's node)", []string{`""`}},
		{"auth-tokens", "--auth-tokens name=token ", []string{"--auth-tokens gpumeter"}},
		{"docker-enabled", "--docker-enabled ", []string{"string", `[="true"]`}},
		{"ledger-enabled", "(default true)", []string{"string"}},
		{"policy-rules-outside-action", "(report, notify)", []string{"stop"}},
		{"policy-rules-idle-action", "(report, notify, stop)", nil},
		{"idle-power", `--idle-power model=power`, []string{"70W (default"}},
		{"api-max-body", "--api-max-body size ", nil},
		{"sim", "--sim string", nil},
	} {
		line, ok := flags[tt.flag]
		if !ok {
			t.Errorf("no --%s in the help", tt.flag)
			continue
		}
		if !strings.Contains(line, tt.want) {
			t.Errorf("--%s line %q does not contain %q", tt.flag, line, tt.want)
		}
		for _, n := range tt.not {
			if strings.Contains(line, n) {
				t.Errorf("--%s line %q contains %q", tt.flag, line, n)
			}
		}
	}
	if _, ok := flags["sim-file"]; ok {
		t.Error("--sim-file is listed; --sim is the flag")
	}
	if strings.Contains(help, "h0m0s") || strings.Contains(help, "m0s)") {
		t.Errorf("a duration is written in Go's long form:\n%s", help)
	}

	// Each example a flag's help gives is one the flag takes: the only
	// complaint left is the listen address the test makes bad.
	examples := 0
	for name, line := range flags {
		m := regexp.MustCompile(`e\.g\. "([^"]+)"`).FindStringSubmatch(line)
		if m == nil {
			continue
		}
		examples++
		_, stderr, code := harness.RunCLI(t, nil, "serve", "--demo", "--listen", "nowhere", "--"+name, m[1])
		if code == 0 || !strings.Contains(stderr, `listen: "nowhere" is not host:port`) || strings.Contains(stderr, "--"+name) {
			t.Errorf("serve --%s %q: exit %d, stderr:\n%s", name, m[1], code, stderr)
		}
	}
	if examples == 0 {
		t.Error("no flag gives an example")
	}
}

// TestServeConfigMessages: an unknown key names the nearest one, a value
// that makes no sense keeps its file and line, a YAML syntax error names
// the line the file fails at; the environment and flags get the same
// suggestions.
func TestServeConfigMessages(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	typo := file("typo.yaml", "listen: 127.0.0.1:0\nintervl: 1s\n")
	zero := file("zero.yaml", "listen: 127.0.0.1:0\ninterval: 0s\n")
	syntax := file("syntax.yaml", "listen: 127.0.0.1:0\ndocker:\n  host: unix:///x.sock\n enabled: false\n")
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown key", nil, []string{"--config", typo}, typo + `:2: unknown key "intervl"; did you mean "interval"?`},
		{"value error keeps its line", nil, []string{"--config", zero}, zero + ":2: interval: 0s is outside 10ms..1h"},
		{"syntax error line", nil, []string{"--config", syntax}, syntax + ":4: did not find expected key"},
		{"unknown variable", []string{"GPUMETER_INTERVL=1s"}, nil, "environment: GPUMETER_INTERVL names no setting; did you mean GPUMETER_INTERVAL?"},
		{"unknown flag", nil, []string{"--ledger-flush-intreval", "1s"}, "unknown flag: --ledger-flush-intreval; did you mean --ledger-flush-interval?"},
		{"variable's value error", []string{"GPUMETER_INTERVAL=2h"}, nil, "environment GPUMETER_INTERVAL: interval: 2h is outside 10ms..1h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := harness.RunCLI(t, tt.env, append([]string{"serve", "--demo"}, tt.args...)...)
			if code == 0 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit status %d, stderr:\n%s\nwant %q", code, stderr, tt.want)
			}
		})
	}
}

// TestServeReloadNamesRestartOnly: a SIGHUP that changes a setting only a
// restart applies says so, by name, in the log; one it applies does not.
func TestServeReloadNamesRestartOnly(t *testing.T) {
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	cfgPath := filepath.Join(t.TempDir(), "gpumeter.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("listen: " + free() + "\ninterval: 200ms\nwaste:\n  idle:\n    window: 1h\n")
	cmd := exec.Command(harness.Binary(t), "serve", "--config", cfgPath, "--sim", harness.Testdata("waste/live.yaml"))
	cmd.Env = append(os.Environ(), "GPUMETER_DATA_DIR="+t.TempDir(), harness.AdminEnv())
	var log harness.LockedBuffer
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(pw, &log)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", log.String())
		}
	})
	harness.AwaitServing(t, pr, exited, &log)

	write("listen: " + free() + "\ninterval: 500ms\nwaste:\n  idle:\n    window: 2h\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "the reload", func() bool { return strings.Contains(log.String(), `msg="config reloaded"`) })
	harness.WaitFor(t, 5*time.Second, "the restart notes", func() bool {
		return strings.Contains(log.String(), `msg="interval changed; it takes effect after a restart"`)
	})
	got := log.String()
	for _, want := range []string{
		`level=WARN msg="listen changed; it takes effect after a restart"`,
		`level=WARN msg="interval changed; it takes effect after a restart"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the log does not say %s", want)
		}
	}
	if strings.Contains(got, "waste.idle.window changed") {
		t.Error("the log says a reloaded setting needs a restart")
	}
}

// nobodyDir is a directory of root's that nobody may read but not write,
// holding a scenario nobody may read; it skips the test where the binary
// cannot be run as another user.
func nobodyDir(t *testing.T) string {
	t.Helper()
	harness.NeedNobody(t)
	dir, err := os.MkdirTemp("", "gpumeter-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	scenario, err := os.ReadFile(harness.Testdata("waste/live.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "live.yaml"), scenario, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeDataDirNotWritable: as a user who may not write the data
// directory, serve says permission denied and how to name another; with
// the ledger off it runs without the audit file and the socket there.
func TestServeDataDirNotWritable(t *testing.T) {
	dir := nobodyDir(t)
	scenario := filepath.Join(dir, "live.yaml")
	for _, dataDir := range []string{dir, filepath.Join(dir, "data")} {
		_, stderr, code := harness.RunAsNobody(t, nil, "serve", "--listen", "127.0.0.1:0", "--sim", scenario, "--data-dir", dataDir)
		if code == 0 {
			t.Fatalf("serve with data_dir %s that nobody cannot write started", dataDir)
		}
		for _, w := range []string{
			"gpumeter: data_dir " + dataDir + " cannot be written (",
			"permission denied): set data_dir in the config file, GPUMETER_DATA_DIR or --data-dir to a directory this user can write",
		} {
			if !strings.Contains(stderr, w) {
				t.Errorf("data_dir %s: stderr does not say %q:\n%s", dataDir, w, stderr)
			}
		}
	}

	cmd := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", harness.Binary(t), "serve", "--listen", "127.0.0.1:0", "--sim", scenario, "--data-dir", filepath.Join(dir, "data"), "--ledger-enabled=false")
	cmd.Dir = "/"
	var log harness.LockedBuffer
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(pw, &log)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); pw.Close(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if waitErr != nil {
				t.Errorf("serve exited with %v after SIGTERM", waitErr)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("serve did not stop within 10s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", log.String())
		}
	}()
	url := harness.AwaitServing(t, pr, exited, &log)
	harness.Get(t, url+"/metrics")
	if got := log.String(); !strings.Contains(got, `msg="running without an audit log file and the local socket"`) || !strings.Contains(got, "permission denied") {
		t.Errorf("the log does not say why there is no audit file:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("the data directory was made after all: %v", err)
	}
}
