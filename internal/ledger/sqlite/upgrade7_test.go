package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger/ledgertest"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

// TestUpgradeFromVersion7 opens a version 7 ledger holding a queued job:
// the job survives the migration without a placement, can be given one,
// and budgets can be lifted.
func TestUpgradeFromVersion7(t *testing.T) {
	path := ledgerAt(t, 7, "UPDATE job_sequence SET last = 1", fmt.Sprintf(ledgertest.Schema7Job, "0"))
	ledgertest.AfterSchema7(t, open(t, path))
	checkSchemaVersion(t, path)
}

// ledgerAt writes a ledger at schema version, as that release left it:
// its migrations, its meta rows, then rows, the SQL of what it held.
func ledgerAt(t *testing.T, version int, rows ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
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
	rawExec(t, path, append(stmts, rows...)...)
	return path
}

// checkSchemaVersion checks that the ledger at path is at this release's
// schema version.
func checkSchemaVersion(t *testing.T, path string) {
	t.Helper()
	var v string
	if err := rawDB(t, path).QueryRow("SELECT value FROM gpumeter_meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != strconv.Itoa(sqlite.SchemaVersion()) {
		t.Errorf("schema_version after the upgrade = %q (%v), want %d", v, err, sqlite.SchemaVersion())
	}
}
