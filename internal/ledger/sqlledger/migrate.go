package sqlledger

import (
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
	MetaTable      = "gpumeter_meta"
	MetaMagic      = "magic"
	MetaVersion    = "schema_version"
	MetaHorizon    = "minute_horizon"
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

// LoadMigrations reads the migrations in the root of fsys. Versions must
// run 1, 2, 3... without gaps.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
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
