// Package monthfill writes the console tests' 30-day ledger. It is run by
// test/e2e/console's monthLedger, in a go test of its own built without
// the race detector: under the detector the fill took over a minute and a
// half on a quiet machine and seven minutes on a busy one, for a fixture
// whose code is not what those tests test. Run alone, it skips.
package monthfill

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/sim"
)

// TestFillMonth writes to $GPUMETER_MONTH_FILL a SQLite ledger of
// ledgertest.Fill30DaysToAs up to $GPUMETER_MONTH_TO (RFC 3339), with the
// GPUs the simulator gives the month's node.
func TestFillMonth(t *testing.T) {
	path := os.Getenv("GPUMETER_MONTH_FILL")
	if path == "" {
		t.Skip("run by test/e2e/console, which sets GPUMETER_MONTH_FILL")
	}
	to, err := time.Parse(time.RFC3339, os.Getenv("GPUMETER_MONTH_TO"))
	if err != nil {
		t.Fatalf("GPUMETER_MONTH_TO: %v", err)
	}
	store, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	node := ledgertest.Plan30Days().Node
	uuids := make([]string, len(ledgertest.Plan30Days().GPUs))
	for i := range uuids {
		uuids[i] = sim.GPUUUID(node, i)
	}
	began := time.Now()
	m := ledgertest.Fill30DaysToAs(t, store, to, uuids)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled the 30-day ledger (%s to %s) in %v", m.From.Format(time.RFC3339), m.To.Format(time.RFC3339), time.Since(began).Round(time.Millisecond))
}
