package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// prometheus is a Prometheus server started on a TSDB directory, with no
// scrape jobs: it serves the backfilled blocks and compacts them.
type prometheus struct {
	cmd  *exec.Cmd
	addr string // host:port
	dir  string
	log  *os.File
	done chan error

	stopOnce sync.Once
	stopErr  error
}

// startPrometheus starts Prometheus on dir with the retention and maximum
// block duration given, and waits until it is ready.
func startPrometheus(ctx context.Context, bin, dir, retention, maxBlock string) (*prometheus, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(filepath.Dir(dir), "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("# No scrape jobs: the TSDB holds backfilled blocks only.\nglobal: {}\n"), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(dir + ".log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+dir,
		"--storage.tsdb.retention.time="+retention, "--storage.tsdb.max-block-duration="+maxBlock,
		"--web.listen-address="+addr, "--log.level=info")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &prometheus{cmd: cmd, addr: addr, dir: dir, log: logf, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.done:
			return nil, fmt.Errorf("prometheus exited before it was ready: %v; see %s", err, logf.Name())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("prometheus not ready after 90 s; see %s", logf.Name())
		}
	}
}

func (p *prometheus) pid() int { return p.cmd.Process.Pid }

// stop stops Prometheus once; later calls return what the first did.
func (p *prometheus) stop() error {
	p.stopOnce.Do(func() {
		defer p.log.Close()
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
			p.stopErr = errors.New("prometheus did not stop on SIGTERM within 30 s")
		}
	})
	return p.stopErr
}

// selfMetric reads one unlabelled sample of Prometheus's own /metrics.
func (p *prometheus) selfMetric(name string) (float64, error) {
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("prometheus /metrics has no %s", name)
}

// compaction is what Prometheus did to the blocks once started.
type compaction struct {
	Waited      time.Duration
	Compactions float64 // prometheus_tsdb_compactions_total
	Blocks      int
}

// waitCompaction waits until Prometheus's first compaction pass has
// ended. The TSDB's loop triggers a pass a minute after start and
// compacts until nothing is left to plan; it triggers the next pass a
// minute after the first returned, so prometheus_tsdb_compactions_triggered_total
// reaching 2 means the first pass is over.
func (p *prometheus) waitCompaction(ctx context.Context, limit time.Duration) (compaction, error) {
	began := time.Now()
	for {
		n, err := p.selfMetric("prometheus_tsdb_compactions_triggered_total")
		if err != nil {
			return compaction{}, err
		}
		if n >= 2 {
			break
		}
		if time.Since(began) > limit {
			return compaction{}, fmt.Errorf("prometheus's first compaction pass did not end within %s", limit)
		}
		select {
		case <-ctx.Done():
			return compaction{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	c := compaction{Waited: time.Since(began)}
	var err error
	if c.Compactions, err = p.selfMetric("prometheus_tsdb_compactions_total"); err != nil {
		return c, err
	}
	blocks, err := blockDirs(p.dir)
	c.Blocks = len(blocks)
	return c, err
}

// promResult is the part of a /api/v1/query answer read here.
type promResult struct {
	Status    string `json:"status"`
	Error     string `json:"error"`
	ErrorType string `json:"errorType"`
	Data      struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
		Stats struct {
			Timings struct {
				EvalTotalTime        float64 `json:"evalTotalTime"`
				QueryPreparationTime float64 `json:"queryPreparationTime"`
				InnerEvalTime        float64 `json:"innerEvalTime"`
				ExecTotalTime        float64 `json:"execTotalTime"`
			} `json:"timings"`
			Samples struct {
				TotalQueryableSamples int64 `json:"totalQueryableSamples"`
			} `json:"samples"`
		} `json:"stats"`
	} `json:"data"`
}

// queryURL is the instant query of q at t, with stats when asked.
func (p *prometheus) queryURL(q string, t time.Time, stats bool) string {
	v := url.Values{"query": {q}, "time": {strconv.FormatInt(t.Unix(), 10)}}
	if stats {
		v.Set("stats", "all")
	}
	return "http://" + p.addr + "/api/v1/query?" + v.Encode()
}

func parseResult(body []byte) (*promResult, error) {
	var r promResult
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query answer: %w", err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query failed: %s: %s", r.ErrorType, r.Error)
	}
	return &r, nil
}

// query runs q at t in this process and returns the answer by the value
// of label by, and Prometheus's own timings.
func (p *prometheus) query(ctx context.Context, q string, t time.Time, by string) (map[string]float64, *promResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.queryURL(q, t, true), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	r, err := parseResult(body)
	if err != nil {
		return nil, nil, err
	}
	vals := map[string]float64{}
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("query answer %v: %w", s.Value, err)
		}
		vals[s.Metric[by]] = v
	}
	return vals, r, nil
}

// blockDirs lists the TSDB's block directories: those with a meta.json,
// which leaves out wal/, chunks_head/ and blocks still being written.
func blockDirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var blocks []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "meta.json")); err == nil {
			blocks = append(blocks, filepath.Join(dir, e.Name()))
		}
	}
	return blocks, nil
}

// tsdbSize is `du -b` of the block directories (apparent sizes, the
// directories' own included), as the rule says, and of their
// chunks/ and index files apart.
type tsdbSize struct {
	Total, Chunks, Index int64
	Blocks               int
}

func measureTSDB(ctx context.Context, dir string) (tsdbSize, error) {
	blocks, err := blockDirs(dir)
	if err != nil {
		return tsdbSize{}, err
	}
	if len(blocks) == 0 {
		return tsdbSize{}, fmt.Errorf("%s holds no blocks", dir)
	}
	s := tsdbSize{Blocks: len(blocks)}
	du := func(paths ...string) (int64, error) {
		p, err := run(ctx, nil, "du", append([]string{"-b", "-s", "-c"}, paths...)...)
		if err != nil {
			return 0, err
		}
		lines := strings.Split(strings.TrimSpace(string(p.Stdout)), "\n")
		f := strings.Fields(lines[len(lines)-1]) // "N\ttotal"
		if len(f) != 2 || f[1] != "total" {
			return 0, fmt.Errorf("du: %q", p.Stdout)
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	if s.Total, err = du(blocks...); err != nil {
		return s, err
	}
	var chunks, index []string
	for _, b := range blocks {
		chunks = append(chunks, filepath.Join(b, "chunks"))
		index = append(index, filepath.Join(b, "index"))
	}
	if s.Chunks, err = du(chunks...); err != nil {
		return s, err
	}
	s.Index, err = du(index...)
	return s, err
}

// backfill runs promtool on the OpenMetrics file into dir.
func backfill(ctx context.Context, promtool, file, dir, maxBlock string) (proc, error) {
	p, err := run(ctx, nil, promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
		"--max-block-duration="+maxBlock, file, dir)
	if err == nil && bytes.Contains(p.Stderr, []byte("error")) {
		err = fmt.Errorf("promtool: %s", tail(p.Stderr))
	}
	return p, err
}
