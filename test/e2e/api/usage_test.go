package api

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// apiError checks that a response is the API's JSON error with the status
// and code given, and returns its message.
func apiError(t *testing.T, url string, status int, code string) string {
	t.Helper()
	got, ctype, body := harness.Fetch(t, url)
	if got != status || ctype != "application/json" {
		t.Errorf("GET %s: %d %s, want %d application/json; body %s", url, got, ctype, status, body)
	}
	var e apitype.Error
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Errorf("GET %s: body is not an API error: %v\n%s", url, err, body)
	}
	if e.Code != code || e.Message == "" {
		t.Errorf("GET %s: error %+v, want code %q and a message", url, e, code)
	}
	return e.Message
}

// TestServeUsageAPI reads /api/v1/usage and /api/v1/usage.csv of a live
// agent once its ledger has rows: the JSON contract of docs/design.md, totals
// that add up, the CSV form, and a 400 naming the problem for each kind of
// bad query.
func TestServeUsageAPI(t *testing.T) {
	a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms", "--ledger-flush-interval", "1s")
	usage := a.URL + "/api/v1/usage?by=user&since=1h"

	var rep report.Report
	var body []byte
	harness.WaitFor(t, 10*time.Second, "usage rows in the ledger", func() bool {
		var status int
		var ctype string
		status, ctype, body = harness.Fetch(t, usage)
		if status != http.StatusOK || ctype != "application/json" {
			t.Fatalf("GET %s: %d %s: %s", usage, status, ctype, body)
		}
		rep = report.Report{}
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatalf("GET %s: %v\n%s", usage, err, body)
		}
		return len(rep.Rows) == 4 && rep.Host.GPUHours > 0
	})

	// The contract other tools read: these fields, with these types.
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	rowFields := []string{"key", "gpu_hours_allocated", "gpu_hours_used", "efficiency", "energy_kwh",
		"peak_gpu_memory_bytes", "cpu_core_hours", "ram_gb_hours", "cost", "containers",
		"gpu_hours_present", "gpu_hours_held"} // a ledger written by this release knows held
	checkFields := func(where string, obj any, fields []string) {
		t.Helper()
		m, ok := obj.(map[string]any)
		if !ok {
			t.Errorf("%s is %T, want an object", where, obj)
			return
		}
		for _, f := range fields {
			v, ok := m[f]
			switch {
			case !ok:
				t.Errorf("%s has no %q", where, f)
			case f == "key":
				if _, ok := v.(string); !ok {
					t.Errorf("%s.%s is %T, want a string", where, f, v)
				}
			default:
				if _, ok := v.(float64); !ok {
					t.Errorf("%s.%s is %T, want a number", where, f, v)
				}
			}
		}
	}
	for _, f := range []string{"from", "to", "by", "currency"} {
		if _, ok := doc[f].(string); !ok {
			t.Errorf("usage.%s is %T, want a string", f, doc[f])
		}
	}
	for _, f := range []string{"from", "to"} {
		if _, err := time.Parse(time.RFC3339, doc[f].(string)); err != nil {
			t.Errorf("usage.%s: %v", f, err)
		}
	}
	rows, _ := doc["rows"].([]any)
	for i, r := range rows {
		checkFields("usage.rows["+strconv.Itoa(i)+"]", r, rowFields)
	}
	checkFields("usage.totals", doc["totals"], rowFields)
	checkFields("usage.idle", doc["idle"], []string{"gpu_hours", "energy_kwh", "cost"})

	if rep.By != "user" || rep.Currency != "USD" || !rep.From.Before(rep.To) || rep.To.Sub(rep.From) < time.Hour {
		t.Errorf("usage header: by %q, currency %q, window %s..%s; want user, USD and at least the last hour", rep.By, rep.Currency, rep.From, rep.To)
	}
	byUser := map[string]report.Row{}
	var keys []string
	for _, r := range rep.Rows {
		byUser[r.Key] = r
		keys = append(keys, r.Key)
	}
	if want := []string{"alice", "bob", "carol", "dave"}; !slices.Equal(keys, want) {
		t.Fatalf("usage rows %v, want %v", keys, want)
	}
	alice, bob, carol, dave := byUser["alice"], byUser["bob"], byUser["carol"], byUser["dave"]
	// shared.yaml: alice and bob share GPU 0 (60 % and 20 %), carol holds
	// GPU 1 idle, dave runs a process on GPU 1 outside any container.
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"bob's allocated GPU-hours (alice's)", bob.GPUHoursAllocated, alice.GPUHoursAllocated},
		{"carol's allocated GPU-hours (alice's and bob's)", carol.GPUHoursAllocated, alice.GPUHoursAllocated + bob.GPUHoursAllocated},
		{"alice's used GPU-hours (60 % of her present time)", alice.GPUHoursUsed, 0.6 * alice.GPUHoursPresent},
		{"bob's used GPU-hours (20 % of his present time)", bob.GPUHoursUsed, 0.2 * bob.GPUHoursPresent},
		{"dave's used GPU-hours (50 % of his present time)", dave.GPUHoursUsed, 0.5 * dave.GPUHoursPresent},
	} {
		if !harness.CloseTo(c.got, c.want, 1e-3) {
			t.Errorf("%s = %.9f, want %.9f", c.what, c.got, c.want)
		}
	}
	// Held GPU-hours are the whole time each container had its GPU:
	// alice and bob each hold GPU 0 all the time, twice their allocated
	// half; efficiency is used / held, so alice's is her 60 %, not the
	// 120 % of used / allocated.
	held := func(r report.Row) float64 {
		if r.GPUHoursHeld == nil {
			t.Fatalf("row %s: gpu_hours_held null in a ledger this release wrote", r.Key)
		}
		return *r.GPUHoursHeld
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"alice's held GPU-hours (twice her allocated)", held(alice), 2 * alice.GPUHoursAllocated},
		{"bob's held GPU-hours (twice his allocated)", held(bob), 2 * bob.GPUHoursAllocated},
		{"carol's held GPU-hours (her allocated)", held(carol), carol.GPUHoursAllocated},
		{"dave's held GPU-hours", held(dave), 0},
		{"alice's efficiency", alice.Efficiency, 0.6},
		{"bob's efficiency", bob.Efficiency, 0.2},
		{"carol's efficiency", carol.Efficiency, 0},
		{"the total efficiency (alice's and bob's use over all held time)", rep.Totals.Efficiency, (alice.GPUHoursUsed + bob.GPUHoursUsed) / held(rep.Totals)},
	} {
		if !harness.CloseTo(c.got, c.want, 1e-3) {
			t.Errorf("%s = %.9f, want %.9f", c.what, c.got, c.want)
		}
	}
	for _, r := range append(rep.Rows, rep.Totals) {
		if r.Efficiency < 0 || r.Efficiency > 1 {
			t.Errorf("row %s: efficiency %v, want within 0..1", r.Key, r.Efficiency)
		}
	}
	if len(rep.Notes) != 0 {
		t.Errorf("notes %q, want none for a ledger this release wrote", rep.Notes)
	}
	if dave.GPUHoursAllocated != 0 || carol.GPUHoursUsed != 0 || alice.Containers != 1 || dave.Containers != 0 {
		t.Errorf("dave allocated %g, carol used %g, containers alice %d dave %d; want 0, 0, 1, 0",
			dave.GPUHoursAllocated, carol.GPUHoursUsed, alice.Containers, dave.Containers)
	}
	var alloc, used, kwh float64
	containers := 0
	for _, r := range rep.Rows {
		alloc += r.GPUHoursAllocated
		used += r.GPUHoursUsed
		kwh += r.EnergyKWh
		containers += r.Containers
	}
	if !harness.CloseTo(rep.Totals.GPUHoursAllocated, alloc, 1e-9) || !harness.CloseTo(rep.Totals.GPUHoursUsed, used, 1e-9) ||
		!harness.CloseTo(rep.Totals.EnergyKWh, kwh, 1e-9) || rep.Totals.Containers != containers {
		t.Errorf("totals %+v do not add up the rows: allocated %g, used %g, kWh %g, %d containers", rep.Totals, alloc, used, kwh, containers)
	}
	if !harness.CloseTo(rep.Host.GPUHours, rep.Totals.GPUHoursAllocated+rep.Idle.GPUHours, 1e-9) ||
		!harness.CloseTo(rep.Host.EnergyKWh, rep.Totals.EnergyKWh+rep.Idle.EnergyKWh, 1e-9) || rep.Host.GPUs != 2 {
		t.Errorf("host %+v, want 2 GPUs and allocated %g + idle %g GPU-hours, %g + %g kWh",
			rep.Host, rep.Totals.GPUHoursAllocated, rep.Idle.GPUHours, rep.Totals.EnergyKWh, rep.Idle.EnergyKWh)
	}

	// The CSV: a header, one line per user, then the total and the idle
	// pool.
	status, ctype, csvBody := harness.Fetch(t, a.URL+"/api/v1/usage.csv?by=user&since=1h")
	if status != http.StatusOK || !strings.HasPrefix(ctype, "text/csv") {
		t.Fatalf("GET /api/v1/usage.csv: %d %s: %s", status, ctype, csvBody)
	}
	recs, err := csv.NewReader(strings.NewReader(string(csvBody))).ReadAll()
	if err != nil {
		t.Fatalf("usage.csv: %v\n%s", err, csvBody)
	}
	if len(recs) < 7 || recs[0][0] != "kind" || recs[0][1] != "key" || !slices.Contains(recs[0], "gpu_hours_allocated") {
		t.Fatalf("usage.csv has %d lines with header %v, want a header, 4 rows, total and idle:\n%s", len(recs), recs[0], csvBody)
	}
	var csvKeys []string
	for _, r := range recs[1:] {
		if r[0] == "row" {
			csvKeys = append(csvKeys, r[1])
		}
	}
	if !slices.Equal(csvKeys, keys) || recs[len(recs)-2][0] != "total" || recs[len(recs)-1][0] != "idle" {
		t.Errorf("usage.csv rows %v and last kinds %q, %q; want %v, total, idle", csvKeys, recs[len(recs)-2][0], recs[len(recs)-1][0], keys)
	}

	for _, tt := range []struct {
		name, query string
		want        []string // in the message
	}{
		{"unknown grouping", "/api/v1/usage?by=nobody", []string{`by: "nobody"`, "user, team, project, container, image, gpu, node"}},
		{"negative since", "/api/v1/usage?since=-1h", []string{"since", "negative"}},
		{"garbage since", "/api/v1/usage?since=soon", []string{"since", `"soon" is not a duration`}},
		{"from after to", "/api/v1/usage?from=2026-11-02&to=2026-11-01", []string{"from 2026-11-02T00:00:00Z is not before to 2026-11-01T00:00:00Z"}},
		{"bad from", "/api/v1/usage?from=yesterday", []string{"from", `"yesterday"`, "RFC 3339"}},
		{"unknown parameter", "/api/v1/usage?bye=user", []string{`unknown parameter "bye"`}},
		{"label without =", "/api/v1/usage?label=team", []string{"label", "key=value", `"team"`}},
		{"unknown format", "/api/v1/usage?format=xml", []string{`format: "xml"`, "json"}},
		{"json from the CSV endpoint", "/api/v1/usage.csv?format=json", []string{"format", "csv only"}},
		{"bad query on the CSV endpoint", "/api/v1/usage.csv?by=nobody", []string{`by: "nobody"`}},
		{"parameter twice", "/api/v1/usage?by=user&by=team", []string{"by", "2 times"}},
		{"since and from", "/api/v1/usage?since=1h&from=2026-11-01", []string{"since and from exclude each other"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msg := apiError(t, a.URL+tt.query, http.StatusBadRequest, "bad_request")
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not contain %q", msg, w)
				}
			}
		})
	}
}

// TestServeUsageAPIUnavailable: without a ledger the usage endpoints say
// so, and a price list that names a GPU model nobody has is a
// configuration error, not a report with the default price.
func TestServeUsageAPIUnavailable(t *testing.T) {
	t.Run("ledger off", func(t *testing.T) {
		a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms", "--ledger-enabled=false")
		for _, path := range []string{"/api/v1/usage?since=1h", "/api/v1/usage.csv"} {
			msg := apiError(t, a.URL+path, http.StatusServiceUnavailable, "ledger_off")
			if !strings.Contains(msg, "ledger.enabled") {
				t.Errorf("GET %s: message %q does not name ledger.enabled", path, msg)
			}
		}
	})
	t.Run("price for an unknown model", func(t *testing.T) {
		cfg := harness.WriteText(t, filepath.Join(t.TempDir(), "gpumeter.yaml"),
			"cost:\n  gpu_hour:\n    NVIDIA H100 80GB HBM3: 3\n    NVIDIA A100 80GB: 2\n")
		a := harness.Serve(t, nil, "--config", cfg, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms")
		msg := apiError(t, a.URL+"/api/v1/usage?since=1h", http.StatusInternalServerError, "bad_config")
		// Callers learn that the price list is wrong; which models it
		// names is for the operator, in the agent's log.
		if !strings.Contains(msg, "the agent's log says which") {
			t.Errorf("message %q does not point to the agent's log", msg)
		}
		harness.WaitFor(t, 5*time.Second, "the agent's log to name the models", func() bool {
			log := a.Stderr.String()
			return strings.Contains(log, `\"NVIDIA A100 80GB\"`) && strings.Contains(log, "NVIDIA H100 80GB HBM3")
		})
	})
}

// TestServeUsageAddsUpWhileFlushing reads a window that ends now again
// and again while the agent commits a batch every 100 ms: each report's
// rows plus idle pool must equal the host's GPU-hours and energy, which
// holds only when the rows and the GPU totals come from one snapshot.
func TestServeUsageAddsUpWhileFlushing(t *testing.T) {
	a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "20ms", "--ledger-flush-interval", "100ms")
	usage := a.URL + "/api/v1/usage?by=container&since=1h"
	reads := 0
	deadline := time.Now().Add(4 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) { // under the API's rate limit
		status, _, body := harness.Fetch(t, usage)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", usage, status, body)
		}
		var rep report.Report
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Host.GPUHours == 0 {
			continue
		}
		reads++
		hours := rep.Totals.GPUHoursAllocated + rep.Idle.GPUHours
		energy := rep.Totals.EnergyKWh + rep.Idle.EnergyKWh
		// The ledger rounds each row to the microsecond and millijoule;
		// one batch of 100 ms is some thousand times more than that.
		if math.Abs(hours-rep.Host.GPUHours) > 1e-8 || math.Abs(energy-rep.Host.EnergyKWh) > 1e-8 {
			t.Fatalf("read %d: rows %.9f + idle %.9f GPU-hours, host %.9f; rows %.9f + idle %.9f kWh, host %.9f: rows and totals are of different moments",
				reads, rep.Totals.GPUHoursAllocated, rep.Idle.GPUHours, rep.Host.GPUHours, rep.Totals.EnergyKWh, rep.Idle.EnergyKWh, rep.Host.EnergyKWh)
		}
	}
	if reads < 20 {
		t.Errorf("only %d reports in 4 s, want at least 20 for the check to mean something", reads)
	}
	t.Logf("%d reports added up", reads)
}
