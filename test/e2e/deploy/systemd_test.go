package deploy

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

const unitFile = "deploy/systemd/gpumeter.service"

// maxExposure is the highest `systemd-analyze security` exposure the unit
// may have (0 is best, 10 worst): the unit scores 4.7 with systemd 252
// (2.9 before the queue staged job mounts, which takes CAP_SYS_ADMIN,
// @mount and the host's mount namespace: README, "Mounts are staged"); a
// change that loosens it fails here rather than going unnoticed.
const maxExposure = 4.9

// unit is a unit file's settings: section, then key, then each value in
// order.
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is no setting of a section", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// TestSystemdUnitSettings: the settings an agent that reads every
// process's /proc, the Docker socket and /dev/nvidia* cannot do without,
// and the ones it cannot take.
func TestSystemdUnitSettings(t *testing.T) {
	u := readUnit(t, harness.RepoFile(unitFile))
	for _, kv := range []struct{ key, want string }{
		{"StateDirectory", "gpumeter"},
		{"ExecReload", "/bin/kill -HUP $MAINPID"},
		{"NoNewPrivileges", "yes"},
	} {
		if got := u.get("Service", kv.key); got != kv.want {
			t.Errorf("[Service] %s=%q, want %q", kv.key, got, kv.want)
		}
	}
	for _, kv := range []struct{ key, refused, why string }{
		{"PrivateDevices", "yes", "hides /dev/nvidia*"},
		{"PrivateDevices", "true", "hides /dev/nvidia*"},
		{"ProtectProc", "invisible", "hides other users' /proc/<pid>"},
		{"ProcSubset", "pid", "hides /proc/driver/nvidia"},
		{"ProtectClock", "yes", "implies DeviceAllow=, which closes /dev/nvidia*"},
		{"DevicePolicy", "closed", "closes /dev/nvidia*"},
		{"DevicePolicy", "strict", "closes /dev/nvidia*"},
		{"PrivateUsers", "yes", "cuts the host's root off the Docker socket"},
		{"ProtectHome", "yes", "hides the queue's mounts under /home"},
	} {
		if got := u.get("Service", kv.key); got == kv.refused {
			t.Errorf("[Service] %s=%s: it %s", kv.key, got, kv.why)
		}
	}
	// The queue's staged mounts must land in dockerd's mount namespace:
	// none of the settings that give the service one of its own.
	for _, key := range []string{
		"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateMounts", "PrivateIPC", "PrivateDevices",
		"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
		"ProtectProc", "ProcSubset", "ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths",
		"BindPaths", "BindReadOnlyPaths", "TemporaryFileSystem", "MountFlags", "RootDirectory", "RootImage", "MountImages",
	} {
		if got := u.get("Service", key); got != "" && got != "no" && got != "false" {
			t.Errorf("[Service] %s=%s gives the agent a mount namespace of its own, where the binds it stages for job mounts never reach dockerd", key, got)
		}
	}
	if caps := strings.Fields(u.get("Service", "CapabilityBoundingSet")); !slices.Contains(caps, "CAP_SYS_ADMIN") {
		t.Errorf("[Service] CapabilityBoundingSet=%s lacks CAP_SYS_ADMIN, which staging job mounts needs", caps)
	}
	if filters := u["Service"]["SystemCallFilter"]; len(filters) == 0 || !slices.Contains(strings.Fields(filters[0]), "@mount") {
		t.Errorf("[Service] SystemCallFilter=%q: the allow-list lacks @mount, which staging job mounts needs", filters)
	}
	if len(u["Service"]["DeviceAllow"]) > 0 {
		t.Errorf("[Service] DeviceAllow=%q: a device list closes /dev/nvidia*, whose majors vary", u["Service"]["DeviceAllow"])
	}
}

// verifyRoot is a root directory for systemd-analyze --root: the unit,
// the binary at its ExecStart path, the reload command at its path, and
// the host's target units the unit's dependencies name.
func verifyRoot(t *testing.T, withBinary bool) string {
	t.Helper()
	u := readUnit(t, harness.RepoFile(unitFile))
	root := t.TempDir()
	install := func(from, to string, mode os.FileMode) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, to)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	install(harness.RepoFile(unitFile), "/etc/systemd/system/gpumeter.service", 0o644)
	if withBinary {
		install(harness.Binary(t), strings.Fields(u.get("Service", "ExecStart"))[0], 0o755)
	}
	reload := strings.Fields(u.get("Service", "ExecReload"))[0]
	install(reload, reload, 0o755) // the host's own kill
	var targets []string
	for _, dir := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.target"))
		if len(m) > 0 {
			targets = m
			break
		}
	}
	if len(targets) == 0 {
		t.Fatal("the host has no systemd target units (sysinit.target, ...) in /usr/lib/systemd/system for verify to resolve the unit's dependencies")
	}
	for _, f := range targets {
		install(f, "/usr/lib/systemd/system/"+filepath.Base(f), 0o644)
	}
	return root
}

func systemdAnalyze(t *testing.T, args ...string) (string, error) {
	t.Helper()
	sa := harness.Tool(t, "systemd-analyze", "systemd")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, sa, args...).CombinedOutput()
	return string(out), err
}

// TestSystemdVerify: systemd-analyze verify finds nothing to say about
// the unit with the binary installed where ExecStart says, and does
// complain without it, so that its silence means something.
func TestSystemdVerify(t *testing.T) {
	root := verifyRoot(t, true)
	out, err := systemdAnalyze(t, "verify", "--root="+root, "/etc/systemd/system/gpumeter.service")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	bare := verifyRoot(t, false)
	out, err = systemdAnalyze(t, "verify", "--root="+bare, "/etc/systemd/system/gpumeter.service")
	if err == nil || !strings.Contains(out, "/usr/local/bin/gpumeter") {
		t.Errorf("systemd-analyze verify without the binary: %v, output %q; want a failure naming /usr/local/bin/gpumeter", err, out)
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for gpumeter\.service: (\d+\.\d+) (\S+)`)

// TestSystemdSecurity records the unit's offline security exposure, and
// fails when it rises above maxExposure.
func TestSystemdSecurity(t *testing.T) {
	root := verifyRoot(t, true)
	out, err := systemdAnalyze(t, "security", "--offline=true", "--root="+root, "gpumeter.service")
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=true: %v\n%s", err, out)
	}
	m := exposureRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no overall exposure:\n%s", out)
	}
	score, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	ver, _ := systemdAnalyze(t, "--version")
	t.Logf("systemd-analyze security --offline=true: exposure %s %s (%s)", m[1], m[2], strings.SplitN(ver, "\n", 2)[0])
	if score > maxExposure {
		t.Errorf("exposure %.1f, above the %.1f the unit had; the hardening was loosened:\n%s", score, maxExposure, out)
	}
}

// TestSystemdReload: what the unit's ExecReload runs, with $MAINPID the
// agent's, makes a running agent reload its config, which is what
// `gpumeter token create` tells the operator `systemctl reload gpumeter`
// does.
func TestSystemdReload(t *testing.T) {
	out, _, code := harness.RunCLI(t, nil, "token", "create", "--user", "alice", "--role", "user")
	if code != 0 || !strings.Contains(out, "systemctl reload gpumeter") {
		t.Fatalf("token create: status %d, it does not say systemctl reload gpumeter:\n%s", code, out)
	}
	u := readUnit(t, harness.RepoFile(unitFile))
	a := harness.Serve(t, nil, "--demo", "--interval", "100ms")
	argv := strings.Fields(strings.ReplaceAll(u.get("Service", "ExecReload"), "$MAINPID", strconv.Itoa(a.Cmd.Process.Pid)))
	if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%q: %v\n%s", argv, err, b)
	}
	harness.WaitFor(t, 10*time.Second, "the agent's reload", func() bool { return strings.Contains(a.Stderr.String(), `msg="config reloaded"`) })
}
