package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlledger"
)

// readOnly opens the ledger file at path for reading only, without
// migrating it, so that a check or a backup before an upgrade sees the
// ledger as the old release left it. It fails on a file that is missing
// or not a ledger.
func readOnly(ctx context.Context, path string) (*sql.DB, sqlledger.Schema, error) {
	var schema sqlledger.Schema
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, schema, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, schema, err
	}
	db, err := sql.Open("sqlite", dsn(abs, "mode=ro&_pragma=busy_timeout("+strconv.FormatInt(busyTimeout.Milliseconds(), 10)+")"))
	if err != nil {
		return nil, schema, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err == nil {
		schema, err = readSchema(ctx, tx)
		tx.Rollback()
	}
	if err == nil {
		var ms []sqlledger.Migration
		if ms, err = migrations(); err == nil {
			_, err = sqlledger.Pending(ms, schema)
		}
		if err == nil && !schema.HasMeta {
			err = fmt.Errorf("%w: it holds no gpumeter tables", ledger.ErrNotLedger)
		}
	}
	if err != nil {
		db.Close()
		return nil, schema, err
	}
	return db, schema, nil
}

// Check checks the ledger file at path without changing it: SQLite's
// integrity check, the schema version, the nodes, the reach of the rows
// and the leases, in one read snapshot. It takes no lock from a running
// agent and migrates nothing.
func Check(ctx context.Context, path string) (ledger.Health, error) {
	h, err := check(ctx, path)
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CORRUPT {
		return h, fmt.Errorf("check ledger %s: the file is damaged (%w): stop the agent and restore the last backup", path, err)
	}
	if err != nil {
		return h, fmt.Errorf("check ledger %s: %w", path, err)
	}
	return h, nil
}

func check(ctx context.Context, path string) (ledger.Health, error) {
	h := ledger.Health{Backend: "SQLite", Where: path, IntegrityChecked: true}
	db, schema, err := readOnly(ctx, path)
	if err != nil {
		return h, err
	}
	defer db.Close()
	if h.SchemaVersion, err = strconv.Atoi(schema.Version); err != nil {
		return h, fmt.Errorf("schema version %q: %w", schema.Version, err)
	}
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			h.SizeBytes += fi.Size()
		}
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return h, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return h, err
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return h, err
		}
		if line != "ok" {
			h.Integrity = append(h.Integrity, line)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return h, err
	}
	return h, sqlledger.Check(ctx, querier{tx}, &h)
}

// Backup writes a consistent copy of the ledger file at src to dst with
// VACUUM INTO, while agents go on writing: the copy is one read snapshot,
// compacted, as the release that wrote it left it (nothing is migrated).
// It is written beside dst and linked into place, so that dst is either
// absent or whole; an existing dst is an error, never overwritten.
func Backup(ctx context.Context, src, dst string) error {
	if err := backup(ctx, src, dst); err != nil {
		return fmt.Errorf("back up ledger %s to %s: %w", src, dst, err)
	}
	return nil
}

func backup(ctx context.Context, src, dst string) error {
	abs, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(abs); err == nil {
		return errors.New("it exists; give a new file")
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	db, _, err := readOnly(ctx, src)
	if err != nil {
		return err
	}
	defer db.Close()
	tmp, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".*")
	if err != nil {
		return err
	}
	tmpPath := tmp.Name()
	tmp.Close()
	os.Remove(tmpPath) // VACUUM INTO creates the file itself
	defer os.Remove(tmpPath)
	if _, err := db.ExecContext(ctx, "VACUUM INTO $1", tmpPath); err != nil {
		return err
	}
	if err := os.Chmod(tmpPath, 0o600); err != nil {
		return err
	}
	// A link, unlike a rename, never replaces a file made meanwhile.
	return os.Link(tmpPath, abs)
}

// quickCheckLines bounds what QuickCheck reads of SQLite's report: the
// first faults say enough to name the file damaged.
const quickCheckLines = 5

// QuickCheck runs SQLite's quick_check on the ledger file at path, read
// only, before a writer opens it: a damaged ledger gives an error
// wrapping ledger.ErrDamaged that names the file and the fix, so that no
// agent writes on it and no run goes on silently with part of its
// history unreadable. A missing or empty file (a new ledger) and one that
// is not SQLite at all (which Open refuses as ledger.ErrNotLedger) pass.
//
// quick_check reads every page and checks each b-tree's structure, but
// not that the indexes match their tables (integrity_check, behind
// `gpumeter ledger check`, does): it is the check cheap enough for every
// start (see BENCHMARKS.md).
func QuickCheck(ctx context.Context, path string) error {
	faults, err := quickCheck(ctx, path)
	if err == nil && len(faults) == 0 {
		return nil
	}
	what := strings.Join(faults, "; ")
	if err != nil {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return fmt.Errorf("quick check of ledger %s: %w", path, err)
		}
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		default:
			return fmt.Errorf("quick check of ledger %s: %w", path, err)
		}
		what = err.Error()
	}
	return fmt.Errorf("%w: %s (%s): stop here and do not write on it; "+
		"run `gpumeter ledger check --db %s` to see the damage, then put the last copy `gpumeter ledger backup` made in its place "+
		"(or move the file away to start an empty ledger, losing its history)", ledger.ErrDamaged, path, what, path)
}

func quickCheck(ctx context.Context, path string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(abs)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	head := make([]byte, len(sqliteMagic))
	n, _ := io.ReadFull(f, head)
	f.Close()
	switch {
	case n == 0:
		return nil, nil // a new ledger: ensureLedger made it empty
	case n < len(sqliteMagic) || string(head) != sqliteMagic:
		if fi, err := os.Stat(abs); err == nil && fi.Size() < 100 && strings.HasPrefix(sqliteMagic, string(head[:n])) {
			return []string{fmt.Sprintf("cut short: %d bytes, less than an SQLite header", fi.Size())}, nil
		}
		return nil, nil // not SQLite: Open names it
	}
	db, err := sql.Open("sqlite", dsn(abs, "mode=ro&_pragma=busy_timeout("+strconv.FormatInt(busyTimeout.Milliseconds(), 10)+")"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check("+strconv.Itoa(quickCheckLines)+")")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var faults []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return faults, err
		}
		if line != "ok" {
			faults = append(faults, line)
		}
	}
	return faults, rows.Err()
}

// sqliteMagic begins every SQLite database file.
const sqliteMagic = "SQLite format 3\x00"
