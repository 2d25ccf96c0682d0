package sqlledger

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// arrayBatch is how many task rows one INSERT writes: 27 arguments a
// row stay well under PostgreSQL's 65,535 and SQLite's 32,766.
const arrayBatch = 200

// SubmitArray adds an array job's tasks and its audit event in one
// transaction.
func (l Ledger) SubmitArray(ctx context.Context, template queue.Job, indices []int, maxRunning int, ev audit.Event) ([]queue.Job, error) {
	if l.b.WriteTx == nil {
		return nil, fmt.Errorf("submit array job to %s: the backend has no job store", l.b.Name)
	}
	switch {
	case template.State == "" || template.User == "" || template.GPUsRequested < 0:
		return nil, fmt.Errorf("submit array job to %s: a job needs a state, a user and a GPU count of 0 or more (got %q, %q, %d)",
			l.b.Name, template.State, template.User, template.GPUsRequested)
	case len(indices) == 0 || len(indices) > queue.MaxArrayTasks:
		return nil, fmt.Errorf("submit array job to %s: an array has 1 to %d tasks, not %d", l.b.Name, queue.MaxArrayTasks, len(indices))
	case maxRunning < 0:
		return nil, fmt.Errorf("submit array job to %s: a running cap of %d; give 0 (none) or more", l.b.Name, maxRunning)
	case template.Request == nil:
		return nil, fmt.Errorf("submit array job to %s: the tasks have no request to keep their array place in", l.b.Name)
	}
	seen := make(map[int]bool, len(indices))
	for _, i := range indices {
		if i < 0 || seen[i] {
			return nil, fmt.Errorf("submit array job to %s: index %d is negative or given twice", l.b.Name, i)
		}
		seen[i] = true
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if template.SubmittedAt.IsZero() {
		template.SubmittedAt = now
	}
	template.UpdatedAt = now
	var out []queue.Job
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		out = out[:0]
		var last int64
		if err := queryOne(ctx, tx, "UPDATE job_sequence SET last = last + $1 RETURNING last", []any{int64(len(indices) + 1)}, &last); err != nil {
			return fmt.Errorf("job sequence: %w", err)
		}
		base := last - int64(len(indices))
		arrayID := ledger.JobID(base)
		for k, index := range indices {
			j := template
			r := *template.Request
			r.Array = &queue.ArrayTask{ID: arrayID, Index: index, Count: len(indices), MaxRunning: maxRunning}
			j.Request = &r
			j.Seq, j.ID = base+1+int64(k), ledger.ArrayTaskID(arrayID, index)
			j.Command, j.EnvKeys = slices.Clone(template.Command), slices.Clone(template.EnvKeys)
			out = append(out, j)
		}
		for batch := range slices.Chunk(out, arrayBatch) {
			if err := insertJobs(ctx, tx, batch); err != nil {
				return err
			}
		}
		if ev.Target == "" {
			ev.Target = arrayID
		}
		if ev.Evidence == nil {
			ev.Evidence = map[string]float64{}
		}
		ev.Evidence["tasks"] = float64(len(indices))
		if err := l.notify(ctx, tx); err != nil {
			return err
		}
		return insertAudit(ctx, tx, ev)
	})
	if err != nil {
		return nil, fmt.Errorf("submit array job to %s: %w", l.b.Name, err)
	}
	for i := range out {
		out[i] = normalise(out[i])
	}
	return out, nil
}

// insertJobs writes new job rows with one statement.
func insertJobs(ctx context.Context, tx Tx, js []queue.Job) error {
	const cols = 27
	args := make([]any, 0, len(js)*cols)
	for _, j := range js {
		a, err := jobArgs(j, 0)
		if err != nil {
			return err
		}
		if len(a) != cols {
			return fmt.Errorf("job %s: %d columns, want %d", j.ID, len(a), cols)
		}
		args = append(args, a...)
	}
	_, err := tx.Exec(ctx, "INSERT INTO jobs ("+jobColumns+") VALUES "+placeholderRows(len(js), cols), args...)
	return err
}

// placeholderRows is the VALUES list of rows of cols numbered
// placeholders each: "($1, $2), ($3, $4)".
func placeholderRows(rows, cols int) string {
	var b strings.Builder
	for r := range rows {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteString("$" + strconv.Itoa(r*cols+c+1))
		}
		b.WriteByte(')')
	}
	return b.String()
}
