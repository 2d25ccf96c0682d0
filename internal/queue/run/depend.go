package run

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// checkAfter checks the dependencies of a submission, which are hostile:
// their types and ids, no repeats, at most queue.MaxDependencies, and
// every id a job or an array the store has, the submitter's own unless
// admin. A job's id is given by the store only once it is stored, so a
// new job can name neither itself nor a job after it (both are unknown
// ids): no dependency cycle can be made.
func (q *Service) checkAfter(ctx context.Context, deps []queue.Dependency, user string, admin bool) error {
	if len(deps) > queue.MaxDependencies {
		return &BadRequest{Field: "after", Text: fmt.Sprintf("%d dependencies; a job may wait for at most %d", len(deps), queue.MaxDependencies)}
	}
	seen := make(map[queue.Dependency]bool, len(deps))
	for _, d := range deps {
		if _, err := queue.ParseDependencyType(string(d.Type)); err != nil {
			return &BadRequest{Field: "after", Text: err.Error()}
		}
		if d.ID == "" || len(d.ID) > 64 || strings.ContainsAny(d.ID, " \t\r\n:/,") {
			return &BadRequest{Field: "after", Text: fmt.Sprintf("%q is not a job id; give ids such as j-000012", d.ID)}
		}
		if seen[d] {
			return &BadRequest{Field: "after", Text: d.String() + " is named twice"}
		}
		seen[d] = true
	}
	for _, d := range deps {
		owner, err := q.dependedOwner(ctx, d.ID)
		if err != nil {
			return err
		}
		if owner != user && !admin {
			return &BadRequest{Field: "after", Text: fmt.Sprintf("%s is not %s's job; a job may wait only for its submitter's own jobs (admins for anyone's)", d.ID, user)}
		}
	}
	return nil
}

// dependedOwner is the user of the job or array id names; an id the
// store has neither as a job nor as an array is a *BadRequest.
func (q *Service) dependedOwner(ctx context.Context, id string) (string, error) {
	tasks, err := q.store.Jobs(ctx, ledger.JobFilter{ArrayID: id, IncludeEnded: true, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(tasks) > 0 {
		return tasks[0].User, nil
	}
	j, err := q.store.Job(ctx, id)
	if errors.Is(err, ledger.ErrJobNotFound) {
		return "", &BadRequest{Field: "after", Text: fmt.Sprintf("no job or array %s is known to the queue; a job may wait only for jobs submitted before it", id)}
	}
	if err != nil {
		return "", err
	}
	return j.User, nil
}

// depCache keeps what the launcher knows of the ended jobs and arrays
// the queued jobs depend on, so that a pass over many waiting jobs reads
// no job from the store that it read before: ended jobs never change.
// jobEnded feeds it (from the service's goroutines too, hence the lock);
// each pass prunes it to the ids its queued jobs name.
type depCache struct {
	mu sync.Mutex
	// wanted are the ids the queued jobs of the last pass named.
	wanted map[string]bool
	// jobs are the ended jobs wanted.
	jobs map[string]endedJob
	// arrays are the arrays wanted, as last read whole from the store
	// and kept up since by jobEnded.
	arrays map[string]*endedTasks
}

// endedTasks are an array's size and its ended tasks' states.
type endedTasks struct {
	count int
	ended map[string]queue.State
}

type endedJob struct {
	state  queue.State
	reason queue.Reason
}

func newDepCache() *depCache {
	return &depCache{wanted: map[string]bool{}, jobs: map[string]endedJob{}, arrays: map[string]*endedTasks{}}
}

// ended notes job j's end when a queued job waits for it, or for its
// array.
func (c *depCache) ended(j queue.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wanted[j.ID] {
		c.jobs[j.ID] = endedJob{state: j.State, reason: j.Reason}
	}
	if a := arrayOf(j); a != "" {
		if tasks, ok := c.arrays[a]; ok {
			tasks.ended[j.ID] = j.State
		}
	}
}

func (c *depCache) job(id string) (endedJob, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.jobs[id]
	return e, ok
}

// array returns array id's size and a copy of the ended tasks kept of
// it.
func (c *depCache) array(id string) (int, map[string]queue.State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tasks, ok := c.arrays[id]
	if !ok {
		return 0, nil, false
	}
	out := make(map[string]queue.State, len(tasks.ended))
	for k, v := range tasks.ended {
		out[k] = v
	}
	return tasks.count, out, true
}

func (c *depCache) putJob(id string, e endedJob) {
	c.mu.Lock()
	c.jobs[id] = e
	c.mu.Unlock()
}

func (c *depCache) putArray(id string, count int, ended map[string]queue.State) {
	c.mu.Lock()
	c.arrays[id] = &endedTasks{count: count, ended: ended}
	c.mu.Unlock()
}

// keep makes wanted the ids named, and forgets the rest.
func (c *depCache) keep(wanted map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wanted = wanted
	for id := range c.jobs {
		if !wanted[id] {
			delete(c.jobs, id)
		}
	}
	for id := range c.arrays {
		if !wanted[id] {
			delete(c.arrays, id)
		}
	}
}

// arrayOf is the array job j is a task of, "" for none.
func arrayOf(j queue.Job) string {
	if j.Request != nil && j.Request.Array != nil {
		return j.Request.Array.ID
	}
	return ""
}

// depLookups is the most jobs or arrays one pass reads from the store
// one by one; past it, the pass reads the ended jobs in one query.
const depLookups = 16

// dependencies takes the queued jobs whose dependencies are not met out
// of queued, with a wait of reason dependency for each, and fails those
// whose dependencies can no longer be met. A held job whose dependencies
// are not met stays with the scheduler, which says it is held. Live jobs
// are what the pass read (live); ended ones come from the cache, and
// those it lacks from at most one store read per pass, or a few reads
// of one job each. retry says that the store could not be read, and
// the pass is to be made again soon.
func (q *Launcher) dependencies(ctx context.Context, queued []queue.QueuedJob, live map[string]queue.Job) (_ []queue.QueuedJob, _ []queue.Wait, retry bool) {
	var dependent []queue.Job
	wanted := map[string]bool{}
	for _, qj := range queued {
		j := live[qj.ID]
		if j.Request == nil || len(j.Request.After) == 0 {
			continue
		}
		dependent = append(dependent, j)
		for _, d := range j.Request.After {
			wanted[d.ID] = true
		}
	}
	q.deps.keep(wanted)
	if len(dependent) == 0 {
		return queued, nil, false
	}
	// The live tasks of the arrays named, and each array's size.
	liveTasks := map[string]map[string]queue.State{}
	counts := map[string]int{}
	for _, j := range live {
		a := arrayOf(j)
		if a == "" || !wanted[a] {
			continue
		}
		if liveTasks[a] == nil {
			liveTasks[a] = map[string]queue.State{}
		}
		liveTasks[a][j.ID] = j.State
		counts[a] = max(counts[a], j.Request.Array.Count)
	}
	r := &depResolver{q: q, live: live, liveTasks: liveTasks, counts: counts, read: map[string]queue.DependedJob{}}
	out := queued[:0:0]
	var waits []queue.Wait
	if err := r.prefetch(ctx, wanted); err != nil {
		// Nothing is decided on what could not be read: the dependent
		// jobs wait, and a later pass looks again.
		if ctx.Err() == nil {
			q.log.Warn("read the jobs queued jobs depend on", "err", err)
		}
		for _, qj := range queued {
			j := live[qj.ID]
			if j.Request == nil || len(j.Request.After) == 0 || qj.Held {
				out = append(out, qj)
				continue
			}
			waits = append(waits, queue.DependencyWait(qj.ID, "waiting for the jobs it depends on (--after): the queue's database could not be read; it looks again shortly"))
		}
		return out, waits, true
	}
	verdict := map[string]queue.DependencyCheck{}
	failed := false
	for _, j := range dependent {
		c := queue.CheckDependencies(j.Request.After, r.look)
		verdict[j.ID] = c
		if c.Status == queue.DependencyNever {
			q.failDependent(ctx, j, c.Text)
			failed = true
		}
	}
	for _, qj := range queued {
		c, ok := verdict[qj.ID]
		switch {
		case !ok || c.Status == queue.DependencyMet:
			out = append(out, qj)
		case c.Status == queue.DependencyNever:
		case qj.Held:
			out = append(out, qj) // it says held; it starts neither way
		default:
			waits = append(waits, queue.DependencyWait(qj.ID, c.Text))
		}
	}
	if failed {
		// A job waiting for one that failed here learns it next pass.
		q.poke()
	}
	return out, waits, false
}

// failDependent ends queued job j failed: a job it depends on can no
// longer meet its condition.
func (q *Launcher) failDependent(ctx context.Context, j queue.Job, text string) {
	out, err := q.update(ctx, j.ID, queue.Queued, queue.Failed, func(j *queue.Job) {
		j.Reason, j.ReasonText, j.EndedAt, j.GPUs = queue.ReasonDependencyNeverSatisfied, text, q.now().UTC(), nil
	}, q.queueEvent("jobs.fail", j.ID))
	var se *ledger.JobStateError
	if errors.As(err, &se) {
		return // cancelled or started meanwhile
	}
	if err != nil {
		q.log.Error("fail a job whose dependency can no longer be met", "job", j.ID, "err", err)
		return
	}
	q.jobEnded(out)
}

// depResolver finds the jobs and arrays one pass's dependencies name.
type depResolver struct {
	q         *Launcher
	live      map[string]queue.Job
	liveTasks map[string]map[string]queue.State
	counts    map[string]int
	// read are the ids the pass looked up in the store, as found.
	read map[string]queue.DependedJob
}

// look is what CheckDependencies asks of an id.
func (r *depResolver) look(id string) queue.DependedJob {
	if dj, ok := r.read[id]; ok {
		return dj
	}
	if dj, ok := r.fromMemory(id); ok {
		return dj
	}
	// Not reached: dependencies prefetched every id or was not asked.
	return queue.DependedJob{Known: true, State: queue.Queued}
}

// fromMemory is id as the pass and the cache know it, when they know it
// whole.
func (r *depResolver) fromMemory(id string) (queue.DependedJob, bool) {
	if j, ok := r.live[id]; ok {
		return queue.DependedJob{Known: true, State: j.State, Reason: j.Reason}, true
	}
	if e, ok := r.q.deps.job(id); ok {
		return queue.DependedJob{Known: true, State: e.state, Reason: e.reason}, true
	}
	count, tasks, cached := r.q.deps.array(id)
	if !cached {
		return queue.DependedJob{}, false
	}
	for k, v := range r.liveTasks[id] {
		tasks[k] = v
	}
	count = max(count, r.counts[id])
	if len(tasks) < count {
		return queue.DependedJob{}, false // a task is neither live nor known ended: read again
	}
	return queue.DependedJob{Known: true, Tasks: tasks, Count: count}, true
}

// prefetch reads from the store the ids wanted that memory does not
// know: one by one up to depLookups, else the ended jobs in one read.
func (r *depResolver) prefetch(ctx context.Context, wanted map[string]bool) error {
	var unknown []string
	for id := range wanted {
		if _, ok := r.fromMemory(id); !ok {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	if len(unknown) > depLookups {
		return r.readAll(ctx, unknown)
	}
	for _, id := range unknown {
		if err := r.readOne(ctx, id); err != nil {
			return fmt.Errorf("read job %s: %w", id, err)
		}
	}
	return nil
}

// readOne reads id from the store: an array's tasks, or a job.
func (r *depResolver) readOne(ctx context.Context, id string) error {
	tasks, err := r.q.store.Jobs(ctx, ledger.JobFilter{ArrayID: id, IncludeEnded: true})
	if err != nil {
		return err
	}
	if len(tasks) > 0 {
		r.array(id, tasks)
		return nil
	}
	j, err := r.q.store.Job(ctx, id)
	if errors.Is(err, ledger.ErrJobNotFound) {
		r.read[id] = queue.DependedJob{}
		return nil
	}
	if err != nil {
		return err
	}
	r.job(j)
	return nil
}

// readAll reads every ended job once and finds the ids in it.
func (r *depResolver) readAll(ctx context.Context, ids []string) error {
	js, err := r.q.store.Jobs(ctx, ledger.JobFilter{States: queue.EndedStates(), IncludeEnded: true})
	if err != nil {
		return fmt.Errorf("read the ended jobs: %w", err)
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	byArray := map[string][]queue.Job{}
	for _, j := range js {
		if want[j.ID] {
			r.job(j)
		}
		if a := arrayOf(j); want[a] {
			byArray[a] = append(byArray[a], j)
		}
	}
	for _, id := range ids {
		if _, ok := r.read[id]; ok {
			continue
		}
		if tasks := byArray[id]; len(tasks) > 0 || len(r.liveTasks[id]) > 0 {
			r.array(id, tasks)
			continue
		}
		r.read[id] = queue.DependedJob{} // neither live nor ended: unknown
	}
	return nil
}

// job records job j as read.
func (r *depResolver) job(j queue.Job) {
	if j.State.Ended() {
		r.q.deps.putJob(j.ID, endedJob{state: j.State, reason: j.Reason})
	}
	r.read[j.ID] = queue.DependedJob{Known: true, State: j.State, Reason: j.Reason}
}

// array records the tasks of array id as read: the ended ones are
// cached, the live ones are as the pass saw them (or as read, for one
// that went live after the pass's read).
func (r *depResolver) array(id string, tasks []queue.Job) {
	ended := map[string]queue.State{}
	all := map[string]queue.State{}
	count := r.counts[id]
	for _, t := range tasks {
		all[t.ID] = t.State
		if t.State.Ended() {
			ended[t.ID] = t.State
		}
		if a := t.Request; a != nil && a.Array != nil {
			count = max(count, a.Array.Count)
		}
	}
	for k, v := range r.liveTasks[id] {
		all[k] = v
	}
	// Fewer rows than the array says it has: the rows are what counts.
	count = min(count, len(all))
	r.q.deps.putArray(id, count, ended)
	r.read[id] = queue.DependedJob{Known: true, Tasks: all, Count: count}
}
