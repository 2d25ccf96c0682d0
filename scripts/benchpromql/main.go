// Command benchpromql puts gpumeter's ledger beside Prometheus holding the
// same series (issue 27 item 2): for each history of DAYS it generates a
// scenario from a fixed seed, simulates it into a ledger, converts the
// ledger's minute data into OpenMetrics counters and gauges, backfills a
// TSDB with promtool, starts Prometheus on it and lets it compact, then
// asks both for GPU-hours per user, compares the answers, times both as
// whole processes and in process, sizes both on disk and prints one
// table. scripts/bench-promql.sh builds and runs it; BENCHMARKS.md says
// what each column is.
//
//	benchpromql [flags] DAYS...
//
// It exits 1 when a step fails or the answers differ beyond Prometheus's
// known extrapolation; timings are printed, never judged.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchpromql:", err)
		os.Exit(1)
	}
}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s := settings{Log: stderr}
	fs := flag.NewFlagSet("benchpromql", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.Gpumeter, "gpumeter", "gpumeter", "the gpumeter binary")
	fs.StringVar(&s.Prometheus, "prometheus", "prometheus", "the Prometheus binary")
	fs.StringVar(&s.Promtool, "promtool", "promtool", "the promtool binary")
	fs.StringVar(&s.Dir, "dir", "", "work directory, one subdirectory per history (default: a temporary one, removed at the end)")
	fs.IntVar(&s.Runs, "runs", 20, "timed runs of each side; the medians are printed")
	fs.DurationVar(&s.Interval, "interval", time.Second, "the scenario's sampling interval")
	fs.IntVar(&s.Containers, "containers", 0, "containers per history (default 150 for 7 days, 600 for 30, else 20 a day)")
	fs.StringVar(&s.BackfillBlock, "backfill-block", "486h", "promtool's --max-block-duration")
	fs.StringVar(&s.Retention, "retention", "400d", "Prometheus's --storage.tsdb.retention.time")
	fs.StringVar(&s.MaxBlock, "max-block", "31d", "Prometheus's --storage.tsdb.max-block-duration")
	fs.DurationVar(&s.CompactionLimit, "compaction-wait", 5*time.Minute, "how long to wait for Prometheus's first compaction pass")
	fs.BoolVar(&s.Keep, "keep", false, "keep the work directory and the OpenMetrics files")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("want the histories' lengths in days: benchpromql [flags] 7 30")
	}
	var days []int
	for _, a := range fs.Args() {
		d, err := strconv.Atoi(a)
		if err != nil || d < 1 || d > 400 {
			return fmt.Errorf("%q: want a whole number of days, 1 to 400", a)
		}
		days = append(days, d)
	}
	if s.Runs < 1 {
		return fmt.Errorf("-runs %d: want at least 1", s.Runs)
	}
	for _, bin := range []*string{&s.Gpumeter, &s.Prometheus, &s.Promtool} {
		p, err := exec.LookPath(*bin)
		if err != nil {
			return err
		}
		*bin = p
	}
	if s.Dir == "" {
		d, err := os.MkdirTemp("", "benchpromql-")
		if err != nil {
			return err
		}
		s.Dir = d
		if !s.Keep {
			defer os.RemoveAll(d)
		}
	}
	var results []*result
	for _, d := range days {
		r, err := bench(ctx, &s, d)
		if err != nil {
			return fmt.Errorf("%d-day history: %w", d, err)
		}
		results = append(results, r)
	}
	writeTables(stdout, &s, results)
	var problems []string
	for _, r := range results {
		for _, p := range r.Problems {
			problems = append(problems, fmt.Sprintf("%d-day history: %s", r.Days, p))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the answers differ beyond Prometheus's extrapolation:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// writeTables prints the table, the per-user differences and the figures
// behind them, in markdown.
func writeTables(w io.Writer, s *settings, results []*result) {
	fmt.Fprintf(w, "| history | series / samples | `gpumeter report --by user`, whole process: CPU (wall) | one PromQL query, whole: curl + Prometheus CPU (wall) | PromQL ÷ gpumeter, CPU (target ≥ 2×) | in process: `report.Run` | in process: Prometheus `execTotalTime` | ledger after `VACUUM` | TSDB blocks, `du -b` | ledger ÷ TSDB (target ≤ 1) | PromQL − gpumeter, the user furthest off |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		worst := userAnswer{}
		for _, u := range r.Users {
			if abs(pct(u.Prom-u.Ledger, u.Ledger)) > abs(pct(worst.Prom-worst.Ledger, worst.Ledger)) {
				worst = u
			}
		}
		fmt.Fprintf(w, "| %d d, %d containers | %d / %d | %s (%s) | %s + %s = %s (%s) | %s | %s | %s | %s | %s | %s | %+.0f s (%+.3f %%, %s) |\n",
			r.Days, r.Containers, r.Conv.Series, r.Conv.Samples,
			ms(r.ReportWhole.CPU), ms(r.ReportWhole.Wall),
			ms(r.PromClient), ms(r.PromServer), ms(r.PromWhole.CPU), ms(r.PromWhole.Wall),
			ratio(float64(r.PromWhole.CPU), float64(r.ReportWhole.CPU)),
			ms(r.ReportRun), ms(r.PromExec),
			bytesText(r.Ledger.Total), bytesText(r.TSDB.Total), ratio(float64(r.Ledger.Total), float64(r.TSDB.Total)),
			worst.Prom-worst.Ledger, pct(worst.Prom-worst.Ledger, worst.Ledger), worst.User)
	}

	fmt.Fprintf(w, "\nPer user: `%s` at the window's end against `gpumeter report --by user --format json` rows[].gpu_hours_allocated.\n\n", "sum by (user) (increase(gpumeter_container_gpu_allocated_seconds_total[Nd])) / 3600")
	fmt.Fprintf(w, "| history | user | gpumeter GPU-h | PromQL GPU-h | PromQL − gpumeter | series (ending inside the window) | predicted by increase()'s extrapolation |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		for _, u := range r.Users {
			fmt.Fprintf(w, "| %d d | %s | %.3f | %.3f | %+.1f s (%+.3f %%) | %d (%d) | %+.1f s |\n", r.Days, u.User, u.Ledger/3600, u.Prom/3600,
				u.Prom-u.Ledger, pct(u.Prom-u.Ledger, u.Ledger), u.Series, u.EndInside, u.Model-u.Exact)
		}
	}

	fmt.Fprintf(w, "\nSettings: scenario interval %s, seed 27, 8 GPUs; promtool `--max-block-duration=%s`; Prometheus `--storage.tsdb.retention.time=%s --storage.tsdb.max-block-duration=%s`; %d timed runs of each side, medians.\n",
		s.Interval, s.BackfillBlock, s.Retention, s.MaxBlock, s.Runs)
	for _, r := range results {
		fmt.Fprintf(w, "\n%d-day history (%s .. %s):\n", r.Days, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339))
		fmt.Fprintf(w, "- simulate: %s wall, %s CPU\n", secs(r.Simulate.Wall), secs(r.Simulate.CPU))
		fmt.Fprintf(w, "- ledger after VACUUM: %d bytes: %s\n", r.Ledger.Total, r.Ledger)
		fmt.Fprintf(w, "- OpenMetrics: %d families, %d series, %d samples, %s, written in %s\n", r.Conv.Families, r.Conv.Series, r.Conv.Samples, bytesText(r.Conv.Bytes), secs(r.Convert))
		fmt.Fprintf(w, "- promtool backfill: %s wall, %s CPU\n", secs(r.Backfill.Wall), secs(r.Backfill.CPU))
		if r.Compaction.Waited > 0 {
			fmt.Fprintf(w, "- Prometheus's first compaction pass ended %s after start (prometheus_tsdb_compactions_triggered_total reached 2); %g compactions\n", secs(r.Compaction.Waited), r.Compaction.Compactions)
		} else {
			fmt.Fprintf(w, "- one block: nothing for Prometheus to compact\n")
		}
		fmt.Fprintf(w, "- TSDB: %d blocks, %d bytes (chunks %s, index %s)\n", r.TSDB.Blocks, r.TSDB.Total, bytesText(r.TSDB.Chunks), bytesText(r.TSDB.Index))
		fmt.Fprintf(w, "- in process, opening and closing the ledger (sqlite.Open, Close), which report.Run leaves out: %s\n", ms(r.Open))
		fmt.Fprintf(w, "- Prometheus idle: %.2f ms CPU a second, subtracted from each query's server CPU; query `%s`; Prometheus's evalTotalTime %s\n", r.ServerIdle*1e3, r.Query, ms(r.PromEval))
	}
}

func abs(v float64) float64 { return max(v, -v) }

func pct(d, of float64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * d / of
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s" }
