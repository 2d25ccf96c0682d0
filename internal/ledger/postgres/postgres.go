// Package postgres is the fleet ledger: one PostgreSQL database that the
// agents of many nodes write at once, through pgx.
//
// Each batch is one transaction of set-based upserts that add to what is
// stored (x = t.x + EXCLUDED.x), so concurrent writers never lose or
// double-count. Rows are written in key order, which gives every writer
// the same lock order; a deadlock or serialization failure that happens
// anyway is retried a few times. The ledger lives in the first schema of
// the connection's search_path; give it a schema of its own (DSN option
// search_path) to share a database with other tables.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
	"github.com/gpumeter/gpumeter/internal/retry"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// connectTimeout applies when the DSN sets none (connect_timeout).
const connectTimeout = 5 * time.Second

// gpuLock is the first key of the pg_advisory_xact_lock pairs that lock
// one GPU of one node (the second is a hash of the two) while a
// transaction gives it out: "gpml".
const gpuLock int32 = 0x67706d6c

// migrateLock is the pg_advisory_xact_lock key that serialises migrations
// of agents opening one database at once.
const migrateLock int64 = 0x67706d6c65646772 // "gpmledgr"

// Store is a ledger in a PostgreSQL database. Its methods are safe for
// concurrent use.
type Store struct {
	sqlledger.Ledger // Write, Audit and the reads

	pool  *pgxpool.Pool
	where string // host:port/database, for messages
	// compactor says when a batch's node has minutes to compact.
	compactor sqlledger.Compactor
}

// Store implements every capability of the ledger.
var _ ledger.Ledger = (*Store)(nil)

// Open connects to the database at dsn and migrates it to the schema this
// binary knows. A server that cannot be reached fails within the connect
// timeout (5s unless the DSN sets one). A database with tables but no
// gpumeter marker gives an error wrapping ledger.ErrNotLedger; a ledger
// written by a newer gpumeter, one wrapping ledger.ErrSchemaTooNew.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	s := &Store{where: where(cfg.ConnConfig)}
	s.Ledger = sqlledger.NewLedger(sqlledger.Backend{Name: "postgres " + s.where,
		Read: func(ctx context.Context, fn func(sqlledger.Querier) error) error { return unavailable(s.read(ctx, fn)) },
		WriteRows: func(ctx context.Context, b *ledger.Batch, rows *sqlledger.Rows) error {
			return unavailable(s.writeRows(ctx, b, rows))
		},
		InsertAudit:     func(ctx context.Context, args [][]any) error { return unavailable(s.insertAudit(ctx, args)) },
		WriteTx:         func(ctx context.Context, fn func(sqlledger.Tx) error) error { return unavailable(s.jobTx(ctx, fn)) },
		Now:             serverNow,
		RowLocks:        true,
		Notify:          notify,
		UniqueViolation: uniqueViolation,
		LockGPUs:        lockGPUs,
		GroupSubmits:    true,
	})
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("open ledger postgres %s: %w", s.where, err)
	}
	if err := s.pool.Ping(ctx); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("open ledger postgres %s: %w", s.where, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("open ledger postgres %s: %w", s.where, err)
	}
	return s, nil
}

func where(c *pgx.ConnConfig) string {
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))) + "/" + c.Database
}

func migrations() ([]sqlledger.Migration, error) {
	return sqlledger.LoadMigrations(migrationFiles, "migrations")
}

// SchemaVersion is the schema version this binary writes.
func SchemaVersion() int {
	ms, _ := migrations() // none on an error
	return len(ms)
}

// migrate applies pending migrations in one transaction under an advisory
// lock: agents that open a new database together take turns, and all but
// the first find nothing to do.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
			return err
		}
		schema, err := readSchema(ctx, tx)
		if err != nil {
			return err
		}
		pending, err := sqlledger.Pending(ms, schema)
		if err != nil || len(pending) == 0 {
			return err
		}
		exec := func(ctx context.Context, stmt string, args ...any) error {
			_, err := tx.Exec(ctx, stmt, args...)
			return err
		}
		if err := sqlledger.Apply(ctx, exec, pending, len(ms)); err != nil {
			return err
		}
		return sqlledger.Migrated(ctx, writeQuerier{querier{tx}}, pending)
	})
}

// tablesSQL lists the tables of the connection's schema.
const tablesSQL = `SELECT table_name FROM information_schema.tables
	WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`

func readSchema(ctx context.Context, tx pgx.Tx) (sqlledger.Schema, error) {
	return sqlledger.ReadSchema(ctx, querier{tx}, tablesSQL)
}

// Close closes the connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Retain deletes old minute and hour rows of node ("" for every node).
func (s *Store) Retain(ctx context.Context, node string, now time.Time, minutes, hours time.Duration) error {
	mCut, mOK, hCut, hOK := sqlledger.RetainCutoffs(now, minutes, hours)
	if !mOK && !hOK {
		return nil
	}
	err := s.retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, d := range sqlledger.RetainDeletes(node, mCut, mOK, hCut, hOK) {
				if _, err := tx.Exec(ctx, d.SQL, d.Args...); err != nil {
					return err
				}
			}
			raise := func(key string, to int64) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+sqlledger.MetaTable+` AS t (key, value) VALUES ($1, $2)
					ON CONFLICT (key) DO UPDATE SET value = GREATEST(t.value::bigint, EXCLUDED.value::bigint)::text`,
					key, strconv.FormatInt(to, 10))
				return err
			}
			if mOK {
				if err := raise(sqlledger.MetaHorizon, mCut); err != nil {
					return err
				}
			}
			if hOK {
				return raise(sqlledger.MetaDays, sqlledger.RetainDayHorizon(hCut))
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("retain ledger postgres %s: %w", s.where, err)
	}
	return nil
}

// read runs fn in one read-only REPEATABLE READ snapshot: under
// PostgreSQL's default READ COMMITTED each statement would see the
// batches committed by then, and the rows and totals of one report
// (Totals) would disagree.
func (s *Store) read(ctx context.Context, fn func(sqlledger.Querier) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	return fn(querier{tx})
}

type querier struct{ tx pgx.Tx }

func (q querier) Query(ctx context.Context, sql string, args ...any) (sqlledger.Cursor, error) {
	return q.tx.Query(ctx, sql, args...)
}

// maxAttempts bounds how often a transaction is tried when PostgreSQL
// aborts it for a deadlock or a serialization failure.
const maxAttempts = 5

// retry runs fn again after a deadlock or serialization failure, waiting a
// little longer, with jitter, each time.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	_, err := retry.Do(ctx, maxAttempts, retry.Backoff{Initial: 10 * time.Millisecond, Linear: true, Jitter: true}, func() error {
		err := fn()
		if err != nil && !retryable(err) {
			return retry.Permanent(err)
		}
		return err
	})
	return err
}

// unavailable wraps err with ledger.ErrUnavailable when it says the
// server could not be reached or went away: a connection refused, reset
// or closed, a connect that failed or timed out, a server shutting down
// or refusing connections (SQLSTATE class 08, 57P01-57P03).
func unavailable(err error) error {
	if err == nil || errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, context.Canceled) {
		return err
	}
	var (
		ce *pgconn.ConnectError
		pe *pgconn.PgError
		ne net.Error
	)
	down := errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "conn closed")
	if errors.As(err, &pe) {
		down = strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	if !down {
		return err
	}
	return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
}

// uniqueViolation reports whether err is PostgreSQL's unique_violation.
func uniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40001", // serialization_failure
		"40P01": // deadlock_detected
		return true
	}
	return false
}
