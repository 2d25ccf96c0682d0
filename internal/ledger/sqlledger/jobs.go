package sqlledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Tx is a write transaction as the job store uses it.
type Tx interface {
	Querier
	// Exec runs one statement and returns how many rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
}

const jobColumns = `seq, id, node, name, user_name, team, state, reason, reason_text, gpus_requested, gpus, image, command, env_keys,
	request, time_limit_us, submitted_us, started_us, ended_us, exit_code, container_id, held, attempts, requeues, updated_us, rev, placement`

// SubmitJob adds job with the next ID and its audit event in one transaction.
func (l Ledger) SubmitJob(ctx context.Context, job queue.Job, audit audit.Event) (queue.Job, error) {
	if l.b.WriteTx == nil {
		return queue.Job{}, fmt.Errorf("submit job to %s: the backend has no job store", l.b.Name)
	}
	if job.State == "" || job.User == "" || job.GPUsRequested < 0 {
		return queue.Job{}, fmt.Errorf("submit job to %s: a job needs a state, a user and a GPU count of 0 or more (got %q, %q, %d)",
			l.b.Name, job.State, job.User, job.GPUsRequested)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if job.SubmittedAt.IsZero() {
		job.SubmittedAt = now
	}
	job.UpdatedAt = now
	if l.g != nil && !activeState(job.State) {
		return l.submitGrouped(ctx, job, audit)
	}
	return l.submitOne(ctx, job, audit)
}

// submitOne is SubmitJob in a transaction of its own.
func (l Ledger) submitOne(ctx context.Context, job queue.Job, audit audit.Event) (queue.Job, error) {
	var out queue.Job
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		j := job
		var seq int64
		if err := queryOne(ctx, tx, "UPDATE job_sequence SET last = last + 1 RETURNING last", nil, &seq); err != nil {
			return fmt.Errorf("job sequence: %w", err)
		}
		j.Seq, j.ID = seq, ledger.JobID(seq)
		args, err := jobArgs(j, 0)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO jobs ("+jobColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
			$14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27)`, args...); err != nil {
			return err
		}
		if activeState(j.State) {
			// A job written as started already (a restore) holds its GPUs.
			if err := l.allocate(ctx, tx, j, false); err != nil {
				return err
			}
		}
		if err := l.notify(ctx, tx); err != nil {
			return err
		}
		if audit.Target == "" {
			audit.Target = j.ID
		}
		if err := insertAudit(ctx, tx, audit); err != nil {
			return err
		}
		out = j
		return nil
	})
	if err != nil {
		return queue.Job{}, fmt.Errorf("submit job to %s: %w", l.b.Name, err)
	}
	return normalise(out), nil
}

// RaiseJobSequence moves the job sequence up to floor when it is below.
func (l Ledger) RaiseJobSequence(ctx context.Context, floor int64) error {
	if l.b.WriteTx == nil {
		return fmt.Errorf("raise the job sequence of %s: the backend has no job store", l.b.Name)
	}
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, "UPDATE job_sequence SET last = $1 WHERE last < $1", floor)
		return err
	})
	if err != nil {
		return fmt.Errorf("raise the job sequence of %s to %d: %w", l.b.Name, floor, err)
	}
	return nil
}

// Job returns one job.
func (l Ledger) Job(ctx context.Context, id string) (queue.Job, error) {
	js, err := read(ctx, l, "job "+id+" from", func(q Querier) ([]queue.Job, error) {
		rows, err := scanJobs(ctx, q, "SELECT "+jobColumns+" FROM jobs WHERE id = $1", id)
		return jobsOf(rows), err
	})
	if err != nil {
		return queue.Job{}, err
	}
	if len(js) == 0 {
		return queue.Job{}, fmt.Errorf("job %s: %w", id, ledger.ErrJobNotFound)
	}
	return js[0], nil
}

// Jobs returns the jobs f selects, oldest first.
func (l Ledger) Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error) {
	var qb query
	where := jobWhere(f, &qb)
	if f.After > 0 {
		where = append(where, "seq > "+qb.arg(f.After))
	}
	sql := "SELECT " + jobColumns + " FROM jobs"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY seq"
	if f.Limit > 0 {
		sql += " LIMIT " + qb.arg(int64(f.Limit))
	}
	return read(ctx, l, "jobs from", func(q Querier) ([]queue.Job, error) {
		rows, err := scanJobs(ctx, q, sql, qb.args...)
		return jobsOf(rows), err
	})
}

// jobWhere is the conditions of f but its After and Limit, with their
// arguments added to qb.
func jobWhere(f ledger.JobFilter, qb *query) []string {
	var where []string
	if f.User != "" {
		where = append(where, "user_name = "+qb.arg(f.User))
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+qb.list(queue.StateNames(f.States))+")")
	}
	if f.ArrayID != "" {
		// The tasks' IDs are the array's and "_<index>"; LIKE's own
		// characters in the ID are taken literally.
		esc := strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(f.ArrayID)
		where = append(where, "id LIKE "+qb.arg(esc+`\_%`)+` ESCAPE '\'`)
	}
	if !f.IncludeEnded {
		where = append(where, "state NOT IN ("+qb.list(queue.StateNames(queue.EndedStates()))+")")
	}
	return where
}

// ActiveJobs returns the jobs in states, oldest first.
func (l Ledger) ActiveJobs(ctx context.Context, states ...queue.State) ([]queue.Job, error) {
	if len(states) == 0 {
		return nil, nil
	}
	return l.Jobs(ctx, ledger.JobFilter{States: states, IncludeEnded: true})
}

// SetHeld sets a job's Held flag while its state is from.
func (l Ledger) SetHeld(ctx context.Context, id string, from queue.State, held bool, audit audit.Event) (queue.Job, error) {
	return l.UpdateJob(ctx, id, from, func(j *queue.Job) { j.Held = held }, audit)
}

// UpdateJob changes a job while its state is still from.
func (l Ledger) UpdateJob(ctx context.Context, id string, from queue.State, change func(*queue.Job), audit audit.Event) (queue.Job, error) {
	if l.b.WriteTx == nil {
		return queue.Job{}, fmt.Errorf("update job in %s: the backend has no job store", l.b.Name)
	}
	var out queue.Job
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		j, err := l.updateJob(ctx, tx, id, from, change, nil)
		if err != nil {
			return err
		}
		if audit.Kind != "" {
			if audit.Target == "" {
				audit.Target = id
			}
			if err := insertAudit(ctx, tx, audit); err != nil {
				return err
			}
		}
		out = j
		return nil
	})
	var se *ledger.JobStateError
	if errors.As(err, &se) {
		return queue.Job{}, err
	}
	if err != nil {
		return queue.Job{}, fmt.Errorf("update job %s in %s: %w", id, l.b.Name, err)
	}
	return normalise(out), nil
}

// updateJob applies change to the job with id inside tx while its state
// is from, and brings its allocations in line with the state it leaves
// it in. node, when not nil, is where the job goes (a start intent's);
// otherwise the job keeps its node.
func (l Ledger) updateJob(ctx context.Context, tx Tx, id string, from queue.State, change func(*queue.Job), node *string) (queue.Job, error) {
	js, err := scanJobs(ctx, tx, "SELECT "+jobColumns+" FROM jobs WHERE id = $1", id)
	if err != nil {
		return queue.Job{}, err
	}
	if len(js) == 0 {
		return queue.Job{}, ledger.ErrJobNotFound
	}
	cur := js[0]
	if cur.State != from {
		return queue.Job{}, &ledger.JobStateError{ID: id, Want: from, Actual: cur.State}
	}
	rev := cur.rev
	j := cur.Job
	j.GPUs = append([]string(nil), j.GPUs...)
	change(&j)
	// What the store assigns is kept, whatever change did.
	j.ID, j.Seq, j.Name, j.User, j.Team = cur.ID, cur.Seq, cur.Name, cur.User, cur.Team
	j.GPUsRequested, j.Image, j.Command, j.EnvKeys, j.Request = cur.GPUsRequested, cur.Image, cur.Command, cur.EnvKeys, cur.Request
	j.TimeLimit, j.SubmittedAt = cur.TimeLimit, cur.SubmittedAt
	if node != nil {
		j.Node = *node
	}
	j.UpdatedAt = time.Now().UTC().Truncate(time.Microsecond)
	gpus, err := jsonList(j.GPUs)
	if err != nil {
		return queue.Job{}, err
	}
	var exit any
	if j.ExitCode != nil {
		exit = int64(*j.ExitCode)
	}
	n, err := tx.Exec(ctx, `UPDATE jobs SET state = $1, reason = $2, reason_text = $3, gpus = $4, started_us = $5, ended_us = $6,
		exit_code = $7, container_id = $8, held = $9, attempts = $10, requeues = $11, updated_us = $12, placement = $13, node = $14,
		rev = rev + 1
		WHERE id = $15 AND state = $16 AND rev = $17`,
		string(j.State), string(j.Reason), j.ReasonText, gpus, optTime(j.StartedAt), optTime(j.EndedAt),
		exit, j.ContainerID, j.Held, int64(j.Attempts), int64(j.Requeues), j.UpdatedAt.UnixMicro(), placementColumn(j.Placement),
		j.Node, id, string(from), rev)
	if err != nil {
		return queue.Job{}, err
	}
	if n != 1 {
		// Another transaction changed the row between the read and
		// the update (PostgreSQL under READ COMMITTED).
		var state string
		if err := queryOne(ctx, tx, "SELECT state FROM jobs WHERE id = $1", []any{id}, &state); err != nil {
			return queue.Job{}, err
		}
		if queue.State(state) != from {
			return queue.Job{}, &ledger.JobStateError{ID: id, Want: from, Actual: queue.State(state)}
		}
		return queue.Job{}, fmt.Errorf("job %s changed while it was written; try again", id)
	}
	if j.State != cur.State || j.Node != cur.Node || !slices.Equal(j.GPUs, cur.GPUs) {
		if err := l.allocate(ctx, tx, j, activeState(cur.State)); err != nil {
			return queue.Job{}, err
		}
	}
	// GPUs freed, a job back in the queue or released: a pass may start
	// something.
	freed := activeState(cur.State) && !activeState(j.State)
	if freed || j.State == queue.Queued && (cur.State != queue.Queued || cur.Held && !j.Held) {
		if err := l.notify(ctx, tx); err != nil {
			return queue.Job{}, err
		}
	}
	return j, nil
}

// insertAudits writes es with one statement.
func insertAudits(ctx context.Context, tx Tx, es []audit.Event) error {
	const cols = 20
	args := make([]any, 0, len(es)*cols)
	for _, e := range es {
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		a, err := AuditArgs(e)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		if len(a) != cols {
			return fmt.Errorf("audit: %d columns, want %d", len(a), cols)
		}
		args = append(args, a...)
	}
	sql := strings.TrimSuffix(InsertAudit, auditValues) + placeholderRows(len(es), cols)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

func insertAudit(ctx context.Context, tx Tx, e audit.Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	args, err := AuditArgs(e)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, InsertAudit, args...); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

func queryOne(ctx context.Context, q Querier, sql string, args []any, dest ...any) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("no row")
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	for rows.Next() {
	}
	return rows.Err()
}

// list adds vs as arguments and returns their placeholders.
func (q *query) list(vs []string) string {
	ps := make([]string, len(vs))
	for i, v := range vs {
		ps[i] = q.arg(v)
	}
	return strings.Join(ps, ", ")
}

func jsonList(s []string) (string, error) {
	if s == nil {
		s = []string{}
	}
	b, err := json.Marshal(s)
	return string(b), err
}

func optTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func jobArgs(j queue.Job, rev int64) ([]any, error) {
	var lists [3]string
	for i, l := range [][]string{j.GPUs, j.Command, j.EnvKeys} {
		s, err := jsonList(l)
		if err != nil {
			return nil, err
		}
		lists[i] = s
	}
	req, err := requestColumn(j)
	if err != nil {
		return nil, err
	}
	var exit any
	if j.ExitCode != nil {
		exit = int64(*j.ExitCode)
	}
	return []any{j.Seq, j.ID, j.Node, j.Name, j.User, j.Team, string(j.State), string(j.Reason), j.ReasonText, int64(j.GPUsRequested),
		lists[0], j.Image, lists[1], lists[2], req, int64(j.TimeLimit / time.Microsecond), j.SubmittedAt.UnixMicro(),
		optTime(j.StartedAt), optTime(j.EndedAt), exit, j.ContainerID, j.Held, int64(j.Attempts), int64(j.Requeues),
		j.UpdatedAt.UnixMicro(), rev, placementColumn(j.Placement)}, nil
}

func jobsOf(rows []jobRow) []queue.Job {
	out := make([]queue.Job, len(rows))
	for i, r := range rows {
		out[i] = r.Job
	}
	return out
}

// normalise makes a job as written look as it reads back.
func normalise(j queue.Job) queue.Job {
	for _, l := range []*[]string{&j.GPUs, &j.Command, &j.EnvKeys} {
		if *l == nil {
			*l = []string{}
		}
	}
	// The request and the placement go through their columns' JSON, as
	// a read would take them.
	if req, err := requestColumn(j); err == nil {
		j.Request = requestOf(req)
	}
	if p, ok := placementColumn(j.Placement).(string); ok {
		j.Placement = placementOf(&p)
	} else {
		j.Placement = nil
	}
	for _, t := range []*time.Time{&j.SubmittedAt, &j.StartedAt, &j.EndedAt, &j.UpdatedAt} {
		if !t.IsZero() {
			*t = t.UTC().Truncate(time.Microsecond)
		}
	}
	return j
}

type jobRow struct {
	queue.Job
	rev int64
}

func scanJobs(ctx context.Context, q Querier, sql string, args ...any) ([]jobRow, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []jobRow
	for rows.Next() {
		var (
			r                                  jobRow
			gpusReq, limit, sub, att, req, upd int64
			gpus, cmd, env, request            string
			state, reason                      string
			started, ended, exit               *int64
			placement                          *string
		)
		if err := rows.Scan(&r.Seq, &r.ID, &r.Node, &r.Name, &r.User, &r.Team, &state, &reason, &r.ReasonText, &gpusReq,
			&gpus, &r.Image, &cmd, &env, &request, &limit, &sub, &started, &ended, &exit, &r.ContainerID, &r.Held,
			&att, &req, &upd, &r.rev, &placement); err != nil {
			return nil, err
		}
		for _, l := range []struct {
			s   string
			dst *[]string
		}{{gpus, &r.GPUs}, {cmd, &r.Command}, {env, &r.EnvKeys}} {
			if err := json.Unmarshal([]byte(l.s), l.dst); err != nil {
				return nil, fmt.Errorf("job %s: %w", r.ID, err)
			}
		}
		r.State, r.Reason = queue.State(state), queue.Reason(reason)
		r.Request, r.Placement = requestOf(request), placementOf(placement)
		r.GPUsRequested, r.TimeLimit = int(gpusReq), time.Duration(limit)*time.Microsecond
		r.Attempts, r.Requeues = int(att), int(req)
		r.SubmittedAt, r.UpdatedAt = time.UnixMicro(sub).UTC(), time.UnixMicro(upd).UTC()
		if started != nil {
			r.StartedAt = time.UnixMicro(*started).UTC()
		}
		if ended != nil {
			r.EndedAt = time.UnixMicro(*ended).UTC()
		}
		if exit != nil {
			c := int(*exit)
			r.ExitCode = &c
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
