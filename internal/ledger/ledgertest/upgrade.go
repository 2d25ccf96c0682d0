package ledgertest

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

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
	Audit            []ledger.AuditEvent     `json:"audit"`
}

// v3Windows are the windows reads.json was taken over.
var v3Windows = map[string]ledger.Filter{
	"all":  {From: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 2, 0, 0, 0, time.UTC)},
	"edge": {From: time.Date(2026, 11, 2, 0, 47, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 1, 13, 0, 0, time.UTC), Node: "old-1"},
}

// UpgradeFromV3 checks a store opened on the version 3 ledger of V3Dir
// (the backend restores it and opens it, which migrates it): every read
// returns what version 3 returned from it.
func UpgradeFromV3(t *testing.T, s ledger.Store) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(V3Dir, "reads.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]v3Reads
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("reads.json: %v", err)
	}
	as, ok := s.(ledger.AuditStore)
	if !ok {
		t.Fatalf("%T does not keep audit events", s)
	}
	ctx := context.Background()
	for _, name := range slices.Sorted(maps.Keys(v3Windows)) {
		got, err := readV3(ctx, s, as, v3Windows[name])
		if err != nil {
			t.Fatalf("window %s: %v", name, err)
		}
		w := want[name]
		if len(w.Usage) == 0 || len(w.SeriesMinute) == 0 || len(w.Audit) == 0 {
			t.Fatalf("window %s: reads.json holds no usage, series or audit events", name)
		}
		if d := gocmp.Diff(w, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("window %s: reads after the upgrade differ from version 3's (-v3 +now):\n%s", name, d)
		}
	}
}

func readV3(ctx context.Context, s ledger.Store, as ledger.AuditStore, f ledger.Filter) (r v3Reads, err error) {
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
	r.Audit, err = as.AuditEvents(ctx, f)
	return r, err
}
