package server

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
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
