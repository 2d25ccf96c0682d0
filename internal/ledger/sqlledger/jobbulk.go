package sqlledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// cancelChunk is how many IDs one statement of CancelJobs names: well
// under SQLite's and PostgreSQL's limits on a statement's parameters.
const cancelChunk = 500

// CountJobs counts the jobs f selects, its Limit and After aside.
func (l Ledger) CountJobs(ctx context.Context, f ledger.JobFilter) (int, error) {
	var qb query
	sql := "SELECT COUNT(*) FROM jobs"
	if where := jobWhere(f, &qb); len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	return read(ctx, l, "the job count from", func(q Querier) (int, error) {
		var n int64
		if err := queryOne(ctx, q, sql, qb.args, &n); err != nil {
			return 0, err
		}
		return int(n), nil
	})
}

// CancelJobs cancels the jobs among ids that are still queued, in one
// transaction with audit.
func (l Ledger) CancelJobs(ctx context.Context, ids []string, c ledger.JobCancel, audit audit.Event) ([]queue.Job, error) {
	if l.b.WriteTx == nil {
		return nil, fmt.Errorf("cancel jobs in %s: the backend has no job store", l.b.Name)
	}
	if c.EndedAt.IsZero() {
		return nil, fmt.Errorf("cancel jobs in %s: no end time given", l.b.Name)
	}
	ended := c.EndedAt.UTC().Truncate(time.Microsecond)
	var out []queue.Job
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		out = out[:0]
		now := time.Now().UTC().Truncate(time.Microsecond)
		for chunk := range slices.Chunk(ids, cancelChunk) {
			var qb query
			sql := `UPDATE jobs SET state = ` + qb.arg(string(queue.Cancelled)) + `, reason = ` + qb.arg(string(c.Reason)) +
				`, reason_text = ` + qb.arg(c.ReasonText) + `, gpus = '[]', ended_us = ` + qb.arg(ended.UnixMicro()) +
				`, updated_us = ` + qb.arg(now.UnixMicro()) + `, rev = rev + 1
				WHERE state = ` + qb.arg(string(queue.Queued)) + ` AND id IN (` + qb.list(chunk) + `) RETURNING ` + jobColumns
			rows, err := scanJobs(ctx, tx, sql, qb.args...)
			if err != nil {
				return err
			}
			out = append(out, jobsOf(rows)...)
		}
		if audit.Kind != "" {
			audit.Count += int64(len(out))
			if err := insertAudit(ctx, tx, audit); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel %d jobs in %s: %w", len(ids), l.b.Name, err)
	}
	slices.SortFunc(out, func(a, b queue.Job) int { return cmp.Compare(a.Seq, b.Seq) })
	for i := range out {
		out[i] = normalise(out[i])
	}
	return out, nil
}
