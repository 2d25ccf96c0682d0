// Package backend opens the ledger a configuration names: PostgreSQL when
// there is a DSN, else the SQLite file.
package backend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/postgres"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
)

// Open opens the PostgreSQL ledger at dsn, or when dsn is empty the SQLite
// ledger at path. create says whether a missing SQLite file may be
// created (the agent and simulate write; report only reads, and a missing
// file there is a mistake worth naming). A writer's SQLite file passes
// sqlite.QuickCheck first: nothing writes on a damaged ledger. Either
// backend keeps every record, so the one interface serves all callers.
func Open(ctx context.Context, dsn, path string, create bool) (ledger.Ledger, error) {
	if dsn != "" {
		return postgres.Open(ctx, dsn)
	}
	if path == "" {
		return nil, fmt.Errorf("no ledger: give --db FILE or --dsn DSN")
	}
	if !create {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("ledger %s: %w (run `gpumeter serve` or `gpumeter simulate` to write one, or give --db/--dsn)", path, err)
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("ledger directory: %w", err)
	} else if err := sqlite.QuickCheck(ctx, path); err != nil {
		return nil, err
	}
	return sqlite.Open(ctx, path)
}
