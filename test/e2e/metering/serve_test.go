package metering

// The agent on a scenario and on the demo: its scrape against a golden
// file, its API and ps, and the demo's prices.

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// normalise keeps gpumeter's and the DCGM series and replaces the values
// that depend on elapsed time (counters, timings) by "*", so the rest can
// be compared with a golden file.
func normalise(text string) string {
	var keep []string
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.HasPrefix(line, "DCGM_") && !strings.HasPrefix(line, "gpumeter_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		switch {
		case strings.HasSuffix(name, "_total"), name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
			strings.HasSuffix(name, "_duration_seconds"), name == "gpumeter_last_tick_timestamp_seconds",
			name == "gpumeter_build_info", name == "gpumeter_ledger_pending_rows", name == "gpumeter_ledger_up":
			line = line[:i] + " *"
		}
		keep = append(keep, line)
	}
	slices.Sort(keep)
	return strings.Join(keep, "\n") + "\n"
}

func TestServeSimScrapeGolden(t *testing.T) {
	a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms")
	first := harness.Get(t, a.URL+"/metrics")
	got := normalise(first)
	golden := "testdata/serve-sim.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("scrape differs from %s (go test ./test/e2e/metering -run Golden -update, then review):\n%s", golden, harness.DiffLines(string(want), got))
	}

	// The counters grow while the scenario plays.
	key := `gpumeter_gpu_metered_seconds_total{Hostname="lab-1",UUID="%s",gpu="0"}`
	var uuid string
	for s := range harness.Series(first) {
		if m := regexp.MustCompile(`gpumeter_gpu_metered_seconds_total\{Hostname="lab-1",UUID="([^"]+)",gpu="0"\}`).FindStringSubmatch(s); m != nil {
			uuid = m[1]
		}
	}
	if uuid == "" {
		t.Fatal("no gpumeter_gpu_metered_seconds_total for GPU 0")
	}
	key = fmt.Sprintf(key, uuid)
	before := harness.Series(first)[key]
	harness.WaitFor(t, 10*time.Second, key+" to grow", func() bool {
		return harness.Series(harness.Get(t, a.URL+"/metrics"))[key] > before
	})
}

func TestServeSimAPIAndPs(t *testing.T) {
	a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms")

	var gpus apitype.GPUsResponse
	if err := json.Unmarshal([]byte(harness.Get(t, a.URL+"/api/v1/gpus")), &gpus); err != nil {
		t.Fatal(err)
	}
	if gpus.Node != "lab-1" || len(gpus.GPUs) != 2 {
		t.Fatalf("gpus: node %q with %d GPUs, want lab-1 with 2", gpus.Node, len(gpus.GPUs))
	}
	if u := gpus.GPUs[0].UtilPercent; u == nil || *u != 80 {
		t.Errorf("GPU 0 utilisation = %v, want 80", u)
	}
	if n := len(gpus.GPUs[0].Processes); n != 2 {
		t.Errorf("GPU 0 has %d processes, want 2", n)
	}

	out, stderr, code := harness.RunCLI(t, a.CLIEnv(), "ps", "--url", a.URL)
	if code != 0 {
		t.Fatalf("ps exited %d: %s", code, stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^CONTAINER ID\s+NAME\s+USER\s+TEAM\s+GPU\s+SHARE\s+SM\s+GPU MEMORY`),
		regexp.MustCompile(`(?m)^\w{12}\s+alice-train\s+alice\s+nlp\s+0\s+0\.50\s+60%\s+20\.0 GiB`),
		regexp.MustCompile(`(?m)^\w{12}\s+bob-notebook\s+bob\s+vision\s+0\s+0\.50\s+20%\s+4\.0 GiB`),
		regexp.MustCompile(`(?m)^\w{12}\s+carol-idle\s+carol\s+-\s+1\s+1\.00\s+0%\s+0 B`),
		regexp.MustCompile(`(?m)^-\s+\(host\)\s+dave\s+-\s+1\s+-\s+50%\s+2\.0 GiB`),
	} {
		if !want.MatchString(out) {
			t.Errorf("ps output does not match %s:\n%s", want, out)
		}
	}

	out, stderr, code = harness.RunCLI(t, a.CLIEnv(), "ps", "--url", a.URL, "--format", "json")
	if code != 0 {
		t.Fatalf("ps --format json exited %d: %s", code, stderr)
	}
	var resp apitype.ContainersResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("ps --format json: %v\n%s", err, out)
	}
	if len(resp.Containers) != 3 || len(resp.HostUsers) != 1 || resp.HostUsers[0].User != "dave" {
		t.Errorf("ps json: %d containers and host users %+v, want 3 and dave", len(resp.Containers), resp.HostUsers)
	}

	page := harness.Get(t, a.URL+"/")
	if !strings.Contains(page, "<title>Overview · gpumeter</title>") || !strings.Contains(page, `id="gpu-0"`) {
		t.Errorf("/ does not serve the overview with a tile for GPU 0:\n%s", page)
	}
}

func TestServeDemo(t *testing.T) {
	a := harness.Serve(t, nil, "--demo", "--interval", "100ms")
	var resp apitype.ContainersResponse
	if err := json.Unmarshal([]byte(harness.Get(t, a.URL+"/api/v1/containers")), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Node != "demo" || len(resp.Containers) < 4 || len(resp.HostUsers) == 0 {
		t.Errorf("demo shows node %q, %d containers, %d host users; want demo, at least 4 and at least 1", resp.Node, len(resp.Containers), len(resp.HostUsers))
	}
	shared := false
	for _, c := range resp.Containers {
		for _, g := range c.GPUs {
			if g.Share > 0 && g.Share < 1 {
				shared = true
			}
		}
	}
	if !shared {
		t.Error("the demo shows no shared GPU")
	}
}

// TestServeDemoCost: the demo prices its use itself, so that its first
// report shows money, at the prices README lists.
func TestServeDemoCost(t *testing.T) {
	a := harness.Serve(t, nil, "--demo", "--interval", "100ms", "--ledger-flush-interval", "200ms")
	var rep report.Report
	harness.WaitFor(t, 10*time.Second, "a priced report of the demo", func() bool {
		status, _, body := harness.Fetch(t, a.URL+"/api/v1/usage?by=user&since=1h")
		if status != http.StatusOK {
			t.Fatalf("usage: %d %s", status, body)
		}
		rep = report.Report{}
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Totals.GPUHoursAllocated > 0
	})
	if rep.Totals.Cost <= 0 || rep.Host.Cost <= 0 || rep.Totals.CostGPU <= 0 || rep.Totals.CostEnergy <= 0 {
		t.Errorf("demo report costs %v (GPU %v, energy %v), host %v; want money", rep.Totals.Cost, rep.Totals.CostGPU, rep.Totals.CostEnergy, rep.Host.Cost)
	}
	// 2.50 a GPU-hour: the GPU cost is exactly that times the hours held.
	if !harness.CloseTo(rep.Totals.CostGPU, 2.50*rep.Totals.GPUHoursAllocated, 1e-9) {
		t.Errorf("GPU cost %v for %v allocated GPU-hours, want 2.50 a GPU-hour", rep.Totals.CostGPU, rep.Totals.GPUHoursAllocated)
	}
	// Prices an operator sets win over the demo's.
	b := harness.Serve(t, nil, "--demo", "--interval", "100ms", "--ledger-flush-interval", "200ms", "--cost-gpu-hour", "default=1")
	harness.WaitFor(t, 10*time.Second, "a report of the demo at the operator's price", func() bool {
		_, _, body := harness.Fetch(t, b.URL+"/api/v1/usage?by=user&since=1h")
		rep = report.Report{}
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Totals.GPUHoursAllocated > 0
	})
	if !harness.CloseTo(rep.Totals.CostGPU, rep.Totals.GPUHoursAllocated, 1e-9) || rep.Totals.CostEnergy != 0 {
		t.Errorf("with --cost-gpu-hour default=1: GPU cost %v for %v GPU-hours, energy cost %v; want 1 a GPU-hour and no demo energy price",
			rep.Totals.CostGPU, rep.Totals.GPUHoursAllocated, rep.Totals.CostEnergy)
	}
}
