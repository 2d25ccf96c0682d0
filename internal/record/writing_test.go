package record_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gpumeter/gpumeter/internal/record"
)

// TestPendingCountsRowsBeingWritten: the rows of a batch that the store
// has not taken yet are pending, however long the write takes, so that
// gpumeter_ledger_pending_rows shows the backlog while a write hangs on a
// locked or unreachable ledger, not only the rows that arrived since.
func TestPendingCountsRowsBeingWritten(t *testing.T) {
	store := &flakyStore{Store: openStore(t), fail: 1}
	rec := record.New(record.Config{Store: store, Node: node})
	r := newRig()
	r.ctrs[0].MemoryBytes = gib
	rec.Add(r.step(at(0), 50, gib))
	rec.Add(r.step(at(1), 50, gib)) // one minute: usage, GPU and container rows

	var during []int
	store.during = func() {
		during = append(during, rec.Status().PendingRows)
		rec.Add(r.step(at(61), 50, gib)) // books minutes 0 and 1: six rows
		during = append(during, rec.Status().PendingRows)
	}
	if err := rec.Flush(context.Background()); !errors.Is(err, errDiskFull) {
		t.Fatalf("Flush() = %v, want %v", err, errDiskFull)
	}
	if len(during) != 2 || during[0] != 3 || during[1] != 3+6 {
		t.Errorf("rows pending during the write = %v, want [3 9]: the batch being written and what arrived meanwhile", during)
	}
	// The failed batch waits to be sent again as it was, beside the
	// newer rows: nothing is merged into it.
	if got := rec.Status().PendingRows; got != 9 {
		t.Errorf("rows pending after the failed write = %d, want 9", got)
	}
	flush(t, rec)
	if got := rec.Status().PendingRows; got != 0 {
		t.Errorf("rows pending after a good write = %d, want 0", got)
	}
}
