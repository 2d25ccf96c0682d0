package ledgertest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// V3Dir is the directory of the ledger written at schema version 3,
// relative to a backend package's directory (see its README).
const V3Dir = "../testdata/v3"

// v3Reads is what the version 3 release read from that ledger, per window.
type v3Reads struct {
	Usage            []ledger.UsageTotal     `json:"usage"`
	GPUs             []ledger.GPUTotal       `json:"gpus"`
	SeriesMinute     []ledger.UsagePoint     `json:"series_minute"`
	SeriesHour       []ledger.UsagePoint     `json:"series_hour"`
	ContainersMinute []ledger.ContainerUsage `json:"containers_minute"`
	ContainersHour   []ledger.ContainerUsage `json:"containers_hour"`
	Audit            v3Events                `json:"audit"`
}

// v3Events are audit events as reads.json holds them: version 3's ledger
// record had no JSON names, so each field is under its Go name.
type v3Events []audit.Event

// v3Event is audit.Event without its JSON names, to decode reads.json by
// the Go names; Count came after version 3 and reads as 0.
type v3Event struct {
	Time        time.Time
	Kind        string
	Rule        string
	FindingID   string
	Node        string
	ContainerID string
	Container   string
	Owner       string
	Evidence    map[string]float64
	DryRun      bool
	Outcome     string
	Attempts    int
	Error       string
	Caller      string
	Role        string
	Source      string
	Action      string
	Target      string
	Status      int
	Count       int64
}

// UnmarshalJSON decodes the events by their Go field names.
func (e *v3Events) UnmarshalJSON(b []byte) error {
	var raw []v3Event
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*e = nil
		return nil
	}
	*e = make(v3Events, len(raw))
	for i, r := range raw {
		(*e)[i] = audit.Event(r)
	}
	return nil
}

// v3Windows are the windows reads.json was taken over.
var v3Windows = map[string]ledger.Filter{
	"all":  {From: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 2, 0, 0, 0, time.UTC)},
	"edge": {From: time.Date(2026, 11, 2, 0, 47, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 1, 13, 0, 0, time.UTC), Node: "old-1"},
}

// UpgradeFromV3 checks a store opened on the version 3 ledger of V3Dir
// (the backend restores it and opens it, which migrates it): every read
// returns what version 3 returned from it, with held GPU-seconds unknown
// on every row (version 3 kept none). Then it writes held seconds into a
// minute that version 3 began and into a new hour, and checks that the
// row version 3 began stays unknown while the new one is known.
func UpgradeFromV3(t *testing.T, s ledger.Ledger) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(V3Dir, "reads.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]v3Reads
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("reads.json: %v", err)
	}
	ctx := context.Background()
	for _, name := range slices.Sorted(maps.Keys(v3Windows)) {
		got, err := readV3(ctx, s, v3Windows[name])
		if err != nil {
			t.Fatalf("window %s: %v", name, err)
		}
		w := want[name]
		if len(w.Usage) == 0 || len(w.SeriesMinute) == 0 || len(w.Audit) == 0 {
			t.Fatalf("window %s: reads.json holds no usage, series or audit events", name)
		}
		for i := range got.Usage {
			u := &got.Usage[i]
			if u.GPU.UUID == "" {
				continue // CPU only: no usage rows, nothing unknown
			}
			checkUnheld(t, fmt.Sprintf("window %s: Usage %s %s on %s", name, u.OwnerKind, u.OwnerID, u.GPU.UUID), u.Sums, u.Unheld)
			u.Unheld = ledger.Unheld{}
		}
		for _, ps := range [][]ledger.UsagePoint{got.SeriesMinute, got.SeriesHour} {
			for i := range ps {
				p := &ps[i]
				what := fmt.Sprintf("window %s: Series point %s %s %s on %s", name, p.Start.Format(time.RFC3339), p.OwnerKind, p.OwnerID, p.GPU.UUID)
				checkUnheld(t, what, p.Sums, p.Unheld)
				if p.Unheld.Rows != 1 {
					t.Errorf("%s: Unheld.Rows %d, want 1", what, p.Unheld.Rows)
				}
				p.Unheld = ledger.Unheld{}
			}
		}
		if d := gocmp.Diff(w, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("window %s: reads after the upgrade differ from version 3's (-v3 +now):\n%s", name, d)
		}
	}
	unheldByOwner(t, s, v3Windows["all"])
	heldAfterV3(t, s, want["all"])
	UpgradedJobs(t, s)
}

// checkUnheld checks that a sum read from version 3's rows has its held
// seconds unknown: none summed, and all of its used time left out.
func checkUnheld(t *testing.T, what string, s ledger.Sums, u ledger.Unheld) {
	t.Helper()
	if s.HeldSeconds != 0 || !u.All || u.Rows < 1 || u.UsedSeconds != s.UsedSeconds {
		t.Errorf("%s: HeldSeconds %v, Unheld %+v; want held unknown: 0, All, Rows ≥ 1, UsedSeconds %v", what, s.HeldSeconds, u, s.UsedSeconds)
	}
}

// heldAfterV3 writes held seconds after the upgrade: into a minute (and
// so an hour) that version 3 began, whose rows must stay unknown, since
// their held time would cover only part of their used time, and into an
// hour of its own, whose rows must be known. A window over both counts
// the held seconds of the new rows and the used time of the old ones.
func heldAfterV3(t *testing.T, s ledger.Ledger, v3 v3Reads) {
	t.Helper()
	ctx := context.Background()
	var old ledger.UsagePoint // a container's minute, from version 3
	for _, p := range v3.SeriesMinute {
		if p.OwnerKind == ledger.KindContainer && p.UsedSeconds > 0 {
			old = p
			break
		}
	}
	if old.Start.IsZero() {
		t.Fatal("reads.json: no container minute with used time")
	}
	var oldTotal ledger.UsageTotal
	oldHours := 0
	for _, u := range v3.Usage {
		if u.OwnerKind == old.OwnerKind && u.OwnerID == old.OwnerID && u.GPU.UUID == old.GPU.UUID {
			oldTotal = u
		}
	}
	for _, p := range v3.SeriesHour {
		if p.OwnerKind == old.OwnerKind && p.OwnerID == old.OwnerID && p.GPU.UUID == old.GPU.UUID {
			oldHours++
		}
	}
	later := v3Windows["all"].To.Add(time.Hour) // an hour version 3 never wrote
	row := func(start time.Time, sums ledger.Sums) ledger.Usage {
		return ledger.Usage{Node: old.Node, Start: start, OwnerKind: old.OwnerKind, OwnerID: old.OwnerID, GPU: old.GPU.UUID, Sums: sums}
	}
	added := ledger.Sums{AllocatedSeconds: 0.5, HeldSeconds: 1, PresentSeconds: 1, UsedSeconds: 0.25}
	fresh := ledger.Sums{AllocatedSeconds: 30, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 15}
	if err := s.Write(ctx, ledger.Batch{Usage: []ledger.Usage{row(old.Start, added), row(later, fresh)}}); err != nil {
		t.Fatal(err)
	}
	mine := func(kind, owner, gpu string) bool {
		return kind == old.OwnerKind && owner == old.OwnerID && gpu == old.GPU.UUID
	}
	point := func(f ledger.Filter, step time.Duration) ledger.UsagePoint {
		t.Helper()
		ps, err := s.Series(ctx, f, step)
		if err != nil {
			t.Fatal(err)
		}
		var found []ledger.UsagePoint
		for _, p := range ps {
			if mine(p.OwnerKind, p.OwnerID, p.GPU.UUID) {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			t.Fatalf("Series(%v–%v, %v): %d points of %s on %s, want 1", f.From, f.To, step, len(found), old.OwnerID, old.GPU.UUID)
		}
		return found[0]
	}
	total := func(f ledger.Filter) ledger.UsageTotal {
		t.Helper()
		us, err := s.Usage(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range us {
			if mine(u.OwnerKind, u.OwnerID, u.GPU.UUID) {
				return u
			}
		}
		t.Fatalf("Usage(%v–%v): no row of %s on %s", f.From, f.To, old.OwnerID, old.GPU.UUID)
		return ledger.UsageTotal{}
	}

	// The minute and the hour version 3 began stay unknown, their used
	// time grown by what was added.
	used := old.UsedSeconds + added.UsedSeconds
	minute := point(ledger.Filter{From: old.Start, To: old.Start.Add(time.Minute)}, time.Minute)
	if minute.UsedSeconds != used || minute.HeldSeconds != 0 || minute.Unheld != (ledger.Unheld{Rows: 1, All: true, UsedSeconds: used}) {
		t.Errorf("the minute version 3 began, added to: used %v, held %v, %+v; want used %v, held unknown", minute.UsedSeconds, minute.HeldSeconds, minute.Unheld, used)
	}
	hour := point(ledger.Filter{From: ledger.Hour(old.Start), To: ledger.Hour(old.Start).Add(time.Hour)}, time.Hour)
	if hour.HeldSeconds != 0 || !hour.Unheld.All || hour.Unheld.UsedSeconds != hour.UsedSeconds {
		t.Errorf("the hour version 3 began, added to: held %v, %+v; want held unknown", hour.HeldSeconds, hour.Unheld)
	}
	// The new hour is known, from its minute and its hour row.
	for _, f := range []ledger.Filter{{From: later, To: later.Add(time.Minute)}, {From: later, To: later.Add(time.Hour)}} {
		if got := total(f); got.HeldSeconds != fresh.HeldSeconds || got.UsedSeconds != fresh.UsedSeconds || got.Unheld != (ledger.Unheld{}) {
			t.Errorf("Usage(%v–%v) of the new rows: held %v, used %v, %+v; want held %v, used %v, all known", f.From, f.To, got.HeldSeconds, got.UsedSeconds, got.Unheld, fresh.HeldSeconds, fresh.UsedSeconds)
		}
	}
	// Over both: held from the new rows, and the used time that has no
	// held figure from the old.
	all := total(ledger.Filter{From: v3Windows["all"].From, To: later.Add(time.Hour)})
	wantUnheld := ledger.Unheld{Rows: oldHours, UsedSeconds: oldTotal.UsedSeconds + added.UsedSeconds}
	if all.HeldSeconds != fresh.HeldSeconds || all.Unheld != wantUnheld || all.UsedSeconds != oldTotal.UsedSeconds+added.UsedSeconds+fresh.UsedSeconds {
		t.Errorf("Usage over old and new rows: held %v, used %v, %+v; want held %v, used %v, %+v",
			all.HeldSeconds, all.UsedSeconds, all.Unheld, fresh.HeldSeconds, oldTotal.UsedSeconds+added.UsedSeconds+fresh.UsedSeconds, wantUnheld)
	}
}

func readV3(ctx context.Context, s ledger.Ledger, f ledger.Filter) (r v3Reads, err error) {
	if r.Usage, err = s.Usage(ctx, f); err != nil {
		return r, err
	}
	if r.GPUs, err = s.GPUs(ctx, f); err != nil {
		return r, err
	}
	if r.SeriesMinute, err = s.Series(ctx, f, time.Minute); err != nil {
		return r, err
	}
	if r.SeriesHour, err = s.Series(ctx, f, time.Hour); err != nil {
		return r, err
	}
	if r.ContainersMinute, err = s.ContainerSeries(ctx, f, time.Minute); err != nil {
		return r, err
	}
	if r.ContainersHour, err = s.ContainerSeries(ctx, f, time.Hour); err != nil {
		return r, err
	}
	events, err := s.AuditEvents(ctx, audit.Filter{From: f.From, To: f.To, Node: f.Node})
	r.Audit = v3Events(events)
	return r, err
}
