package postgres_test

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
)

// TestUpgradeFromVersion8 opens a version 8 ledger holding a GPU's minute
// and hour rows: they read as before, give no GPU series points, and take
// readings written afterwards.
func TestUpgradeFromVersion8(t *testing.T) {
	dsn := ledgerAt(t, 8, ledgertest.Schema8GPU...)
	ledgertest.AfterSchema8(t, open(t, dsn))
	checkSchemaVersion(t, dsn)
}
