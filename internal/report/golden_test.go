package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/cost"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestGolden writes the fixture's report in every format and compares it
// with testdata/<name>.<format>.golden; go test -update rewrites them.
func TestGolden(t *testing.T) {
	used := prices()
	used.Basis, used.Idle = cost.BasisUsed, cost.IdleWeighted
	used.Weights = map[string]float64{cost.WeightCPU: 2}
	_, _, jobs := jobFixture()
	reports := []struct {
		name  string
		by    string
		model cost.Model
		build func(*testing.T) *Report // nil: build the fixture by, at model
	}{
		{"user", ByUser, prices(), nil},
		{"container-used-weighted", ByContainer, used, nil},
		{"job", ByJob, prices(), func(t *testing.T) *Report { return buildJobs(t, jobs[:1]) }},
	}
	formats := []struct {
		ext   string
		write func(*Report, *bytes.Buffer) error
	}{
		{"table", func(r *Report, b *bytes.Buffer) error { return r.WriteTable(b) }},
		{"csv", func(r *Report, b *bytes.Buffer) error { return r.WriteCSV(b) }},
		{"json", func(r *Report, b *bytes.Buffer) error { return r.WriteJSON(b) }},
		{"focus.csv", func(r *Report, b *bytes.Buffer) error { return r.WriteFOCUS(b) }},
	}
	for _, rep := range reports {
		var r *Report
		if rep.build != nil {
			r = rep.build(t)
		} else {
			r = build(t, rep.by, rep.model, nil)
		}
		for _, f := range formats {
			t.Run(rep.name+"/"+f.ext, func(t *testing.T) {
				var b bytes.Buffer
				if err := f.write(r, &b); err != nil {
					t.Fatal(err)
				}
				golden := filepath.Join("testdata", rep.name+"."+f.ext+".golden")
				if *update {
					if err := os.MkdirAll("testdata", 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(b.String(), string(want)); diff != "" {
					t.Errorf("output differs from %s (go test ./internal/report -run Golden -update, then review) (-got +want):\n%s", golden, diff)
				}
			})
		}
	}
}

// TestJSONContract checks the fields docs/design.md promises other tools, so
// that rewriting the golden files cannot drop one unnoticed.
func TestJSONContract(t *testing.T) {
	var b bytes.Buffer
	if err := build(t, ByUser, prices(), nil).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	row := []string{"key", "gpu_hours_allocated", "gpu_hours_used", "efficiency", "energy_kwh",
		"peak_gpu_memory_bytes", "cpu_core_hours", "ram_gb_hours", "cost", "containers",
		"gpu_hours_present", "gpu_hours_held"}
	has := func(where string, obj any, keys ...string) {
		t.Helper()
		m, ok := obj.(map[string]any)
		if !ok {
			t.Fatalf("%s is %T, want an object", where, obj)
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s has no %q", where, k)
			}
		}
	}
	has("report", got, "from", "to", "by", "currency", "rows", "idle", "totals")
	if got["from"] != "2026-11-02T10:00:00Z" || got["to"] != "2026-11-02T12:00:00Z" || got["by"] != "user" || got["currency"] != "USD" {
		t.Errorf("header %v %v %v %v", got["from"], got["to"], got["by"], got["currency"])
	}
	rows, _ := got["rows"].([]any)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for _, r := range rows {
		has("row", r, row...)
	}
	has("totals", got["totals"], row...)
	has("idle", got["idle"], "gpu_hours", "energy_kwh", "cost")
}
