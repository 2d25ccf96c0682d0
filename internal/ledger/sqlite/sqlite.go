// Package sqlite is the embedded ledger: one SQLite file under the data
// directory, in WAL mode, through the pure-Go modernc.org/sqlite.
//
// Durability: every batch is one transaction and the file runs with
// synchronous=FULL. WAL with synchronous=NORMAL would already survive
// kill -9 without corruption or loss (a commit is in the WAL, in the
// kernel's page cache, before Write returns); FULL adds an fsync of the WAL
// at each commit so that a power cut or kernel crash also loses nothing
// that Write reported as written. The agent commits once every few
// seconds, so that fsync costs nothing that matters.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
	"github.com/gpumeter/gpumeter/internal/retry"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// busyTimeout is how long a statement waits for another process (a report,
// a second agent by mistake) that holds the write lock.
const busyTimeout = 10 * time.Second

// readConns bounds the connections reports read through.
const readConns = 4

// Store is a ledger in one SQLite file. Its methods are safe for
// concurrent use; writes are serialised.
type Store struct {
	sqlledger.Ledger // Write, Audit and the reads

	path string
	wdb  *sql.DB // one connection: writes queue on wsem
	rdb  *sql.DB // query_only connections for reports
	wsem chan struct{}
	// stmts are the batch writer's statements, prepared by the first
	// batch: a process that only reads (a report) never parses them.
	smu   sync.Mutex
	stmts *stmts // guarded by smu
	ids   ids    // guarded by wsem
	// compactor says when a batch's node has minutes to compact.
	compactor sqlledger.Compactor
	// sole is the last batch's rows when they are all that the minute
	// tables hold (written into emptied tables, by the ledger's one
	// writer); guarded by wsem.
	sole  *sqlledger.Rows
	wlock *writerLock // held from Acquire to Release or Close; guarded by wsem
}

// Store implements every capability of the ledger.
var _ ledger.Ledger = (*Store)(nil)

// Open opens the ledger at path, creating it if missing and migrating it to
// the schema this binary knows. A file that is not an SQLite database, or
// an SQLite database with tables but no gpumeter marker, gives an error
// wrapping ledger.ErrNotLedger; a ledger written by a newer gpumeter, one
// wrapping ledger.ErrSchemaTooNew.
func Open(ctx context.Context, path string) (*Store, error) {
	s, err := open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	return s, nil
}

func open(ctx context.Context, path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, errors.New("is a directory")
	}
	bt := strconv.FormatInt(busyTimeout.Milliseconds(), 10)
	s := &Store{path: path, wsem: make(chan struct{}, 1), ids: newIDs()}
	s.Ledger = sqlledger.NewLedger(sqlledger.Backend{Name: path, Read: s.read, WriteRows: s.writeRows, InsertAudit: s.insertAudit, WriteTx: s.jobTx,
		Now: hostNow, UniqueViolation: uniqueViolation})
	// BEGIN IMMEDIATE takes the write lock up front, so a transaction never
	// fails to upgrade from reading to writing under another process.
	s.wdb, err = sql.Open("sqlite", dsn(abs, "_txlock=immediate&_pragma=busy_timeout("+bt+")&_pragma=synchronous(FULL)"))
	if err != nil {
		return nil, err
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxIdleTime(0)
	s.wdb.SetConnMaxLifetime(0)
	s.rdb, err = sql.Open("sqlite", dsn(abs, "_pragma=busy_timeout("+bt+")&_pragma=query_only(1)"))
	if err != nil {
		s.wdb.Close()
		return nil, err
	}
	s.rdb.SetMaxOpenConns(readConns)
	s.rdb.SetMaxIdleConns(readConns)
	if err := s.init(ctx); err != nil {
		s.rdb.Close()
		s.wdb.Close()
		return nil, err
	}
	return s, nil
}

// dsn makes a URI that keeps any character of the path literal.
func dsn(abs, params string) string {
	return "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + params
}

// init migrates the schema in one transaction; a second process opening
// the same new file waits for the first and then finds nothing to do. A
// file that turns out not to be a ledger is left as it was.
func (s *Store) init(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	// Look before switching the journal mode, which writes to the file,
	// through a reader: a ledger that needs nothing (every open but the
	// first of a new binary) is done without the write lock.
	pending, wal, err := s.check(ctx, ms)
	if err != nil {
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_NOTADB {
			return fmt.Errorf("%w: not an SQLite database (%v)", ledger.ErrNotLedger, err)
		}
		return err
	}
	if len(pending) == 0 && wal {
		return nil
	}
	if err := s.setWAL(ctx); err != nil {
		return fmt.Errorf("set WAL mode: %w", err)
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	schema, err := readSchema(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if pending, err = sqlledger.Pending(ms, schema); err != nil {
		return err
	}
	if len(pending) == 0 {
		return nil
	}
	exec := func(ctx context.Context, stmt string, args ...any) error {
		_, err := tx.ExecContext(ctx, stmt, args...)
		return err
	}
	if err := sqlledger.Apply(ctx, exec, pending, len(ms)); err != nil {
		return err
	}
	if err := sqlledger.Migrated(ctx, writeQuerier{querier{tx}}, pending); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return tx.Commit()
}

// setWAL switches the file to WAL. Switching needs the file to itself,
// and SQLite answers SQLITE_BUSY at once, without waiting, while another
// connection switches it too (two processes opening a new ledger), so
// setWAL waits and tries again for up to busyTimeout.
func (s *Store) setWAL(ctx context.Context) error {
	deadline := time.Now().Add(busyTimeout)
	every := retry.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	_, err := retry.Do(ctx, 0, every, func() error {
		var mode string
		err := s.wdb.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil {
			if !strings.EqualFold(mode, "wal") {
				return retry.Permanent(fmt.Errorf("journal mode is %q", mode))
			}
			return nil
		}
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return retry.Permanent(err)
		}
		return err
	})
	return err
}

// check reads the schema and the journal mode through a reader, and fails
// if the file is not a ledger this binary can use; it returns the
// migrations the file needs and whether it is in WAL mode already.
func (s *Store) check(ctx context.Context, ms []sqlledger.Migration) (pending []sqlledger.Migration, wal bool, err error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	schema, err := readSchema(ctx, tx)
	if err != nil {
		return nil, false, err
	}
	if pending, err = sqlledger.Pending(ms, schema); err != nil {
		return nil, false, err
	}
	var mode string
	if err := tx.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, false, err
	}
	return pending, strings.EqualFold(mode, "wal"), nil
}

func migrations() ([]sqlledger.Migration, error) {
	return sqlledger.LoadMigrations(migrationFiles, "migrations")
}

// SchemaVersion is the schema version this binary writes.
func SchemaVersion() int {
	ms, _ := migrations() // none on an error
	return len(ms)
}

// tablesSQL lists the tables of the file, SQLite's own left out.
const tablesSQL = `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`

func readSchema(ctx context.Context, tx *sql.Tx) (sqlledger.Schema, error) {
	return sqlledger.ReadSchema(ctx, querier{tx}, tablesSQL)
}

// Close closes the ledger.
func (s *Store) Close() error {
	var errs []error
	s.smu.Lock()
	if s.stmts != nil {
		s.stmts.close()
	}
	s.smu.Unlock()
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	errs = append(errs, s.wdb.Close())
	errs = append(errs, s.releaseWriterLock())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close ledger %s: %w", s.path, err)
	}
	return nil
}

// lock takes the write side; unlock with <-s.wsem.
func (s *Store) lock(ctx context.Context) error {
	select {
	case s.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeTx runs fn in a transaction on the write connection, holding the
// write side throughout. fn commits; a transaction it leaves open is
// rolled back.
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer func() { <-s.wsem }()
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return s.full(err)
	}
	defer tx.Rollback()
	return s.full(fn(tx))
}

// hostNow is the store's clock: the host's, which every writer of the
// file shares, as the node leases judge by it.
func hostNow(context.Context, sqlledger.Querier) (time.Time, error) {
	return time.Now().UTC().Truncate(time.Microsecond), nil
}

// uniqueViolation reports whether err is SQLite's refusal of a row that
// a unique index or primary key holds already.
func uniqueViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

// full marks err with ledger.ErrFull when SQLite could not write for want
// of room (SQLITE_FULL, which it gives for ENOSPC too), naming the
// directory that is full, so that callers can say so instead of a
// generic failure.
func (s *Store) full(err error) error {
	var se *sqlite.Error
	if err != nil && (errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL || errors.Is(err, syscall.ENOSPC)) {
		dir := filepath.Dir(s.path)
		if abs, aerr := filepath.Abs(dir); aerr == nil {
			dir = abs
		}
		return fmt.Errorf("%w: no room left in %s, the ledger's directory: %w", ledger.ErrFull, dir, err)
	}
	return err
}

// Retain deletes old minute and hour rows.
func (s *Store) Retain(ctx context.Context, node string, now time.Time, minutes, hours time.Duration) error {
	if err := s.retain(ctx, node, now, minutes, hours); err != nil {
		return fmt.Errorf("retain ledger %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) retain(ctx context.Context, node string, now time.Time, minutes, hours time.Duration) error {
	mCut, mOK, hCut, hOK := sqlledger.RetainCutoffs(now, minutes, hours)
	if !mOK && !hOK {
		return nil
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		s.sole = nil
		for _, d := range sqlledger.RetainDeletes(node, mCut, mOK, hCut, hOK) {
			if _, err := tx.ExecContext(ctx, d.SQL, d.Args...); err != nil {
				return err
			}
		}
		raise := func(key string, to int64) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO `+sqlledger.MetaTable+` (key, value) VALUES ($1, $2)
				ON CONFLICT (key) DO UPDATE SET value = CAST(max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT)`,
				key, strconv.FormatInt(to, 10))
			return err
		}
		if mOK {
			if err := raise(sqlledger.MetaHorizon, mCut); err != nil {
				return err
			}
		}
		if hOK {
			if err := raise(sqlledger.MetaDays, sqlledger.RetainDayHorizon(hCut)); err != nil {
				return err
			}
		}
		return tx.Commit()
	})
}

// read runs fn in one read transaction: one snapshot of the WAL.
func (s *Store) read(ctx context.Context, fn func(sqlledger.Querier) error) error {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(querier{tx})
}

type querier struct{ tx *sql.Tx }

func (q querier) Query(ctx context.Context, query string, args ...any) (sqlledger.Cursor, error) {
	rows, err := q.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return cursor{rows}, nil
}

type cursor struct{ rows *sql.Rows }

func (c cursor) Next() bool             { return c.rows.Next() }
func (c cursor) Scan(dest ...any) error { return c.rows.Scan(dest...) }
func (c cursor) Err() error             { return c.rows.Err() }
func (c cursor) Close()                 { c.rows.Close() }
