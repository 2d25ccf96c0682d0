package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
)

// Check reads the schema version, the database's size, the nodes, the
// reach of the rows and the leases of the ledger at dsn in one read-only
// snapshot, without migrating it. PostgreSQL checks its own pages;
// pg_amcheck goes deeper.
func Check(ctx context.Context, dsn string) (ledger.Health, error) {
	h := ledger.Health{Backend: "PostgreSQL"}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return h, fmt.Errorf("check ledger: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	h.Where = where(cfg)
	if err := check(ctx, cfg, &h); err != nil {
		return h, fmt.Errorf("check ledger postgres %s: %w", h.Where, err)
	}
	return h, nil
}

func check(ctx context.Context, cfg *pgx.ConnConfig, h *ledger.Health) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	schema, err := readSchema(ctx, tx)
	if err != nil {
		return err
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := sqlledger.Pending(ms, schema); err != nil {
		return err
	}
	if !schema.HasMeta {
		return fmt.Errorf("%w: it holds no gpumeter tables", ledger.ErrNotLedger)
	}
	if h.SchemaVersion, err = strconv.Atoi(schema.Version); err != nil {
		return fmt.Errorf("schema version %q: %w", schema.Version, err)
	}
	if err := tx.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&h.SizeBytes); err != nil {
		return err
	}
	return sqlledger.Check(ctx, querier{tx}, h)
}
