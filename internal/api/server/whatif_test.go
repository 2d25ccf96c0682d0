package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// whatifLedger is a SQLite ledger of two hours on two GPUs: alice's
// container holds both and computes on GPU 0 at 90 %, bob's holds one
// GPU for the second hour at 80 %.
func whatifLedger(t *testing.T) (*sqlite.Store, time.Time) {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	start := servertest.Start.Add(-3 * time.Hour)
	gpus := []ledger.GPU{{Node: "n1", UUID: "GPU-0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30},
		{Node: "n1", UUID: "GPU-1", Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30}}
	b := ledger.Batch{Nodes: []ledger.Node{{Name: "n1", FirstSeen: start, LastSeen: start.Add(2 * time.Hour)}}, GPUs: gpus}
	for k, c := range []struct {
		user  string
		gpus  []int
		util  []float64
		from  int
		until int
	}{{"alice", []int{0, 1}, []float64{0.9, 0}, 0, 120}, {"bob", []int{1}, []float64{0.8}, 120, 180}} {
		id := fmt.Sprintf("%064x", k+1)
		b.Containers = append(b.Containers, ledger.Container{Node: "n1", ID: id, Name: c.user + "-train", Image: "train:1", User: c.user,
			StartedAt: start.Add(time.Duration(c.from) * time.Minute), FinishedAt: start.Add(time.Duration(c.until) * time.Minute),
			FirstSeen: start, LastSeen: start.Add(3 * time.Hour)})
		for m := c.from; m < c.until; m++ {
			for i, g := range c.gpus {
				b.Usage = append(b.Usage, ledger.Usage{Node: "n1", Start: start.Add(time.Duration(m) * time.Minute), OwnerKind: ledger.KindContainer,
					OwnerID: id, GPU: gpus[g].UUID, Sums: ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60, PresentSeconds: 60,
						UsedSeconds: 60 * c.util[i], MemoryByteSeconds: 60 * float64(40<<30), PeakMemoryBytes: 40 << 30}})
			}
		}
	}
	if err := store.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	return store, start
}

// TestWhatIfAndAdvice: GET /api/v1/whatif answers what `gpumeter whatif
// --format json` prints, byte for byte; GET /api/v1/advice gives a user
// their own advice only and admins everyone's; bad parameters are named.
func TestWhatIfAndAdvice(t *testing.T) {
	store, start := whatifLedger(t)
	prices := cost.Model{GPUHour: map[string]float64{"default": 3}, Currency: "EUR"}
	var svc *whatif.Service
	f := servertest.NewFixture(t, func(c *server.Config) {
		svc = &whatif.Service{Ledger: store, Prices: prices, Now: c.Now, MaxWindow: 7 * 24 * time.Hour}
		c.WhatIf = svc
	})
	q := "from=" + start.Format(time.RFC3339) + "&to=" + start.Add(4*time.Hour).Format(time.RFC3339)

	a := f.Get(t, servertest.AsAlice, "/api/v1/whatif?"+q+"&share=2&search=0")
	if a.Status != http.StatusOK {
		t.Fatalf("whatif: %d %s", a.Status, a.Body)
	}
	h, err := whatif.Load(context.Background(), store, start, start.Add(4*time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := whatif.Run(h, whatif.Options{Params: whatif.Params{Share: 2, SwitchOverhead: whatif.DefaultSwitchOverhead}, Prices: prices, NoSearch: true})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := res.WriteJSON(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Body, want.Bytes()) {
		t.Errorf("GET /api/v1/whatif differs from the command's JSON:\n got %s\nwant %s", a.Body, want.Bytes())
	}
	var wi apitype.WhatIf
	a.Decode(t, &wi)
	if len(wi.Modes) != 3 || wi.Measured.GPUs != 2 || wi.Model.Holders != 2 {
		t.Errorf("whatif: got %+v", wi)
	}

	advice := func(caller, extra string) (int, apitype.AdviceList) {
		a := f.Get(t, caller, "/api/v1/advice?"+q+extra)
		var l apitype.AdviceList
		if a.Status == http.StatusOK {
			a.Decode(t, &l)
		}
		return a.Status, l
	}
	if st, l := advice(servertest.AsAlice, ""); st != 200 || len(l.Advice) != 1 || l.Advice[0].User != "alice" || l.Advice[0].Flag != "--gpus 1" {
		t.Errorf("alice's advice: %d %+v, want her --gpus 1", st, l.Advice)
	} else if got := l.Advice[0].SavedCost; got.Amount != 6 || got.Currency != "EUR" {
		// One GPU of two never computed for 2 h, at 3 EUR an hour.
		t.Errorf("alice's saving: got %+v, want 6 EUR", got)
	}
	if st, l := advice(servertest.AsBob, ""); st != 200 || len(l.Advice) != 0 || l.Advice == nil {
		t.Errorf("bob's advice: %d %+v, want an empty list", st, l)
	}
	if st, l := advice(servertest.AsAdmin, ""); st != 200 || len(l.Advice) != 1 {
		t.Errorf("admin's advice: %d %+v, want alice's", st, l)
	}
	if st, _ := advice(servertest.AsBob, "&user=alice"); st != http.StatusForbidden {
		t.Errorf("bob asking for alice's advice: %d, want 403", st)
	}
	if st, l := advice(servertest.AsAdmin, "&user=bob"); st != 200 || len(l.Advice) != 0 {
		t.Errorf("admin asking for bob's advice: %d %+v", st, l)
	}

	for _, tc := range []struct{ path, want string }{
		{"/api/v1/whatif?mode=fast", `mode: "fast" is not a mode`},
		{"/api/v1/whatif?share=0", `share: "0" is not a whole number between 1 and 64`},
		{"/api/v1/whatif?memory_fraction=2", `memory_fraction: "2" is not a number in (0, 1]`},
		{"/api/v1/whatif?switch_overhead=x", `switch_overhead: "x" is not a number in [0, 1)`},
		{"/api/v1/whatif?fleet_gpus=%2Bx", `fleet_gpus: "+x" is not a GPU count`},
		{"/api/v1/whatif?search=maybe", `search: "maybe" is not 1 or 0`},
		{"/api/v1/whatif?since=3d&from=2026-11-01", "since and from exclude each other"},
		{"/api/v1/whatif?since=30d", "longer than the 7d one replay may cover"},
		{"/api/v1/whatif?by=user", "by: not a parameter of this endpoint"},
		{"/api/v1/advice?mode=exclusive", "mode: not a parameter of this endpoint"},
		{"/api/v1/advice?user=a&team=b", "user and team exclude each other"},
		{"/api/v1/advice?from=2026-11-02&to=2026-11-01", "the window is empty"},
	} {
		a := f.Get(t, servertest.AsAdmin, tc.path)
		e := a.APIError(t, http.StatusBadRequest, apitype.CodeBadRequest)
		if !strings.Contains(e.Message, tc.want) || strings.Contains(e.Message, "\n") {
			t.Errorf("%s: got %q, want %q in it", tc.path, e.Message, tc.want)
		}
	}

	off := servertest.NewFixture(t, func(c *server.Config) { c.WhatIf = nil })
	for _, p := range []string{"/api/v1/whatif", "/api/v1/advice"} {
		off.Get(t, servertest.AsAdmin, p).APIError(t, http.StatusServiceUnavailable, apitype.CodeLedgerOff)
	}
}
