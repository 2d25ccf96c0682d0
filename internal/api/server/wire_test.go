package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/testenv"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// TestWireAsDomain: each concept's wire shape encodes byte for byte as
// the domain value it is converted from, empty and with every field set:
// a field added to a domain type and not to its wire type, or not
// copied, fails here.
func TestWireAsDomain(t *testing.T) {
	t.Run("audit", func(t *testing.T) {
		for _, events := range [][]audit.Event{{{}}, testenv.Filled[[]audit.Event](t)} {
			sameJSON(t, compact, events, AuditFromLog(events))
		}
	})
	t.Run("waste", func(t *testing.T) {
		for _, rep := range []*waste.Report{{}, {Findings: []waste.Finding{{}}}, testenv.Filled[*waste.Report](t)} {
			sameJSON(t, compact, rep, WasteFromReport(rep))
		}
		if got := WasteFromReport(nil); got != nil {
			t.Errorf("WasteFromReport(nil) = %+v, want nil", got)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, rep := range []*report.Report{{}, {Rows: []report.Row{{Job: &report.JobInfo{}}}}, testenv.Filled[*report.Report](t)} {
			var want bytes.Buffer
			if err := rep.WriteJSON(&want); err != nil {
				t.Fatal(err)
			}
			if got := indented(t, UsageFromReport(rep)); !bytes.Equal(got, want.Bytes()) {
				t.Errorf("on the wire:\n%s\nwant, as report.WriteJSON:\n%s", got, want.Bytes())
			}
		}
	})
}

// TestUsageBody: GET /api/v1/usage answers what the report's own
// WriteJSON writes, byte for byte, as it did when it wrote it itself.
func TestUsageBody(t *testing.T) {
	f := newFixture(t, nil)
	a := f.get(t, asAdmin, "/api/v1/usage?by=team&since=1h")
	asked := f.reports.take()
	if a.status != http.StatusOK || len(asked) != 1 {
		t.Fatalf("%d %s, asked %+v", a.status, a.body, asked)
	}
	rep, err := f.reports.Report(context.Background(), asked[0])
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := rep.WriteJSON(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.body, want.Bytes()) {
		t.Errorf("body:\n%s\nwant, as report.WriteJSON:\n%s", a.body, want.Bytes())
	}
}

// TestFairShareOnTheWire: the fair share's wire shape writes the
// half-life in the units grammar, a budget of 0 as null and no rows as
// [], and carries every field of the domain's rows: a field added to
// fairshare.Row or Report fails here until the wire has it (or this test
// says why not).
func TestFairShareOnTheWire(t *testing.T) {
	at := time.Date(2026, 12, 1, 13, 0, 0, 0, time.FixedZone("CET", 3600))
	nlp := fairshare.Row{Name: "nlp", Kind: fairshare.KindTeam, Share: 2, NormShare: 0.5, Usage: 120, NormUsage: 0.75, Factor: 0.4,
		Budget: 2000, BudgetUsed: 1500, Lifted: true}
	got := FairShareFromReport(fairshare.Report{Basis: "held", HalfLife: 7 * 24 * time.Hour, At: at,
		Teams: []fairshare.Row{nlp}, Totals: fairshare.Row{Name: "total", Kind: fairshare.KindTotal, Usage: 120}})
	budget := 2000.0
	want := apitype.FairShare{Basis: "held", HalfLife: "7d", At: at.UTC(), Users: []apitype.FairShareRow{},
		Teams: []apitype.FairShareRow{{Name: "nlp", Kind: apitype.FairShareTeam, Share: 2, NormShare: 0.5, UsageGPUHours: 120, NormUsage: 0.75,
			Factor: 0.4, BudgetGPUHours: &budget, BudgetUsedGPUHours: 1500, BudgetLifted: true}},
		Totals: apitype.FairShareRow{Name: "total", Kind: apitype.FairShareTotal, UsageGPUHours: 120}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("on the wire (-want +got):\n%s", diff)
	}
	if b := compact(t, got); !bytes.Contains(b, []byte(`"users":[]`)) || !bytes.Contains(b, []byte(`"budget_gpu_hours":null`)) {
		t.Errorf("no users or no budget are not [] and null:\n%s", b)
	}
	for typ, copied := range map[reflect.Type][]string{
		reflect.TypeFor[fairshare.Report](): {"Basis", "HalfLife", "Users", "Teams", "Totals", "At"},
		reflect.TypeFor[fairshare.Row]():    {"Name", "Kind", "Team", "Share", "NormShare", "Usage", "NormUsage", "Factor", "Budget", "BudgetUsed", "Lifted"},
	} {
		var fields []string
		for f := range typ.Fields() {
			if f.IsExported() {
				fields = append(fields, f.Name)
			}
		}
		if diff := cmp.Diff(copied, fields); diff != "" {
			t.Errorf("%s's fields are not those FairShareFromReport copies (-copied +fields):\n%s", typ, diff)
		}
	}
}

// TestHistoryOnTheWire: each GPU series keeps its GPU and every figure of
// its points, and a field added to ledger.GPUPoint fails here until the
// wire has it (or this test says why not).
func TestHistoryOnTheWire(t *testing.T) {
	p := testenv.Filled[ledger.GPUPoint](t)
	got := HistoryFromLedger([]ledger.GPUHistory{{GPU: ledger.GPU{Node: "n1", UUID: "GPU-a", Index: 2, Model: "H100"}, Points: []ledger.GPUPoint{p}}, {}})
	want := []apitype.GPUHistory{{UUID: "GPU-a", Index: 2, Model: "H100", Points: []apitype.HistoryPoint{{T: p.Start, Samples: p.Samples,
		UtilMean: p.UtilMean, UtilMax: p.UtilMax, MemMean: p.MemoryMean, MemMax: p.MemoryMax,
		PowerMean: p.PowerMean, PowerMax: p.PowerMax, TempMean: p.TempMean, TempMax: p.TempMax}}}, {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("on the wire (-want +got):\n%s", diff)
	}
	if got := HistoryFromLedger(nil); got != nil {
		t.Errorf("HistoryFromLedger(nil) = %+v, want nil", got)
	}
	// A GPU's node and memory are not part of its series on the wire.
	for typ, copied := range map[reflect.Type][]string{
		reflect.TypeFor[ledger.GPUHistory](): {"GPU", "Points"},
		reflect.TypeFor[ledger.GPU]():        {"Node", "UUID", "Index", "Model", "MemoryTotal"},
		reflect.TypeFor[ledger.GPUPoint]():   {"Start", "Samples", "UtilMean", "UtilMax", "MemoryMean", "MemoryMax", "PowerMean", "PowerMax", "TempMean", "TempMax"},
	} {
		var fields []string
		for f := range typ.Fields() {
			if f.IsExported() {
				fields = append(fields, f.Name)
			}
		}
		if diff := cmp.Diff(copied, fields); diff != "" {
			t.Errorf("%s's fields are not those HistoryFromLedger knows (-known +fields):\n%s", typ, diff)
		}
	}
}

// sameJSON fails when domain and wire encode differently.
func sameJSON(t *testing.T, enc func(*testing.T, any) []byte, domain, wire any) {
	t.Helper()
	if got, want := enc(t, wire), enc(t, domain); !bytes.Equal(got, want) {
		t.Errorf("on the wire:\n%s\nwant, as the domain's %T:\n%s", got, domain, want)
	}
}

func compact(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func indented(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
