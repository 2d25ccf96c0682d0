package postgres_test

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
)

// TestUpgradeFromVersion11 opens a version 11 ledger holding running
// jobs: the migration gives them their allocations.
func TestUpgradeFromVersion11(t *testing.T) {
	dsn := ledgerAt(t, 11, ledgertest.Schema11Jobs("FALSE")...)
	ledgertest.AfterSchema11(t, open(t, dsn))
	checkSchemaVersion(t, dsn)
}
