package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "modernc.org/sqlite" // the ledger's own driver
)

// ledgerSize is the ledger's size by the rule: the SQLite file
// after VACUUM, every table in it, and each table's share (its indexes
// included) from dbstat.
type ledgerSize struct {
	Total  int64
	Tables []tableSize // largest first
}

type tableSize struct {
	Name  string
	Bytes int64
}

// vacuumLedger writes a vacuumed copy of the ledger at path to dst
// (VACUUM INTO, which leaves the ledger itself alone) and measures it.
func vacuumLedger(ctx context.Context, path, dst string) (ledgerSize, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ledgerSize{}, err
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?mode=ro")
	if err != nil {
		return ledgerSize{}, err
	}
	defer db.Close()
	os.Remove(dst)
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return ledgerSize{}, fmt.Errorf("vacuum %s: %w", path, err)
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return ledgerSize{}, err
	}
	s := ledgerSize{Total: fi.Size()}

	absDst, err := filepath.Abs(dst)
	if err != nil {
		return s, err
	}
	vdb, err := sql.Open("sqlite", "file:"+(&url.URL{Path: absDst}).EscapedPath()+"?mode=ro")
	if err != nil {
		return s, err
	}
	defer vdb.Close()
	rows, err := vdb.QueryContext(ctx, `SELECT COALESCE(m.tbl_name, d.name), SUM(d.pgsize)
		FROM dbstat d LEFT JOIN sqlite_schema m ON m.name = d.name GROUP BY 1`)
	if err != nil {
		return s, fmt.Errorf("dbstat of %s: %w", dst, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t tableSize
		if err := rows.Scan(&t.Name, &t.Bytes); err != nil {
			return s, err
		}
		s.Tables = append(s.Tables, t)
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	slices.SortFunc(s.Tables, func(a, b tableSize) int { return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Name, b.Name)) })
	return s, nil
}

// String lists the largest tables and how much the rest hold.
func (s ledgerSize) String() string {
	var b strings.Builder
	var rest int64
	for i, t := range s.Tables {
		if i >= 6 {
			rest += t.Bytes
			continue
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", t.Name, bytesText(t.Bytes))
	}
	if rest > 0 {
		fmt.Fprintf(&b, ", the other %d tables %s", len(s.Tables)-6, bytesText(rest))
	}
	return b.String()
}

// bytesText writes n in MB (10^6 bytes, as du -b counts).
func bytesText(n int64) string { return fmt.Sprintf("%.3f MB", float64(n)/1e6) }
