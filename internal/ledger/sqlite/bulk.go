package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// bulkRows is how many rows one multi-row INSERT of usage writes. A
// simulated day writes some 700,000 minute and hour rows; one statement
// per row spent a quarter of simulate's CPU in the driver and SQLite's
// per-statement work. 64 rows of the widest table (19 columns) are 1,216
// parameters, far below SQLite's limit of 32,766.
const bulkRows = 64

// multiRow returns query, whose VALUES list is one row of cols
// parameters written as %[2]s, with that list repeated for rows rows
// and %[1]s replaced by table. The parameters are plain ?, bound in
// order: SQLite takes $1 for a name, and finding the name of each of a
// thousand parameters is a linear search, which cost more than the
// statements saved.
func multiRow(query, table string, cols, rows int) string {
	var v strings.Builder
	for r := range rows {
		if r > 0 {
			v.WriteString(", ")
		}
		v.WriteByte('(')
		for c := range cols {
			if c > 0 {
				v.WriteString(", ")
			}
			v.WriteByte('?')
		}
		v.WriteByte(')')
	}
	return fmt.Sprintf(query, table, v.String())
}

// execRows writes rows with bulk, a statement of bulkRows rows, while
// that many remain, and the rest one by one with one. args appends the
// parameters of a row to dst. The rows are written in their order, so
// the table ends up as the one-row statements leave it.
func execRows[R any](ctx context.Context, w *writer, one, bulk *sql.Stmt, rows []R, args func(dst []any, r *R) []any) error {
	var buf []any
	if len(rows) >= bulkRows {
		st := w.stmt(ctx, bulk)
		for len(rows) >= bulkRows {
			buf = buf[:0]
			for i := range bulkRows {
				buf = args(buf, &rows[i])
			}
			if _, err := st.ExecContext(ctx, buf...); err != nil {
				return err
			}
			rows = rows[bulkRows:]
		}
	}
	if len(rows) == 0 {
		return nil
	}
	st := w.stmt(ctx, one)
	for i := range rows {
		buf = args(buf[:0], &rows[i])
		if _, err := st.ExecContext(ctx, buf...); err != nil {
			return err
		}
	}
	return nil
}
