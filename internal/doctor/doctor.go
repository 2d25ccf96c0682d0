// Package doctor checks whether a host is ready to run GPU containers under
// Docker and to run gpumeter, and says for each problem what to do about
// it. Every check is a small function over an fs.FS rooted at the host's
// root (host.root), a Docker client and NVML, so tests point it at fixture
// trees, a real engine and go-nvml's mock.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Status is the outcome of one check.
type Status string

// The statuses, from best to worst but for Skip, which says the check
// did not apply or could not be made.
const (
	Pass Status = "PASS"
	Warn Status = "WARN"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Result is what one check found. ID is stable: scripts match on it.
type Result struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

// Env is what the checks look at.
type Env struct {
	// Root is the host's root file system; paths in it have no leading
	// slash (etc/docker/daemon.json).
	Root fs.FS
	// RootPath is where Root is, for messages and fixes.
	RootPath string
	// Proc is the host's /proc (host.proc_root); nil means proc under
	// Root.
	Proc fs.FS
	// ProcPath is where Proc is, for messages ("/proc" when empty).
	ProcPath string
	// Docker is the engine; nil when none is configured.
	Docker Docker
	// NVML is the library, not yet initialised: the checks call Init and
	// report its return code. Nil means the library could not be loaded.
	NVML nvml.Interface
	// ToolVersion runs a toolkit binary (a path under RootPath) with
	// --version; nil when binaries may not be run (a root that is not
	// this host's, or tests).
	ToolVersion func(ctx context.Context, path string) (string, error)
	// Self holds what the gpumeter checks need; nil leaves them out.
	Self *Self
	// RunTest, when set, runs a container with every GPU last.
	RunTest *RunTest
}

// state is what one run learns in a check and later checks use.
type state struct {
	Env
	kernelVersion string // from /proc/driver/nvidia/version, "" when absent
	nvmlOK        bool
	driverVersion string // NVML's
	uuids         []string
	gpuCount      int
	info          *DockerInfo
	infoErr       error
	toolkit       toolkitConfig
}

type check struct {
	id, name string
	run      func(ctx context.Context, s *state) Result
}

// Run makes every check in order and returns their results.
func Run(ctx context.Context, env Env) []Result {
	s := &state{Env: env}
	if s.RootPath == "" {
		s.RootPath = "/"
	}
	if s.Proc == nil {
		if sub, err := fs.Sub(s.Root, "proc"); err == nil {
			s.Proc = sub
		}
	}
	var out []Result
	for _, c := range checks() {
		r := c.run(ctx, s)
		r.ID, r.Name = c.id, c.name
		out = append(out, r)
	}
	if s.nvmlOK {
		out = append(out, gpuChecks(s)...)
	}
	if s.RunTest != nil {
		out = append(out, runTest(ctx, s.RunTest, s.uuids))
	}
	if s.NVML != nil && s.nvmlOK {
		s.NVML.Shutdown()
	}
	return out
}

func checks() []check {
	cs := []check{
		{"host.root", "host root file system", checkRoot},
		{"driver.kernel", "NVIDIA kernel driver loaded", checkKernelDriver},
		{"driver.modules", "nvidia and nvidia_uvm modules, no nouveau", checkModules},
		{"driver.nvml", "NVML initialises", checkNVML},
		{"driver.devices", "GPU device nodes", checkDevices},
		{"driver.dev_char", "/dev/char symlinks for the systemd cgroup driver", checkDevChar},
		{"driver.xid", "recent XID errors in the kernel log", checkXID},
		{"toolkit.installed", "NVIDIA Container Toolkit installed", checkToolkit},
		{"toolkit.version", "NVIDIA Container Toolkit has the container escape fixes", checkToolkitVersion},
		{"toolkit.config", "/etc/nvidia-container-runtime/config.toml", checkToolkitConfig},
		{"docker.engine", "Docker reachable", checkDocker},
		{"docker.rootless", "rootless Docker and the toolkit's no-cgroups", checkRootless},
		{"docker.snap", "Docker not from a snap", checkSnap},
		{"docker.daemon_json", "/etc/docker/daemon.json", checkDaemonJSON},
		{"docker.nvidia_runtime", "nvidia runtime registered", checkRuntime},
		{"docker.default_runtime", "default runtime", checkDefaultRuntime},
		{"cdi.enabled", "Docker's CDI spec directories", checkCDIEnabled},
		{"cdi.specs", "CDI specs parse and match the driver", checkCDISpecs},
	}
	return append(cs, selfChecks()...)
}

// Summary counts results by status.
type Summary struct {
	Pass int `json:"pass"`
	Warn int `json:"warn"`
	Fail int `json:"fail"`
	Skip int `json:"skip"`
}

// Summarize counts rs by status.
func Summarize(rs []Result) Summary {
	var s Summary
	for _, r := range rs {
		switch r.Status {
		case Pass:
			s.Pass++
		case Warn:
			s.Warn++
		case Fail:
			s.Fail++
		case Skip:
			s.Skip++
		}
	}
	return s
}

// WriteJSON writes rs as {"checks": [...], "summary": {...}}.
func WriteJSON(w io.Writer, rs []Result) error {
	if rs == nil {
		rs = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Checks  []Result `json:"checks"`
		Summary Summary  `json:"summary"`
	}{rs, Summarize(rs)})
}

// WriteTable writes one line per check, the fix under a WARN or FAIL,
// and the counts last.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tDETAIL")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Status, r.ID, oneLine(r.Detail))
		if r.Fix != "" && (r.Status == Warn || r.Status == Fail) {
			fmt.Fprintf(tw, "\t\tfix: %s\n", oneLine(r.Fix))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := Summarize(rs)
	_, err := fmt.Fprintf(w, "\n%d passed, %d warnings, %d failed, %d skipped\n", s.Pass, s.Warn, s.Fail, s.Skip)
	return err
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func pass(format string, a ...any) Result {
	return Result{Status: Pass, Detail: fmt.Sprintf(format, a...)}
}

func skip(format string, a ...any) Result {
	return Result{Status: Skip, Detail: fmt.Sprintf(format, a...)}
}

func warn(fix, format string, a ...any) Result {
	return Result{Status: Warn, Detail: fmt.Sprintf(format, a...), Fix: fix}
}

func fail(fix, format string, a ...any) Result {
	return Result{Status: Fail, Detail: fmt.Sprintf(format, a...), Fix: fix}
}

// hostPath is p (relative to the root) as the host names it.
func (s *state) hostPath(p string) string { return "/" + strings.TrimPrefix(p, "/") }

// procPath is p (relative to the proc root) for messages.
func (s *state) procPath(p string) string {
	if s.ProcPath != "" {
		return s.ProcPath + "/" + p
	}
	return "/proc/" + p
}

func (s *state) exists(p string) bool {
	_, err := fs.Stat(s.Root, p)
	return err == nil
}
