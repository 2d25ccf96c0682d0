// Command apiload puts a bounded load on one endpoint of the agent's API
// and says how fast it answered: requests, errors, status codes, the
// request rate and latency percentiles. It keeps -c connections alive and
// sends on each a new request as soon as the last is answered (a closed
// loop): the rate it reports is what the agent sustains at that
// concurrency, and its latencies leave out the queueing that clients
// arriving at a fixed rate above it would see.
//
//	go run ./scripts/apiload -url http://127.0.0.1:9400 -c 16 -d 20s
//	go run ./scripts/apiload -url unix:///var/lib/gpumeter/api.sock
//	go run ./scripts/apiload -url http://127.0.0.1:9400 -c 200 -sources 200
//
// With -sources N the connections come from N loopback addresses,
// 127.0.0.2 and up, one after the other, as a flood from many hosts would;
// only a loopback agent can be loaded so.
//
// The bearer token is read from the environment variable -token-env
// names (GPUMETER_TOKEN), never from a flag, so that it stays out of
// shell history and process listings. An empty variable sends no token.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxDuration bounds a run, so that a typo cannot leave a load running.
const (
	maxDuration = 5 * time.Minute
	maxWarmup   = time.Minute
	maxConns    = 1024
	maxSources  = 250
)

// options are the parsed flags.
type options struct {
	url, path, tokenEnv, ca string
	conns, sources          int
	duration, warmup        time.Duration
	timeout                 time.Duration
	insecure, json          bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "apiload:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	clients := make([]*http.Client, max(1, o.sources))
	var target string
	for i := range clients {
		var local net.Addr
		if o.sources > 0 {
			local = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}
		}
		var err error
		if clients[i], target, err = newClient(o, local); err != nil {
			return err
		}
	}
	token := strings.TrimSpace(os.Getenv(o.tokenEnv))
	res, err := load(ctx, clients, target, token, o)
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.writeText(stdout)
	}
	if err == nil && res.Requests == 0 {
		// Figures of nothing must not pass for a result in a script.
		err = errors.New("no request was answered")
	}
	return err
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("apiload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: apiload [flags]

Sends GET requests to one API endpoint from -c keep-alive connections for
-d after a -warmup, then prints requests, errors, status codes, req/s and
p50/p90/p99/max latency. The bearer token comes from the environment
variable -token-env names; when it is empty no token is sent.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.url, "url", "http://127.0.0.1:9400", "the agent: http://HOST:PORT, https://HOST:PORT or unix:///PATH/api.sock")
	fs.StringVar(&o.path, "path", "/api/v1/containers", "the endpoint to load")
	fs.StringVar(&o.tokenEnv, "token-env", "GPUMETER_TOKEN", "name of the environment variable holding the bearer token")
	fs.IntVar(&o.conns, "c", 16, "concurrent connections, each with one request in flight")
	fs.IntVar(&o.sources, "sources", 0, "send from this many loopback addresses, 127.0.0.2 and up (at most 250; 0: the system's choice)")
	fs.DurationVar(&o.duration, "d", 20*time.Second, "how long to measure (at most "+maxDuration.String()+")")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "load before measuring, not counted (at most "+maxWarmup.String()+")")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "give up on one request after this long; it counts as an error")
	fs.BoolVar(&o.insecure, "insecure", false, "https: do not verify the agent's certificate")
	fs.StringVar(&o.ca, "ca", "", "https: verify the agent's certificate against this PEM file")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	case o.conns < 1 || o.conns > maxConns:
		return o, fmt.Errorf("-c %d: want 1..%d", o.conns, maxConns)
	case o.sources < 0 || o.sources > maxSources:
		return o, fmt.Errorf("-sources %d: want 0..%d", o.sources, maxSources)
	case o.duration <= 0 || o.duration > maxDuration:
		return o, fmt.Errorf("-d %s: want more than 0 and at most %s", o.duration, maxDuration)
	case o.warmup < 0 || o.warmup > maxWarmup:
		return o, fmt.Errorf("-warmup %s: want 0..%s", o.warmup, maxWarmup)
	case o.timeout <= 0:
		return o, fmt.Errorf("-timeout %s: want more than 0", o.timeout)
	case !strings.HasPrefix(o.path, "/"):
		return o, fmt.Errorf("-path %q: want a path starting with /", o.path)
	case o.tokenEnv == "":
		return o, errors.New("-token-env: name an environment variable")
	}
	return o, nil
}

// newClient builds the client workers share, and the URL its requests go
// to; a local address, when there is one, is the one its connections
// come from.
func newClient(o options, local net.Addr) (*http.Client, string, error) {
	u, err := url.Parse(o.url)
	if err != nil {
		return nil, "", fmt.Errorf("-url: %w", err)
	}
	if local != nil {
		if ip := net.ParseIP(u.Hostname()); u.Scheme == "unix" || ip == nil || !ip.IsLoopback() {
			return nil, "", fmt.Errorf("-sources: -url %q is not a loopback address", o.url)
		}
	}
	tr := &http.Transport{
		MaxIdleConns:        o.conns,
		MaxIdleConnsPerHost: o.conns,
		MaxConnsPerHost:     o.conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: local}).DialContext,
	}
	var target string
	switch u.Scheme {
	case "http":
		if o.insecure || o.ca != "" {
			return nil, "", errors.New("-insecure and -ca are for https URLs")
		}
		target = strings.TrimSuffix(o.url, "/") + o.path
	case "https":
		if o.insecure && o.ca != "" {
			return nil, "", errors.New("-insecure and -ca exclude each other")
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.insecure}
		if o.ca != "" {
			pem, err := os.ReadFile(o.ca)
			if err != nil {
				return nil, "", fmt.Errorf("-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, "", fmt.Errorf("-ca %s: no PEM certificate in it", o.ca)
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
		target = strings.TrimSuffix(o.url, "/") + o.path
	case "unix":
		sock := u.Path
		if sock == "" {
			return nil, "", fmt.Errorf("-url %q: want unix:///PATH/api.sock", o.url)
		}
		if o.insecure || o.ca != "" {
			return nil, "", errors.New("-insecure and -ca are for https URLs")
		}
		d := &net.Dialer{Timeout: 5 * time.Second}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
		// The host is only a name for the connection pool and the
		// Host header; the socket is what is dialled.
		target = "http://unix" + o.path
	default:
		return nil, "", fmt.Errorf("-url %q: want http://, https:// or unix://", o.url)
	}
	return &http.Client{
		Transport: tr,
		Timeout:   o.timeout,
		// A redirect would measure another endpoint.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, target, nil
}

// worker is one connection's share of the results; each worker owns its
// own, so that recording takes no lock.
type worker struct {
	latencies []time.Duration
	status    map[int]int
	failed    int
	firstErr  error
	bytes     int64
}

// load runs the workers through the warm-up and the measured span and
// merges what they saw.
func load(ctx context.Context, clients []*http.Client, target, token string, o options) (*result, error) {
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "gpumeter-apiload")

	begin := time.Now()
	measureFrom := begin.Add(o.warmup)
	runCtx, cancel := context.WithDeadline(ctx, measureFrom.Add(o.duration))
	defer cancel()
	workers := make([]*worker, o.conns)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{status: map[int]int{}}
		// Room for 2,000 answers a second in all, so that appending
		// seldom copies during the run.
		w.latencies = make([]time.Duration, 0, min(int(o.duration.Seconds()*2000)/o.conns+1, 1<<20))
		workers[i] = w
		wg.Go(func() { w.run(runCtx, clients[i%len(clients)], req, measureFrom) })
	}
	wg.Wait()
	end := time.Now()
	if end.Before(measureFrom) {
		return nil, errors.New("stopped during the warm-up: nothing was measured")
	}
	r := merge(workers, o, target, end.Sub(measureFrom), ctx.Err() != nil)
	r.Wall = end.Sub(begin).Seconds()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		r.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return r, nil
}

// run sends requests until ctx ends, recording those begun after
// measureFrom.
func (w *worker) run(ctx context.Context, client *http.Client, req *http.Request, measureFrom time.Time) {
	req = req.WithContext(ctx)
	for ctx.Err() == nil {
		start := time.Now()
		resp, err := client.Do(req)
		var n int64
		if err == nil {
			n, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		took := time.Since(start)
		if ctx.Err() != nil {
			// Cut short by the end of the run: neither an answer nor
			// an error of the agent's.
			return
		}
		if start.Before(measureFrom) {
			continue
		}
		if err != nil {
			w.failed++
			if w.firstErr == nil {
				w.firstErr = err
			}
			continue
		}
		w.latencies = append(w.latencies, took)
		w.status[resp.StatusCode]++
		w.bytes += n
	}
}

// result is what a run measured.
type result struct {
	Target      string         `json:"target"`
	Concurrency int            `json:"concurrency"`
	Seconds     float64        `json:"duration_seconds"`
	Interrupted bool           `json:"interrupted,omitempty"`
	Requests    int            `json:"requests"` // answered, whatever the status
	Errors      int            `json:"errors"`   // no answer: refused, reset, timed out
	FirstError  string         `json:"first_error,omitempty"`
	Status      map[string]int `json:"status"`
	Non200      int            `json:"non_200"`
	PerSecond   float64        `json:"requests_per_second"`
	BytesPerReq float64        `json:"bytes_per_response"`
	Latency     latency        `json:"latency_ms"`
	// CPUSeconds is this process's own CPU time, warm-up included: on a
	// machine shared with the agent it is CPU the agent did not get.
	CPUSeconds float64 `json:"generator_cpu_seconds"`
	Wall       float64 `json:"generator_wall_seconds"`
}

// latency holds percentiles in milliseconds.
type latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func merge(workers []*worker, o options, target string, measured time.Duration, interrupted bool) *result {
	r := &result{Target: target, Concurrency: o.conns, Seconds: measured.Seconds(), Interrupted: interrupted, Status: map[string]int{}}
	var all []time.Duration
	var bytes int64
	for _, w := range workers {
		all = append(all, w.latencies...)
		for code, n := range w.status {
			r.Status[strconv.Itoa(code)] += n
			if code != http.StatusOK {
				r.Non200 += n
			}
		}
		r.Errors += w.failed
		if w.firstErr != nil && r.FirstError == "" {
			r.FirstError = w.firstErr.Error()
		}
		bytes += w.bytes
	}
	r.Requests = len(all)
	if measured > 0 {
		r.PerSecond = float64(r.Requests) / measured.Seconds()
	}
	if r.Requests > 0 {
		r.BytesPerReq = float64(bytes) / float64(r.Requests)
	}
	slices.Sort(all)
	r.Latency = latency{P50: ms(quantile(all, 0.50)), P90: ms(quantile(all, 0.90)), P99: ms(quantile(all, 0.99)), Max: ms(quantile(all, 1))}
	return r
}

// quantile is the nearest-rank q-quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r *result) writeText(w io.Writer) error {
	codes := make([]string, 0, len(r.Status))
	for c := range r.Status {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	status := []string{"none"}
	if len(codes) > 0 {
		status = status[:0]
	}
	for _, c := range codes {
		status = append(status, fmt.Sprintf("%s: %d", c, r.Status[c]))
	}
	note := ""
	if r.Interrupted {
		note = " (interrupted)"
	}
	fmt.Fprintf(w, "GET %s, %d connections, %.1f s measured%s\n", r.Target, r.Concurrency, r.Seconds, note)
	fmt.Fprintf(w, "requests   %d answered, %d errors\n", r.Requests, r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error %s\n", r.FirstError)
	}
	fmt.Fprintf(w, "status     %s (non-200: %d)\n", strings.Join(status, ", "), r.Non200)
	fmt.Fprintf(w, "rate       %.0f req/s, %.0f bytes per response\n", r.PerSecond, r.BytesPerReq)
	fmt.Fprintf(w, "latency    p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n", r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max)
	_, err := fmt.Fprintf(w, "generator CPU %.1f s in %.1f s (%.0f %% of one core), warm-up included\n", r.CPUSeconds, r.Wall, 100*r.CPUSeconds/max(r.Wall, 1e-9))
	return err
}
