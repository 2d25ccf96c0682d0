package sqlledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// FleetVersion is the schema version that added the fleet's tables:
// registered nodes, the scheduler lease, start intents and allocations.
const FleetVersion = 12

// activeState reports whether a job in state s holds its GPUs: its
// allocations and its intent exist exactly while it does.
func activeState(s queue.State) bool { return s == queue.Starting || s == queue.Running }

// memoryJob reports whether j asks for memory on one shared GPU rather
// than whole GPUs: its allocation is a share. A job whose request did
// not read is taken to hold its GPUs whole.
func memoryJob(j queue.Job) bool { return j.Request != nil && j.Request.GPUMemory > 0 }

// allocate brings job j's allocation rows in line with the state j is
// written in, inside its transaction: a job that starts or runs holds
// one row per (its node, each of its GPUs); any other holds none, and
// has no intent either. A GPU that another job holds whole, or that
// memory jobs share when j would take it whole, is an error wrapping
// ledger.ErrDoubleAllocation; the caller's transaction then writes
// nothing. Where the backend locks the GPUs the check is exact; the
// unique index over whole allocations refuses a second whole holder
// however the writes interleave.
//
// had says whether j was starting or running before the write: a job
// that was not has neither allocations nor an intent to delete.
func (l Ledger) allocate(ctx context.Context, tx Tx, j queue.Job, had bool) error {
	if had {
		if _, err := tx.Exec(ctx, "DELETE FROM job_allocations WHERE job_seq = $1", j.Seq); err != nil {
			return fmt.Errorf("allocations of job %s: %w", j.ID, err)
		}
	}
	if !activeState(j.State) {
		if !had {
			return nil
		}
		if _, err := tx.Exec(ctx, "DELETE FROM job_intents WHERE job_seq = $1", j.Seq); err != nil {
			return fmt.Errorf("intent of job %s: %w", j.ID, err)
		}
		return nil
	}
	gpus := slices.Clone(j.GPUs)
	slices.Sort(gpus)
	gpus = slices.Compact(gpus)
	if len(gpus) == 0 {
		return nil
	}
	if l.b.LockGPUs != nil {
		if err := l.b.LockGPUs(ctx, tx, j.Node, gpus); err != nil {
			return fmt.Errorf("lock the GPUs of job %s: %w", j.ID, err)
		}
	}
	shared := memoryJob(j)
	var qb query
	sql := `SELECT a.gpu_uuid, a.shared, j.id FROM job_allocations a JOIN jobs j ON j.seq = a.job_seq
		WHERE a.node = ` + qb.arg(j.Node) + ` AND a.gpu_uuid IN (` + qb.list(gpus) + `)`
	if shared {
		sql += " AND NOT a.shared"
	}
	rows, err := tx.Query(ctx, sql+" ORDER BY a.gpu_uuid, j.seq LIMIT 1", qb.args...)
	if err != nil {
		return fmt.Errorf("allocations of job %s: %w", j.ID, err)
	}
	var (
		gpu, holder string
		held, found bool
	)
	if rows.Next() {
		found = true
		err = rows.Scan(&gpu, &held, &holder)
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return fmt.Errorf("allocations of job %s: %w", j.ID, err)
	}
	if found {
		how := "held whole by job " + holder
		if held {
			how = "shared by memory job " + holder
		}
		return fmt.Errorf("job %s on GPU %s of node %q: it is %s: %w", j.ID, gpu, j.Node, how, ledger.ErrDoubleAllocation)
	}
	qb = query{}
	values := make([]string, len(gpus))
	for i, g := range gpus {
		values[i] = "(" + qb.arg(j.Seq) + ", " + qb.arg(j.Node) + ", " + qb.arg(g) + ", " + qb.arg(shared) + ")"
	}
	_, err = tx.Exec(ctx, "INSERT INTO job_allocations (job_seq, node, gpu_uuid, shared) VALUES "+strings.Join(values, ", "), qb.args...)
	if err != nil && l.b.UniqueViolation != nil && l.b.UniqueViolation(err) {
		return fmt.Errorf("job %s on GPUs %s of node %q: another job took one of them meanwhile: %w",
			j.ID, strings.Join(gpus, ", "), j.Node, ledger.ErrDoubleAllocation)
	}
	if err != nil {
		return fmt.Errorf("allocations of job %s: %w", j.ID, err)
	}
	return nil
}

// allocateActive gives the jobs that start or run the allocations of
// their GPUs, for a ledger that kept none before FleetVersion. Two jobs
// that an older release let hold one GPU whole keep running: the first
// (by ID) gets the allocation, and the migration does not fail.
func allocateActive(ctx context.Context, tx Tx) error {
	var qb query
	js, err := scanJobs(ctx, tx, "SELECT "+jobColumns+" FROM jobs WHERE state IN ("+
		qb.list(queue.StateNames([]queue.State{queue.Starting, queue.Running}))+") ORDER BY seq", qb.args...)
	if err != nil {
		return fmt.Errorf("allocations of the active jobs: %w", err)
	}
	for _, j := range js {
		for _, g := range j.GPUs {
			if _, err := tx.Exec(ctx, `INSERT INTO job_allocations (job_seq, node, gpu_uuid, shared) VALUES ($1, $2, $3, $4)
				ON CONFLICT DO NOTHING`, j.Seq, j.Node, g, memoryJob(j.Job)); err != nil {
				return fmt.Errorf("allocations of job %s: %w", j.ID, err)
			}
		}
	}
	return nil
}

// now is the store's clock, as the backend reads it.
func (l Ledger) now(ctx context.Context, q Querier) (time.Time, error) {
	if l.b.Now == nil {
		return time.Now().UTC().Truncate(time.Microsecond), nil
	}
	t, err := l.b.Now(ctx, q)
	return t.UTC(), err
}

// forUpdate is the locking clause of a read whose rows the transaction
// decides on, where the database locks rows.
func (l Ledger) forUpdate() string {
	if l.b.RowLocks {
		return " FOR UPDATE"
	}
	return ""
}

// RegisterNode adds or updates a node's registration, keeping its
// Drained flag and its first registration's time.
func (l Ledger) RegisterNode(ctx context.Context, n ledger.NodeInfo) error {
	if n.Node == "" {
		return fmt.Errorf("register a node in %s: the node has no name", l.b.Name)
	}
	gpus, err := json.Marshal(orEmpty(n.GPUs))
	if err != nil {
		return fmt.Errorf("register node %q in %s: %w", n.Node, l.b.Name, err)
	}
	images, err := json.Marshal(orEmpty(n.Images))
	if err != nil {
		return fmt.Errorf("register node %q in %s: %w", n.Node, l.b.Name, err)
	}
	err = l.b.WriteTx(ctx, func(tx Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO fleet_nodes (node, agent_version, gpus, images, api, drained, registered_us, updated_us)
			VALUES ($1, $2, $3, $4, $5, FALSE, $6, $6)
			ON CONFLICT (node) DO UPDATE SET agent_version = excluded.agent_version, gpus = excluded.gpus,
				images = excluded.images, api = excluded.api, updated_us = excluded.updated_us`,
			n.Node, n.AgentVersion, string(gpus), string(images), n.API, now.UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("register node %q in %s: %w", n.Node, l.b.Name, err)
	}
	return nil
}

// orEmpty is s, or an empty slice for nil, so that JSON writes [].
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Nodes returns the registered nodes by name, with their leases' state
// judged by the store's clock.
func (l Ledger) Nodes(ctx context.Context, takeover time.Duration) ([]ledger.NodeStatus, error) {
	return read(ctx, l, "the fleet's nodes from", func(q Querier) ([]ledger.NodeStatus, error) {
		now, err := l.now(ctx, q)
		if err != nil {
			return nil, err
		}
		rows, err := q.Query(ctx, `SELECT n.node, n.agent_version, n.gpus, n.images, n.api, n.drained, n.registered_us, n.updated_us,
				l.heartbeat_us, l.released
			FROM fleet_nodes n LEFT JOIN node_leases l ON l.node = n.node ORDER BY n.node`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []ledger.NodeStatus
		for rows.Next() {
			var (
				n            ledger.NodeStatus
				gpus, images string
				reg, upd     int64
				hb           *int64
				released     *bool
			)
			if err := rows.Scan(&n.Node, &n.AgentVersion, &gpus, &images, &n.API, &n.Drained, &reg, &upd, &hb, &released); err != nil {
				return nil, err
			}
			if err := json.Unmarshal([]byte(gpus), &n.GPUs); err != nil {
				return nil, fmt.Errorf("node %q's GPUs: %w", n.Node, err)
			}
			if err := json.Unmarshal([]byte(images), &n.Images); err != nil {
				return nil, fmt.Errorf("node %q's images: %w", n.Node, err)
			}
			n.Registered, n.Updated = time.UnixMicro(reg).UTC(), time.UnixMicro(upd).UTC()
			n.Lost = true // until a lease says otherwise
			if hb != nil && *hb > 0 {
				n.Heartbeat = time.UnixMicro(*hb).UTC()
				n.LeaseAge = max(0, now.Sub(n.Heartbeat))
				n.Lost = released != nil && *released || n.LeaseAge > takeover
			}
			out = append(out, n)
		}
		return out, rows.Err()
	})
}

// SetDrained sets a node's Drained flag, with audit, in one transaction.
func (l Ledger) SetDrained(ctx context.Context, node string, drained bool, ev audit.Event) error {
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, "UPDATE fleet_nodes SET drained = $1 WHERE node = $2", drained, node)
		if err != nil {
			return err
		}
		if n == 0 {
			return ledger.ErrNodeNotFound
		}
		if err := l.notify(ctx, tx); err != nil {
			return err
		}
		if ev.Kind == "" {
			return nil
		}
		if ev.Target == "" {
			ev.Target = node
		}
		return insertAudit(ctx, tx, ev)
	})
	if err != nil {
		return fmt.Errorf("set node %q drained=%t in %s: %w", node, drained, l.b.Name, err)
	}
	return nil
}

// schedulerLease reads the scheduler lease's row, with lock appended to
// the query.
func schedulerLease(ctx context.Context, q Querier, lock string) (ledger.SchedulerLease, error) {
	var (
		h                 ledger.SchedulerLease
		acquired, hb      int64
		released, foundIt bool
	)
	rows, err := q.Query(ctx, "SELECT instance, node, token, acquired_us, heartbeat_us, released FROM scheduler_lease WHERE id = 1"+lock)
	if err != nil {
		return h, err
	}
	defer rows.Close()
	if rows.Next() {
		foundIt = true
		if err := rows.Scan(&h.Instance, &h.Node, &h.Token, &acquired, &hb, &released); err != nil {
			return h, err
		}
	}
	if err := rows.Err(); err != nil {
		return h, err
	}
	if !foundIt {
		return h, errors.New("the scheduler lease's row is missing")
	}
	if h.Instance == "" && h.Token == 0 {
		return ledger.SchedulerLease{}, nil // never taken
	}
	h.Acquired, h.Heartbeat, h.Released = time.UnixMicro(acquired).UTC(), time.UnixMicro(hb).UTC(), released
	return h, nil
}

// AcquireScheduler takes or renews the fleet's scheduler lease. The row
// is read FOR UPDATE where the database locks rows, so two agents that
// race for it decide one after the other.
func (l Ledger) AcquireScheduler(ctx context.Context, instance, node string, takeover time.Duration) (ledger.SchedulerLease, error) {
	if instance == "" {
		return ledger.SchedulerLease{}, fmt.Errorf("the scheduler lease in %s: an acquire needs an instance", l.b.Name)
	}
	var got ledger.SchedulerLease
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		h, err := schedulerLease(ctx, tx, l.forUpdate())
		if err != nil {
			return err
		}
		// Read after the lock: a wait for it does not age the holder.
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		silent := now.Sub(h.Heartbeat)
		switch {
		case h.Instance == instance && !h.Released:
			got = h
			got.Node, got.Heartbeat = node, now
			_, err = tx.Exec(ctx, "UPDATE scheduler_lease SET node = $1, heartbeat_us = $2 WHERE id = 1", node, now.UnixMicro())
		case h.Instance == "" || h.Released || silent > takeover:
			got = ledger.SchedulerLease{Instance: instance, Node: node, Token: h.Token + 1, Acquired: now, Heartbeat: now}
			_, err = tx.Exec(ctx, `UPDATE scheduler_lease SET instance = $1, node = $2, token = $3, acquired_us = $4, heartbeat_us = $4,
				released = FALSE WHERE id = 1`, instance, node, got.Token, now.UnixMicro())
		default:
			return &ledger.SchedulerHeldError{Holder: h, Silent: max(0, silent)}
		}
		return err
	})
	var held *ledger.SchedulerHeldError
	if errors.As(err, &held) {
		return ledger.SchedulerLease{}, held
	}
	if err != nil {
		return ledger.SchedulerLease{}, fmt.Errorf("the scheduler lease in %s: %w", l.b.Name, err)
	}
	return got, nil
}

// ReleaseScheduler gives the scheduler lease up while token is its.
func (l Ledger) ReleaseScheduler(ctx context.Context, token int64) error {
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE scheduler_lease SET released = TRUE, heartbeat_us = $1 WHERE id = 1 AND token = $2 AND NOT released",
			now.UnixMicro(), token)
		return err
	})
	if err != nil {
		return fmt.Errorf("release the scheduler lease (token %d) in %s: %w", token, l.b.Name, err)
	}
	return nil
}

// Scheduler returns the scheduler lease as it stands.
func (l Ledger) Scheduler(ctx context.Context) (ledger.SchedulerLease, error) {
	return read(ctx, l, "the scheduler lease from", func(q Querier) (ledger.SchedulerLease, error) {
		return schedulerLease(ctx, q, "")
	})
}

// WriteIntents starts queued jobs on the nodes and GPUs intents name, in
// one transaction under token. The first statement renews the lease
// while token is its; where the database locks rows that holds the
// lease's row until the commit, so a takeover comes wholly before the
// write (which is then refused) or wholly after it.
func (l Ledger) WriteIntents(ctx context.Context, token int64, intents []ledger.Intent, events []audit.Event) error {
	for _, in := range intents {
		if in.JobID == "" || in.Node == "" {
			return fmt.Errorf("write intents to %s: an intent needs a job and a node (got %q, %q)", l.b.Name, in.JobID, in.Node)
		}
	}
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		now, err := l.renewUnder(ctx, tx, token)
		if err != nil {
			return err
		}
		for _, in := range intents {
			if err := l.writeIntent(ctx, tx, token, now, in); err != nil {
				return err
			}
		}
		if err := l.notifyIntents(ctx, tx); err != nil {
			return err
		}
		for _, ev := range events {
			if ev.Kind == "" {
				continue
			}
			if err := insertAudit(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	var se *ledger.JobStateError
	if errors.As(err, &se) {
		return err
	}
	if err != nil {
		return fmt.Errorf("write %d intents to %s: %w", len(intents), l.b.Name, err)
	}
	return nil
}

// renewUnder renews the scheduler lease's heartbeat in tx while token is
// its, and returns the store's time; a token no longer the lease's, or a
// released lease, is an error wrapping ErrStaleToken. Where the database
// locks rows, the lease's row stays locked until tx ends.
func (l Ledger) renewUnder(ctx context.Context, tx Tx, token int64) (time.Time, error) {
	now, err := l.now(ctx, tx)
	if err != nil {
		return now, err
	}
	n, err := tx.Exec(ctx, "UPDATE scheduler_lease SET heartbeat_us = $1 WHERE id = 1 AND token = $2 AND NOT released",
		now.UnixMicro(), token)
	if err != nil {
		return now, err
	}
	if n == 0 {
		return now, fmt.Errorf("token %d: %w", token, ledger.ErrStaleToken)
	}
	return now, nil
}

// writeIntent moves in's job from queued to starting on in's node and
// GPUs, with its allocations and its intent row.
func (l Ledger) writeIntent(ctx context.Context, tx Tx, token int64, now time.Time, in ledger.Intent) error {
	var shareErr error
	node := in.Node
	j, err := l.updateJob(ctx, tx, in.JobID, queue.Queued, func(j *queue.Job) {
		if memoryJob(*j) != in.Shared {
			var mem uint64
			if j.Request != nil {
				mem = j.Request.GPUMemory
			}
			shareErr = fmt.Errorf("intent for job %s: shared is %t, but the job asks for %d bytes of a shared GPU's memory",
				j.ID, in.Shared, mem)
		}
		j.State, j.Reason = queue.Starting, ""
		j.GPUs, j.Placement = slices.Clone(in.GPUs), in.Placement
		j.ReasonText = "starting on " + node + ": " + strings.Join(in.GPUs, ", ")
	}, &node)
	if err != nil {
		return err
	}
	if shareErr != nil {
		return shareErr
	}
	gpus, err := jsonList(j.GPUs)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO job_intents (job_seq, node, gpus, token, placement, created_us, claimed_by, claimed_us)
		VALUES ($1, $2, $3, $4, $5, $6, '', NULL)
		ON CONFLICT (job_seq) DO UPDATE SET node = excluded.node, gpus = excluded.gpus, token = excluded.token,
			placement = excluded.placement, created_us = excluded.created_us, claimed_by = '', claimed_us = NULL`,
		j.Seq, j.Node, gpus, token, placementColumn(j.Placement), now.UnixMicro())
	if err != nil {
		return fmt.Errorf("intent of job %s: %w", j.ID, err)
	}
	return nil
}

// ClaimIntents marks node's unclaimed intents claimed by instance and
// returns their jobs. Where the database locks rows, intents that
// another transaction is claiming are skipped (FOR UPDATE SKIP LOCKED),
// so claims at once never return one job twice and never wait.
func (l Ledger) ClaimIntents(ctx context.Context, node, instance string, limit int) ([]queue.Job, error) {
	if instance == "" {
		return nil, fmt.Errorf("claim node %q's intents in %s: a claim needs an instance", node, l.b.Name)
	}
	if limit < 0 {
		return nil, fmt.Errorf("claim node %q's intents in %s: a limit of %d", node, l.b.Name, limit)
	}
	unclaimed := "SELECT job_seq FROM job_intents WHERE node = $1 AND claimed_by = ''"
	if limit > 0 {
		// The number is ours, not a caller's: written as a literal.
		unclaimed += " ORDER BY job_seq LIMIT " + strconv.Itoa(limit)
	}
	if l.b.RowLocks {
		unclaimed += " FOR UPDATE SKIP LOCKED"
	}
	var out []queue.Job
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		out = out[:0]
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE job_intents SET claimed_by = $2, claimed_us = $3
			WHERE claimed_by = '' AND job_seq IN (`+unclaimed+`) RETURNING job_seq`, node, instance, now.UnixMicro())
		if err != nil {
			return err
		}
		var seqs []string
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return err
			}
			seqs = append(seqs, strconv.FormatInt(seq, 10))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for chunk := range slices.Chunk(seqs, cancelChunk) {
			// The numbers are ours, not a caller's: written as literals.
			js, err := scanJobs(ctx, tx, "SELECT "+jobColumns+" FROM jobs WHERE seq IN ("+strings.Join(chunk, ", ")+") ORDER BY seq")
			if err != nil {
				return err
			}
			out = append(out, jobsOf(js)...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim node %q's intents in %s: %w", node, l.b.Name, err)
	}
	slices.SortFunc(out, func(a, b queue.Job) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// Allocations returns the active exclusive allocations.
func (l Ledger) Allocations(ctx context.Context) (map[ledger.NodeGPUKey]string, error) {
	return read(ctx, l, "the allocations from", func(q Querier) (map[ledger.NodeGPUKey]string, error) {
		rows, err := q.Query(ctx, `SELECT a.node, a.gpu_uuid, j.id FROM job_allocations a JOIN jobs j ON j.seq = a.job_seq
			WHERE NOT a.shared`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[ledger.NodeGPUKey]string{}
		for rows.Next() {
			var k ledger.NodeGPUKey
			var id string
			if err := rows.Scan(&k.Node, &k.UUID, &id); err != nil {
				return nil, err
			}
			out[k] = id
		}
		return out, rows.Err()
	})
}

// Unclaimed returns the jobs of node's intents not claimed yet.
func (l Ledger) Unclaimed(ctx context.Context, node string) (map[string]bool, error) {
	return read(ctx, l, "the unclaimed intents from", func(q Querier) (map[string]bool, error) {
		rows, err := q.Query(ctx, `SELECT j.id FROM job_intents i JOIN jobs j ON j.seq = i.job_seq
			WHERE i.node = $1 AND i.claimed_by = ''`, node)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			out[id] = true
		}
		return out, rows.Err()
	})
}

// PublishRanks replaces the fleet's ranking under token, renewing the
// lease first as WriteIntents does.
func (l Ledger) PublishRanks(ctx context.Context, token int64, body []byte) (int64, error) {
	var version int64
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		now, err := l.renewUnder(ctx, tx, token)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE fleet_ranks SET version = version + 1, token = $1, published_us = $2, body = $3
			WHERE id = 1 RETURNING version`, token, now.UnixMicro(), orEmpty(body))
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return errors.New("the fleet's ranking's row is missing")
		}
		if err := rows.Scan(&version); err != nil {
			return err
		}
		return rows.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("publish the fleet's ranking (%d bytes) to %s: %w", len(body), l.b.Name, err)
	}
	return version, nil
}

// Ranks returns the fleet's ranking when it is newer than since.
func (l Ledger) Ranks(ctx context.Context, since int64) (ledger.Ranks, error) {
	return read(ctx, l, "the fleet's ranking from", func(q Querier) (ledger.Ranks, error) {
		var r ledger.Ranks
		rows, err := q.Query(ctx, `SELECT version, token, published_us, CASE WHEN version > $1 THEN body END
			FROM fleet_ranks WHERE id = 1`, since)
		if err != nil {
			return r, err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return r, err
			}
			return r, errors.New("the fleet's ranking's row is missing")
		}
		var published int64
		var body []byte
		if err := rows.Scan(&r.Version, &r.Token, &published, &body); err != nil {
			return r, err
		}
		if r.Version > since {
			r.Body = orEmpty(body)
		}
		if published != 0 {
			r.Published = time.UnixMicro(published).UTC()
		}
		return r, rows.Err()
	})
}
