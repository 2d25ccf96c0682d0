package sqlledger

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// The gpumeter_meta table marks a database as a ledger and records its
// schema version and minute horizon (see PlanWindow), one row per key.
const (
	MetaTable   = "gpumeter_meta"
	MetaMagic   = "magic"
	MetaVersion = "schema_version"
	MetaHorizon = "minute_horizon"
	// MetaDays is the first day that day rows answer for: the day after
	// the last hour row written before held time was kept (whose NULL a
	// day row could not carry row by row). Absent: every day.
	MetaDays       = "day_horizon"
	MagicValue     = "gpumeter ledger"
	migrationsGlob = "*.sql"
)

// Migration is one schema step, from an embedded file named
// NNNN_what.sql; Version is NNNN.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// LoadMigrations reads the migrations in dir of fsys (a backend's
// embedded files; "." for its root). Versions must run 1, 2, 3...
// without gaps.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	fsys, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, migrationsGlob)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		m := migrationName.FindStringSubmatch(path.Base(name))
		if m == nil {
			return nil, fmt.Errorf("migration %s: name is not NNNN_what.sql", name)
		}
		v, _ := strconv.Atoi(m[1])
		if v != len(ms)+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d", name, v, len(ms)+1)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations")
	}
	return ms, nil
}

// Schema is what a backend found in a database before migrating it.
type Schema struct {
	Tables  []string // tables other than gpumeter_meta
	HasMeta bool
	Magic   string // gpumeter_meta values, when HasMeta
	Version string
}

// ReadSchema reads what Pending needs through q: the names of the
// tables, which tablesSQL selects (the one part of it that each database
// asks its own way), and gpumeter_meta's values when the table is there.
func ReadSchema(ctx context.Context, q Querier, tablesSQL string) (Schema, error) {
	var s Schema
	rows, err := q.Query(ctx, tablesSQL)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return s, err
		}
		if name == MetaTable {
			s.HasMeta = true
		} else {
			s.Tables = append(s.Tables, name)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s, err
	}
	if !s.HasMeta {
		return s, nil
	}
	rows, err = q.Query(ctx, "SELECT key, value FROM "+MetaTable+" WHERE key IN ($1, $2)", MetaMagic, MetaVersion)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return s, err
		}
		if k == MetaMagic {
			s.Magic = v
		} else {
			s.Version = v
		}
	}
	return s, rows.Err()
}

// Exec runs one statement inside a backend's transaction.
type Exec func(ctx context.Context, sql string, args ...any) error

// Apply runs the pending migrations through exec, in the caller's
// transaction, and marks the database as a ledger at version, the number
// of migrations this binary knows.
func Apply(ctx context.Context, exec Exec, pending []Migration, version int) error {
	for _, m := range pending {
		if err := exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	const set = "INSERT INTO " + MetaTable + " (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
	if err := exec(ctx, set, MetaMagic, MagicValue); err != nil {
		return err
	}
	return exec(ctx, set, MetaVersion, strconv.Itoa(version))
}

// Pending returns the migrations a database still needs, or an error
// wrapping ledger.ErrNotLedger or ledger.ErrSchemaTooNew.
func Pending(ms []Migration, s Schema) ([]Migration, error) {
	if !s.HasMeta {
		if len(s.Tables) > 0 {
			shown := s.Tables
			if len(shown) > 5 {
				shown = append(shown[:5:5], "...")
			}
			return nil, fmt.Errorf("%w: it has tables (%s) but no %s table", ledger.ErrNotLedger, strings.Join(shown, ", "), MetaTable)
		}
		return ms, nil
	}
	if s.Magic != MagicValue {
		return nil, fmt.Errorf("%w: %s.%s is %q", ledger.ErrNotLedger, MetaTable, MetaMagic, s.Magic)
	}
	v, err := strconv.Atoi(s.Version)
	if err != nil || v < 0 {
		return nil, fmt.Errorf("%w: %s.%s is %q", ledger.ErrNotLedger, MetaTable, MetaVersion, s.Version)
	}
	if v > len(ms) {
		return nil, fmt.Errorf("%w: schema version %d, this gpumeter knows up to %d", ledger.ErrSchemaTooNew, v, len(ms))
	}
	return ms[v:], nil
}
