package postgres_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
)

// TestUpgradeFromVersion8 opens a version 8 ledger holding a GPU's minute
// and hour rows: they read as before, give no GPU series points, and take
// readings written afterwards.
func TestUpgradeFromVersion8(t *testing.T) {
	dsn := pgtest.DSN(t)
	var stmts []string
	for v := 1; v <= 8; v++ {
		names, err := filepath.Glob(filepath.Join("migrations", fmt.Sprintf("%04d_*.sql", v)))
		if err != nil || len(names) != 1 {
			t.Fatalf("migration %d: %v %v", v, names, err)
		}
		b, err := os.ReadFile(names[0])
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(b))
	}
	stmts = append(stmts,
		"INSERT INTO gpumeter_meta VALUES ('magic', 'gpumeter ledger'), ('schema_version', '8')")
	stmts = append(stmts, ledgertest.Schema8GPU...)
	rawExec(t, dsn, stmts...)

	ledgertest.AfterSchema8(t, open(t, dsn))
	if n := rawCount(t, dsn, "gpumeter_meta WHERE key = 'schema_version' AND value = '"+strconv.Itoa(postgres.SchemaVersion())+"'"); n != 1 {
		t.Errorf("schema_version is not %d after the upgrade", postgres.SchemaVersion())
	}
}
