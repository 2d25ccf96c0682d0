package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// needRoot skips a test of what a root agent does to its files.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the agent's data_dir checks are those of a root agent")
	}
}

// openDir makes a directory that every user may enter, for what a
// non-root user must reach.
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gpumeter-e2e-open")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestServeFileModes: a new data_dir is 0700 and every file in it 0600,
// the ledger's -wal and -shm included; a ledger an older release left
// 0644 is made 0600.
func TestServeFileModes(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	data := filepath.Join(dir, "data")
	a := harness.Launch(t, data, "--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String())
	a.NextFlush(t)
	if m := mode(t, data); m != 0o700 {
		t.Errorf("data_dir mode %v, want 0700", m)
	}
	for _, f := range []string{"ledger.db", "ledger.db-wal", "ledger.db-shm", "ledger.db.lock", "audit.jsonl"} {
		if m := mode(t, filepath.Join(data, f)); m != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, m)
		}
	}
	a.Stop(t)

	for _, f := range []string{"ledger.db", "audit.jsonl"} {
		if err := os.Chmod(filepath.Join(data, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	harness.Launch(t, data, "--sim", scenario, "--interval", harness.SampleInterval.String()).Stop(t)
	for _, f := range []string{"ledger.db", "audit.jsonl"} {
		if m := mode(t, filepath.Join(data, f)); m != 0o600 {
			t.Errorf("%s left 0644 by an older release is %v after a start, want 0600", f, m)
		}
	}
}

// TestServeRefusesUnsafeDataDir: a root agent will not work in a data_dir
// that others may write or that another user owns, will not follow a
// symbolic link where its audit log goes, and takes one that others may
// only read, with a warning.
func TestServeRefusesUnsafeDataDir(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	serve := func(data string) (string, int) {
		_, stderr, code := harness.RunCLI(t, []string{"GPUMETER_DATA_DIR=" + data}, "serve", "--listen", "127.0.0.1:0", "--sim", scenario,
			"--interval", harness.SampleInterval.String(), "--api-socket", "none")
		return stderr, code
	}

	writable := filepath.Join(dir, "writable")
	if err := os.Mkdir(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(writable, 0o777) // past the umask
	if stderr, code := serve(writable); code == 0 || !strings.Contains(stderr, "others may write it") || !strings.Contains(stderr, "chmod go-w") {
		t.Errorf("data_dir 0777: exit %d, stderr:\n%s\nwant a refusal saying others may write it", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(writable, "ledger.db")); err == nil {
		t.Error("the refused agent made a ledger in the unsafe data_dir")
	}

	owned := filepath.Join(dir, "owned")
	if err := os.Mkdir(owned, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(owned, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if stderr, code := serve(owned); code == 0 || !strings.Contains(stderr, "is owned by uid 65534, not root") {
		t.Errorf("data_dir owned by nobody: exit %d, stderr:\n%s\nwant a refusal naming the owner", code, stderr)
	}

	linked := filepath.Join(dir, "linked")
	if err := os.Mkdir(linked, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(linked, "audit.jsonl")); err != nil {
		t.Fatal(err)
	}
	if stderr, code := serve(linked); code == 0 || !strings.Contains(stderr, "audit.jsonl is a symbolic link: refusing to follow it") {
		t.Errorf("audit.jsonl a symlink: exit %d, stderr:\n%s\nwant a refusal", code, stderr)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me\n" {
		t.Errorf("the symlink's target was written: %q", b)
	}

	readable := filepath.Join(dir, "readable")
	if err := os.Mkdir(readable, 0o755); err != nil {
		t.Fatal(err)
	}
	a := harness.Launch(t, readable, "--sim", scenario, "--interval", harness.SampleInterval.String())
	a.Stop(t)
	if !strings.Contains(a.Stderr.String(), "data_dir is readable by others") {
		t.Errorf("data_dir 0755: no warning in the log:\n%s", a.Stderr)
	}
}

// TestServeDataGroup: with data_group, the files are 0640 in that group,
// and a member who is not root reads the ledger while the agent writes.
func TestServeDataGroup(t *testing.T) {
	needRoot(t)
	harness.NeedNobody(t) // a member of the group reads the ledger
	dir := openDir(t)
	scenario := harness.WriteText(t, filepath.Join(dir, "solo.yaml"), harness.SoloScenario)
	data := filepath.Join(dir, "data")
	a := harness.Launch(t, data, "--sim", scenario, "--interval", harness.SampleInterval.String(), "--ledger-flush-interval", harness.FlushInterval.String(), "--data-group", "nogroup")
	a.NextFlush(t)
	if m := mode(t, data); m != 0o750 {
		t.Errorf("data_dir mode %v, want 0750", m)
	}
	for _, f := range []string{"ledger.db", "ledger.db-wal", "ledger.db-shm", "audit.jsonl"} {
		if m := mode(t, filepath.Join(data, f)); m != 0o640 {
			t.Errorf("%s mode %v, want 0640", f, m)
		}
	}
	out, stderr, code := harness.RunAsNobody(t, []string{"XDG_CONFIG_HOME=/nonexistent"}, "report", "--db", filepath.Join(data, "ledger.db"), "--since", "1h", "--by", "user")
	if code != 0 || !strings.Contains(out, "alice") {
		t.Errorf("report as a member of data_group: exit %d, stderr %s, out:\n%s", code, stderr, out)
	}
	a.Stop(t)
}
