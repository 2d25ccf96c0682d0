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

// TestUpgradeFromVersion7 opens a version 7 ledger holding a queued job:
// the job survives the migration without a placement, can be given one,
// and budgets can be lifted.
func TestUpgradeFromVersion7(t *testing.T) {
	dsn := ledgerAt(t, 7, "UPDATE job_sequence SET last = 1", fmt.Sprintf(ledgertest.Schema7Job, "false"))
	ledgertest.AfterSchema7(t, open(t, dsn))
	checkSchemaVersion(t, dsn)
}

// ledgerAt writes a ledger at schema version into a new database, as that
// release left it: its migrations, its meta rows, then rows, the SQL of
// what it held. It returns the database's DSN.
func ledgerAt(t *testing.T, version int, rows ...string) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	var stmts []string
	for v := 1; v <= version; v++ {
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
	stmts = append(stmts, fmt.Sprintf("INSERT INTO gpumeter_meta VALUES ('magic', 'gpumeter ledger'), ('schema_version', '%d')", version))
	rawExec(t, dsn, append(stmts, rows...)...)
	return dsn
}

// checkSchemaVersion checks that the ledger at dsn is at this release's
// schema version.
func checkSchemaVersion(t *testing.T, dsn string) {
	t.Helper()
	if n := rawCount(t, dsn, "gpumeter_meta WHERE key = 'schema_version' AND value = '"+strconv.Itoa(postgres.SchemaVersion())+"'"); n != 1 {
		t.Errorf("schema_version is not %d after the upgrade", postgres.SchemaVersion())
	}
}
