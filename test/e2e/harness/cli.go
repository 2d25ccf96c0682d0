package harness

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/testenv"
)

// RunCLI runs the binary to completion, for at most cliTimeout, and
// returns its output and status.
func RunCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := Binary(t) // before the clock starts: the first call may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout(t))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(Environ(), env...)
	return runCmd(t, ctx, cmd)
}

// NeedNobody skips the test unless it can run the binary as the user
// nobody: as root, with setpriv (util-linux). A missing setpriv fails the
// test when CI is set.
func NeedNobody(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the binary as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.SkipUnlessCI(t, "setpriv is not installed (apt-get install util-linux), which runs the binary as another user: %v", err)
	}
}

// RunAsNobody runs the binary as the user nobody, with no supplementary
// groups, in /; see NeedNobody.
func RunAsNobody(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := Binary(t) // before the clock starts: the first call may wait for the build
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout(t))
	defer cancel()
	cmd := exec.CommandContext(ctx, "setpriv", append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", bin}, args...)...)
	cmd.Env = append(Environ(), env...)
	cmd.Dir = "/"
	return runCmd(t, ctx, cmd)
}

// cliTimeout is how long a command may run: a guard against one that
// hangs, not a figure of its speed. A simulate of hours under the race
// detector, beside other tests on two busy cores, takes minutes where a
// quiet machine takes seconds; the guard ends before the package's
// deadline, so that the command's output is still shown.
func cliTimeout(t *testing.T) time.Duration {
	const most = 5 * time.Minute
	if d, ok := t.Deadline(); ok {
		return max(min(most, time.Until(d)-30*time.Second), 10*time.Second)
	}
	return most
}

// runCmd runs cmd, made with ctx; a command that ctx's guard had to kill
// hung, which fails the test whatever its status.
func runCmd(t *testing.T, ctx context.Context, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("%s %q did not end in %s: killed (%v); stderr:\n%s", cmd.Path, cmd.Args[1:], time.Since(began).Round(time.Second), err, errb.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// Prometheus is the path of the prometheus server binary; without one the
// test is skipped, or fails when CI is set.
func Prometheus(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.SkipUnlessCI(t, "prometheus is not installed (apt-get install prometheus): %v", err)
	}
	return p
}

// Chromium is the path of a Chromium or Chrome binary; without one the
// test is skipped, or fails when CI is set.
func Chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.SkipUnlessCI(t, "no Chromium installed (apt-get install chromium)")
	return ""
}

// Tool is the path of the command name, which the Debian package pkg
// installs; without it the test is skipped, or fails when CI is set.
func Tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.SkipUnlessCI(t, "%s is not installed (apt-get install %s): %v", name, pkg, err)
	}
	return p
}

// GoTest runs `go test` with args in the module's root, with env added,
// for at most cliTimeout, and returns its output; a run that fails fails
// t. It is built without the race detector whatever this test binary was
// built with: it is for work a test needs done, such as a fixture too
// slow to make under the detector, not for the code under test.
func GoTest(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout(t))
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append([]string{"test"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
