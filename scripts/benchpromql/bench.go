package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/report"
)

// settings are the benchmark's knobs, from the command line.
type settings struct {
	Gpumeter, Prometheus, Promtool string // binaries
	Dir                            string // work directory; each history gets one below it
	Runs                           int    // timed runs of each side
	Interval                       time.Duration
	Containers                     int    // 0: defaultContainers(days)
	BackfillBlock                  string // promtool --max-block-duration
	Retention, MaxBlock            string // Prometheus's --storage.tsdb.retention.time and max-block-duration
	CompactionLimit                time.Duration
	Keep                           bool // keep the OpenMetrics file
	Log                            io.Writer
}

// result is what one history measured.
type result struct {
	Days, Containers int
	From, To         time.Time

	Simulate proc
	Ledger   ledgerSize

	Convert     time.Duration
	Conv        conversion
	Backfill    proc
	Compaction  compaction
	TSDB        tsdbSize
	ServerIdle  float64 // Prometheus's own CPU seconds per second while idle
	Query       string
	ReportWhole timing // gpumeter report, a process
	PromWhole   timing // curl's process plus Prometheus's CPU for the query
	PromClient  time.Duration
	PromServer  time.Duration
	ReportRun   time.Duration // report.Run in this process, median
	Open        time.Duration // sqlite.Open and Close of the ledger, median
	PromExec    time.Duration // Prometheus's execTotalTime, median
	PromEval    time.Duration // its evalTotalTime, median
	Users       []userAnswer
	Problems    []string
}

// timing is the median CPU (user + system) and wall time of runs.
type timing struct{ CPU, Wall time.Duration }

func (s *settings) logf(format string, args ...any) {
	fmt.Fprintf(s.Log, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// bench runs the benchmark for one history of days: generate, simulate,
// convert, backfill, compact, then answer and time both sides.
func bench(ctx context.Context, s *settings, days int) (*result, error) {
	dir := filepath.Join(s.Dir, fmt.Sprintf("%dd", days))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	spec := scenarioSpec{Days: days, Containers: s.Containers, Interval: s.Interval, Seed: 27}
	if spec.Containers == 0 {
		spec.Containers = defaultContainers(days)
	}
	r := &result{Days: days, Containers: spec.Containers, From: scenarioStart, To: scenarioStart.Add(time.Duration(days) * 24 * time.Hour)}
	r.Query = promQuery(days)

	scenario := filepath.Join(dir, "scenario.yaml")
	var sc bytes.Buffer
	if err := writeScenario(&sc, spec); err != nil {
		return nil, err
	}
	if err := os.WriteFile(scenario, sc.Bytes(), 0o644); err != nil {
		return nil, err
	}
	db := filepath.Join(dir, "ledger.db")
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		os.Remove(f)
	}
	s.logf("%dd: simulating %d containers on %d GPUs at %s", days, spec.Containers, scenarioGPUs, s.Interval)
	var err error
	if r.Simulate, err = run(ctx, nil, s.Gpumeter, "simulate", "--scenario", scenario, "--db", db); err != nil {
		return nil, err
	}

	// Sized first, before anything else opens the ledger.
	vacuumed := filepath.Join(dir, "ledger-vacuumed.db")
	if r.Ledger, err = vacuumLedger(ctx, db, vacuumed); err != nil {
		return nil, err
	}

	s.logf("%dd: converting the ledger's minutes to OpenMetrics", days)
	began := time.Now()
	m, err := readMinutes(ctx, db, r.From, r.To)
	if err != nil {
		return nil, err
	}
	om := filepath.Join(dir, "history.om")
	f, err := os.Create(om)
	if err != nil {
		return nil, err
	}
	r.Conv, err = writeOpenMetrics(f, m)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", om, err)
	}
	m = nil
	r.Convert = time.Since(began)

	tsdb := filepath.Join(dir, "tsdb")
	if err := os.RemoveAll(tsdb); err != nil {
		return nil, err
	}
	s.logf("%dd: promtool tsdb create-blocks-from openmetrics --max-block-duration=%s (%s, %d series, %d samples)",
		days, s.BackfillBlock, bytesText(r.Conv.Bytes), r.Conv.Series, r.Conv.Samples)
	if r.Backfill, err = backfill(ctx, s.Promtool, om, tsdb, s.BackfillBlock); err != nil {
		return nil, err
	}
	if !s.Keep {
		os.Remove(om)
	}

	p, err := startPrometheus(ctx, s.Prometheus, tsdb, s.Retention, s.MaxBlock)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	blocks, err := blockDirs(tsdb)
	if err != nil {
		return nil, err
	}
	if len(blocks) > 1 {
		s.logf("%dd: %d blocks; waiting for Prometheus's first compaction pass (it starts a minute after start)", days, len(blocks))
		if r.Compaction, err = p.waitCompaction(ctx, s.CompactionLimit); err != nil {
			return nil, err
		}
	} else {
		// The planner never compacts the newest block on its own, and
		// one block overlaps nothing: there is nothing to wait for.
		r.Compaction = compaction{Blocks: len(blocks)}
	}
	if r.TSDB, err = measureTSDB(ctx, tsdb); err != nil {
		return nil, err
	}

	if err := answer(ctx, s, r, p, vacuumed); err != nil {
		return nil, err
	}
	if err := timeBoth(ctx, s, r, p, vacuumed); err != nil {
		return nil, err
	}
	return r, p.stop()
}

// reportArgs is the report timed and compared.
func reportArgs(db string, r *result, format string) []string {
	return []string{"report", "--db", db, "--by", "user", "--format", format,
		"--from", r.From.Format(time.RFC3339), "--to", r.To.Format(time.RFC3339)}
}

// answer asks both sides for GPU-hours by user and compares them.
func answer(ctx context.Context, s *settings, r *result, p *prometheus, db string) error {
	rep, err := run(ctx, nil, s.Gpumeter, reportArgs(db, r, "json")...)
	if err != nil {
		return err
	}
	prom, _, err := p.query(ctx, r.Query, r.To, "user")
	if err != nil {
		return err
	}
	r.Users, r.Problems, err = compareAnswers(rep.Stdout, prom, r.Conv.Allocated, r.From, r.To)
	return err
}

// timeBoth times the report and the query, interleaved so that the
// machine's load falls on both alike: as whole processes (the report;
// curl, and Prometheus's CPU while it answered) and in process
// (report.Run on an open ledger; Prometheus's own timings).
func timeBoth(ctx context.Context, s *settings, r *result, p *prometheus, db string) error {
	curlArgs := []string{"-sSf", "-o", "/dev/null", p.queryURL(r.Query, r.To, false)}
	args := reportArgs(db, r, "table")
	// Warm both: page cache, Prometheus's postings and chunk caches.
	for range 3 {
		if _, err := run(ctx, nil, s.Gpumeter, args...); err != nil {
			return err
		}
		if _, err := run(ctx, nil, "curl", curlArgs...); err != nil {
			return err
		}
	}
	// Prometheus's CPU while idle, subtracted from what a query costs.
	c0, err := procCPU(p.pid())
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(2 * time.Second)
	c1, err := procCPU(p.pid())
	if err != nil {
		return err
	}
	r.ServerIdle = (c1 - c0).Seconds() / time.Since(t0).Seconds()

	var repCPU, repWall, promCPU, promWall, client, server []time.Duration
	for range s.Runs {
		rp, err := run(ctx, nil, s.Gpumeter, args...)
		if err != nil {
			return err
		}
		repCPU, repWall = append(repCPU, rp.CPU), append(repWall, rp.Wall)

		before, err := procCPU(p.pid())
		if err != nil {
			return err
		}
		cp, err := run(ctx, nil, "curl", curlArgs...)
		if err != nil {
			return err
		}
		after, err := procCPU(p.pid())
		if err != nil {
			return err
		}
		srv := max(after-before-time.Duration(r.ServerIdle*float64(cp.Wall)), 0)
		client, server = append(client, cp.CPU), append(server, srv)
		promCPU, promWall = append(promCPU, cp.CPU+srv), append(promWall, cp.Wall)
	}
	r.ReportWhole = timing{CPU: median(repCPU), Wall: median(repWall)}
	r.PromWhole = timing{CPU: median(promCPU), Wall: median(promWall)}
	r.PromClient, r.PromServer = median(client), median(server)

	// In process. Opening the ledger is apart: report.Run reads an open
	// one, as the agent's API does.
	var opens []time.Duration
	for range s.Runs {
		began := time.Now()
		st, err := sqlite.Open(ctx, db)
		if err != nil {
			return err
		}
		if err := st.Close(); err != nil {
			return err
		}
		opens = append(opens, time.Since(began))
	}
	r.Open = median(opens)
	store, err := sqlite.Open(ctx, db)
	if err != nil {
		return err
	}
	defer store.Close()
	from, to := r.From, r.To
	req := report.Request{By: report.ByUser, From: &from, To: &to, Format: "table"}
	if err := req.Validate(time.Now()); err != nil {
		return err
	}
	prices := cost.Model(config.Default().Cost)
	var runs, execs, evals []time.Duration
	for i := range s.Runs + 3 {
		began := time.Now()
		if _, err := report.Run(ctx, store, store, req, prices); err != nil {
			return err
		}
		d := time.Since(began)
		_, pr, err := p.query(ctx, r.Query, r.To, "user")
		if err != nil {
			return err
		}
		if i < 3 {
			continue // warming up
		}
		runs = append(runs, d)
		execs = append(execs, seconds(pr.Data.Stats.Timings.ExecTotalTime))
		evals = append(evals, seconds(pr.Data.Stats.Timings.EvalTotalTime))
	}
	r.ReportRun, r.PromExec, r.PromEval = median(runs), median(execs), median(evals)
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ratio writes a / b to two decimals.
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}
