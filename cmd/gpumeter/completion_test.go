package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/report"
)

// complete runs the hidden __complete command, as the shell scripts of
// `gpumeter completion` do, and returns the completions (without their
// descriptions), the directive and what it wrote on stderr.
func complete(t *testing.T, args ...string) (values []string, directive string, stderr string) {
	t.Helper()
	out, stderr, err := runCmd(t, append([]string{"__complete"}, args...)...)
	if err != nil {
		t.Fatalf("__complete %q: %v", args, err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], ":") {
		t.Fatalf("__complete %q printed no directive last:\n%s", args, out)
	}
	for _, l := range lines[:len(lines)-1] {
		v, _, _ := strings.Cut(l, "\t")
		values = append(values, v)
	}
	return values, lines[len(lines)-1], stderr
}

// noFiles is the directive of a completion that offers no file names.
const noFiles = ":4"

func TestCompleteFlagValues(t *testing.T) {
	clientEnvironment(t, "unix:///nonexistent/api.sock")
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"report", "--by", ""}, report.Groupings()},
		{[]string{"report", "--by", "pro"}, []string{"project"}},
		{[]string{"report", "--format", ""}, []string{"table", "csv", "json", "focus"}},
		{[]string{"waste", "--format", "c"}, []string{"csv"}},
		{[]string{"jobs", "--format", ""}, []string{"table", "json"}},
		{[]string{"job", "--format", ""}, []string{"text", "json"}},
		{[]string{"jobs", "--state", "r"}, []string{"running"}},
		{[]string{"jobs", "--state", ""}, []string{"queued", "starting", "running", "succeeded", "failed", "timeout", "cancelled", "lost"}},
		// A list completes its last item and keeps the ones before, but
		// offers none twice.
		{[]string{"jobs", "--state", "running,"}, []string{"running,queued", "running,starting", "running,succeeded", "running,failed", "running,timeout", "running,cancelled", "running,lost"}},
		{[]string{"jobs", "--state", "queued,s"}, []string{"queued,starting", "queued,succeeded"}},
		{[]string{"serve", "--queue-placement", ""}, []string{"binpack", "spread", "target"}},
		{[]string{"serve", "--log-level", "w"}, []string{"warn"}},
		{[]string{"doctor", "--queue-gpu-passing", ""}, []string{"auto", "device_requests", "cdi", "env"}},
		{[]string{"version", "--format", ""}, []string{"text", "json"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, dir, _ := complete(t, tt.args...)
			if dir != noFiles {
				t.Errorf("directive %s, want %s (no file names)", dir, noFiles)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("completions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryChoiceFlagCompletes walks the command tree: every --format,
// --by and --state flag, and every setting flag that takes one of a few
// values, completes, and every value a setting flag completes to is one
// the setting takes.
func TestEveryChoiceFlagCompletes(t *testing.T) {
	enums := map[string]config.Key{}
	for _, k := range config.Keys() {
		if len(k.Values()) > 0 {
			enums[k.Flag()] = k
		}
	}
	var walk func(cmd *cobra.Command)
	seen := 0
	walk = func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			k, isEnum := enums[f.Name]
			if !isEnum && !slices.Contains([]string{"format", "by", "state", "placement"}, f.Name) {
				return
			}
			seen++
			fn, ok := cmd.GetFlagCompletionFunc(f.Name)
			if !ok {
				t.Errorf("%s --%s has no completion", cmd.CommandPath(), f.Name)
				return
			}
			got, _ := fn(cmd, nil, "")
			if len(got) == 0 {
				t.Errorf("%s --%s completes to nothing", cmd.CommandPath(), f.Name)
			}
			if isEnum {
				for _, v := range got {
					c := config.Default()
					if err := c.Set(k.Name, v); err != nil {
						t.Errorf("%s --%s completes to %q, which the setting refuses: %v", cmd.CommandPath(), f.Name, v, err)
					}
				}
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if seen < 20 {
		t.Errorf("found only %d flags to complete; the walk missed commands", seen)
	}
}

func TestCompleteJobIDs(t *testing.T) {
	admin := startQueueAgent(t)
	for range 3 {
		if _, _, err := runCmd(t, submitArgs...); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := runCmd(t, "hold", "j-000002"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, "cancel", "j-000003"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"cancel", ""}, []string{"j-000001", "j-000002"}}, // the live ones
		{[]string{"cancel", "j-000001", ""}, []string{"j-000002"}}, // none twice
		{[]string{"hold", ""}, []string{"j-000001"}},               // queued and not held
		{[]string{"release", ""}, []string{"j-000002"}},            // held
		{[]string{"job", ""}, []string{"j-000001", "j-000002", "j-000003"}},
		{[]string{"logs", "j-00000"}, []string{"j-000001", "j-000002", "j-000003"}},
		{[]string{"wait", "j-000003"}, []string{"j-000003"}},
		{[]string{"wait", "j-000003", ""}, nil}, // wait takes one id
		{[]string{"job", "x"}, nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, dir, stderr := complete(t, tt.args...)
			if dir != noFiles {
				t.Errorf("directive %s, want %s", dir, noFiles)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("completions (-want +got):\n%s\nstderr: %s", diff, stderr)
			}
		})
	}
	// The description names the job and its state, for zsh and fish.
	out, _, err := runCmd(t, "__complete", "release", "")
	if err != nil || !strings.Contains(out, "j-000002\ttrain (queued, held)\n") {
		t.Errorf("release completion %q (%v), want the id described as train (queued, held)", out, err)
	}
	// An admin completes everyone's jobs, each described with its user.
	t.Setenv("GPUMETER_TOKEN", admin)
	out, _, err = runCmd(t, "__complete", "cancel", "")
	if err != nil || out != "j-000001\ttrain (queued) by alice\nj-000002\ttrain (queued, held) by alice\n:4\n" {
		t.Errorf("cancel completion as an admin %q (%v), want alice's two live jobs, named as hers", out, err)
	}
}

// TestCompleteWithoutAgent: an agent that is not there, refuses the
// token or does not answer completes nothing, says nothing and keeps the
// shell waiting at most completeTimeout.
func TestCompleteWithoutAgent(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(hang) })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String()
	closed.Close()
	startQueueAgent(t)

	tests := []struct {
		name, url, token string
	}{
		{"no agent", closedURL, "gpm_test"},
		{"no socket", "unix:///nonexistent/api.sock", ""},
		{"hangs", slow.URL, "gpm_test"},
		{"token refused", "", "gpm_wrong"}, // the queue agent's GPUMETER_URL
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.url != "" {
				t.Setenv("GPUMETER_URL", tt.url)
			}
			t.Setenv("GPUMETER_TOKEN", tt.token)
			for _, args := range [][]string{{"stop", ""}, {"cancel", ""}, {"logs", ""}} {
				start := time.Now()
				got, dir, stderr := complete(t, args...)
				took := time.Since(start)
				if len(got) != 0 || dir != noFiles {
					t.Errorf("%q completed to %q with %s, want nothing and %s", args, got, dir, noFiles)
				}
				if s := strings.TrimSpace(stderr); s != "Completion ended with directive: ShellCompDirectiveNoFileComp" {
					t.Errorf("%q wrote on stderr %q, want cobra's directive line alone", args, stderr)
				}
				// The agent that hangs never answers; runCmd's own deadline
				// guards against a completion that would wait for it
				// forever. How soon it gives up is completeTimeout's
				// figure, not asserted here.
				t.Logf("%q ended after %v (completeTimeout %v)", args, took, completeTimeout)
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	flag, _, err := runCmd(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	cmd, _, err := runCmd(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if flag != cmd {
		t.Errorf("--version printed\n%s\nversion printed\n%s", flag, cmd)
	}
	for _, w := range []string{"gpumeter dev\n", "\n  commit:", "\n  built:", "\n  go:         go1.", "\n  cgo, NVML:  yes"} {
		if !strings.Contains(cmd, w) {
			t.Errorf("version does not say %q:\n%s", w, cmd)
		}
	}
}

func TestWriteVersion(t *testing.T) {
	var b strings.Builder
	err := writeVersion(&b, buildInfo{Version: "v1.2.3", Commit: "0123456789abcdef", Date: "2026-12-01T16:00:00Z", Modified: true,
		GoVersion: "go1.26.8", Platform: "linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	want := `gpumeter v1.2.3
  commit:     0123456789abcdef (with uncommitted changes)
  built:      2026-12-01T16:00:00Z
  go:         go1.26.8 linux/amd64
  cgo, NVML:  no: built with CGO_ENABLED=0, so it reads no GPU (only --demo and --sim)
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("version (-want +got):\n%s", diff)
	}
}
