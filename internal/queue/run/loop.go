package run

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/retry"
)

// retryAfter is how long a job whose start failed waits, times its
// attempts, before it is tried again: a Docker error seldom passes at once.
const retryAfter = 2 * time.Second

// faultRetry is how soon the loop tries again what the store or the
// engine could not take: pending ends, a reconciliation.
const faultRetry = time.Second

// engineBackoff spaces the pings of an engine that went away.
var engineBackoff = retry.Backoff{Initial: 250 * time.Millisecond, Max: 5 * time.Second}

// live are the states a pass loads; following, those a fleet's agent
// loads while another agent schedules.
var (
	live      = []queue.State{queue.Queued, queue.Starting, queue.Running, queue.Lost}
	following = []queue.State{queue.Starting, queue.Running, queue.Lost}
)

// loop is the state only Run's goroutine touches.
type loop struct {
	stopped    chan string // containers a Stop call returned for
	stops      sync.WaitGroup
	retention  map[string]time.Time // container id -> when to remove it
	retryAt    map[string]time.Time // job id -> no start before
	reconciled bool

	// engineDown is set when a call found the engine unavailable; the
	// loop then starts nothing and pings it at pingAt, with backoff,
	// until it answers, and reconciles then. lostEngine says that the
	// engine went away since the last reconciliation, so that a job
	// container it killed meanwhile is told from one that failed.
	engineDown bool
	lostEngine bool
	pingAt     time.Time
	ping       retry.Backoff
	// unsure are the starting jobs whose start the engine may or may not
	// have made when it went away; the reconciliation settles them.
	unsure map[string]bool
	// stale are job containers of earlier runs that the engine killed and
	// that could not be removed yet: job id -> container id.
	stale map[string]string
	// pendingEnds are exits seen that the store could not take yet:
	// container id -> the container as the engine reported it.
	pendingEnds map[string]container.JobContainer
	// killChecks are exits by a signal that wait for their verdict, by
	// container id; killVerdict marks those found the job's own.
	killChecks  map[string]killCheck
	killVerdict map[string]bool
	// trace times the pass under way, for the start trace.
	trace passTrace
}

// Run reconciles the store with the engine's job containers, then runs
// the event loop until ctx ends, and returns nil then, once every stop it
// began has returned. Without an Engine it returns at once. A pass runs on
// every event: a submission, a cancel, a release, a job container's
// death, an Observation that changed, a time limit, a log's retention;
// never on a poll.
func (q *Launcher) Run(ctx context.Context) error {
	if q.engine == nil {
		return nil
	}
	l := &loop{stopped: make(chan string, 16), retention: map[string]time.Time{}, retryAt: map[string]time.Time{},
		ping: engineBackoff, unsure: map[string]bool{}, stale: map[string]string{}, pendingEnds: map[string]container.JobContainer{},
		killChecks: map[string]killCheck{}, killVerdict: map[string]bool{}}
	defer l.stops.Wait()
	evs := q.engine.Events(ctx) // before the reconciliation, so no death is missed
	var wakes ledger.FleetWakes // nil channels, which never receive, on one node
	if q.fleet != nil {
		wakes = q.fleet.Store.Listen(ctx)
	}
	q.env.cleanTemps(time.Hour)
	q.countEnded(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if l.engineDown && !q.now().Before(l.pingAt) {
			q.pingEngine(ctx, l)
		}
		q.applyPendingEnds(ctx, l)
		killDue := q.applyKillChecks(ctx, l)
		if !l.reconciled && !l.engineDown {
			if err := q.reconcile(ctx, l); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				q.log.Error("reconcile the queue's jobs with their containers", "err", err)
				if errors.Is(err, container.ErrUnavailable) {
					q.engineLost(l, err)
				}
			} else {
				l.reconciled, l.lostEngine = true, false
			}
		}
		next := q.pass(ctx, l)
		if !l.reconciled || len(l.pendingEnds) > 0 {
			next = minTime(next, q.now().Add(faultRetry))
		}
		if l.engineDown {
			next = minTime(next, l.pingAt)
		}
		next = minTime(next, killDue)
		timer.Reset(untilOrHour(next, q.now()))
		passed := q.now()
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-q.wake:
				if q.spaced(passed, &next, timer) {
					continue wait
				}
			case <-wakes.Intents:
			case <-wakes.Queue:
				if q.fleet.token == 0 {
					// Only the scheduler acts on the queue's changes;
					// the others wait on.
					continue wait
				}
				if q.spaced(passed, &next, timer) {
					continue wait
				}
			case <-timer.C:
			case id := <-l.stopped:
				q.died(ctx, l, id)
			case id, ok := <-evs:
				evs = q.engineEvent(ctx, l, evs, id, ok)
			}
			break
		}
		// A burst (a hundred deaths, a stream of submissions) makes one
		// pass: take whatever else is already waiting first.
		for drained := false; !drained; {
			select {
			case <-q.wake:
			case <-wakes.Intents:
			case <-wakes.Queue:
			case id := <-l.stopped:
				q.died(ctx, l, id)
			case id, ok := <-evs:
				evs = q.engineEvent(ctx, l, evs, id, ok)
			default:
				drained = true
			}
		}
	}
}

// queuePassGap is the least time between the fleet scheduler's passes
// that the queue's changes alone ask for: a burst of submissions (each a
// NOTIFY) makes a pass every queuePassGap, not one per submission, and a
// change after a quiet spell is passed on at once.
const queuePassGap = 100 * time.Millisecond

// spaced reports whether a wake-up for the queue's changes comes too soon
// after the pass that ended at passed, in a fleet: the loop then waits
// on, with its timer (next) brought forward to queuePassGap after that
// pass. One host passes at once, as it always has.
func (q *Launcher) spaced(passed time.Time, next *time.Time, timer *time.Timer) bool {
	if q.fleet == nil {
		return false
	}
	due := passed.Add(queuePassGap)
	now := q.now()
	if !now.Before(due) {
		return false
	}
	if next.IsZero() || due.Before(*next) {
		*next = due
		timer.Reset(due.Sub(now))
	}
	return true
}

// engineEvent takes one event of the engine's stream and returns the
// stream, nil once it closed.
func (q *Launcher) engineEvent(ctx context.Context, l *loop, evs <-chan string, id string, ok bool) <-chan string {
	switch {
	case !ok:
		return nil
	case id == "":
		// The stream was down: look at everything again, knowing that
		// the engine may have killed job containers meanwhile.
		l.reconciled, l.lostEngine = false, true
	default:
		l.trace.dieSeen(q.now())
		q.died(ctx, l, id)
	}
	return evs
}

// engineLost notes that the engine did not answer a call: the loop
// starts nothing until a ping of it answers.
func (q *Launcher) engineLost(l *loop, err error) {
	if !l.engineDown {
		q.log.Warn("the Docker engine is unavailable; starting no job until it answers", "err", err)
		l.engineDown, l.lostEngine = true, true
		l.ping.Reset()
	}
	l.reconciled = false
	l.pingAt = q.now().Add(l.ping.Next())
}

// pingEngine pings an engine that went away; once it answers, the loop
// reconciles its jobs with their containers (deaths were missed
// meanwhile) and starts jobs again.
func (q *Launcher) pingEngine(ctx context.Context, l *loop) {
	if err := q.engine.Ping(ctx); err != nil {
		l.pingAt = q.now().Add(l.ping.Next())
		return
	}
	q.log.Info("the Docker engine answers again; reconciling the queue's jobs")
	l.engineDown, l.reconciled = false, false
}

// countEnded loads the number of jobs in each ended state, once.
func (q *Launcher) countEnded(ctx context.Context) {
	js, err := q.store.Jobs(ctx, ledger.JobFilter{States: queue.EndedStates(), IncludeEnded: true})
	if err != nil {
		q.log.Warn("count the ended jobs for metrics", "err", err)
		return
	}
	// In a fleet, each agent counts the jobs that ended on its node.
	js = slices.DeleteFunc(js, func(j queue.Job) bool { return !q.mine(j) })
	q.metrics.countEnded(js)
}

// pass makes one scheduling pass and returns when the next timer is due
// (zero: none).
func (q *Launcher) pass(ctx context.Context, l *loop) time.Time {
	l.trace.passBegan(q.now())
	defer l.trace.passEnded()
	states, leader := live, false
	if q.fleet != nil {
		// In a fleet only the scheduler needs the queued jobs; another
		// agent reads them only while a stop it was asked for may find
		// one of its own back in the queue.
		var err error
		if leader, err = q.lead(ctx); err != nil {
			q.fence(ctx, l)
			return q.now().Add(faultRetry)
		}
		if !leader && !q.stops.any() {
			states = following
		}
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if q.fleet != nil {
		actx, cancel = q.fleet.call(ctx)
	}
	jobs, err := q.store.ActiveJobs(actx, states...)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			q.log.Error("load the queue's jobs", "err", err)
		}
		if q.fleet != nil {
			q.fence(ctx, l)
		}
		return q.now().Add(faultRetry)
	}
	now := q.now()
	var next time.Time
	obs, cfg := q.settings.forPass()
	if f := q.fleet; f != nil {
		f.lastOK, f.fenced = now, false
		q.register(ctx, obs, cfg)
	}

	cfg.SharedGPUs = resolveShared(cfg.SharedGPUs, obs.GPUs)
	in := queue.Input{GPUs: obs.GPUs, Outside: obs.Outside, Config: cfg, Now: now, Util: obs.Util}
	memJobs := memoryJobs{}
	byID := make(map[string]queue.Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
		switch j.State {
		case queue.Lost:
			if q.mine(j) || leader {
				q.resolveLost(ctx, j)
			}
		case queue.Queued:
			if s := q.stops.pending(j.ID); s != nil {
				q.cancelQueued(ctx, j, s)
				continue
			}
			if q.fleet != nil && !leader {
				continue
			}
			ri := info(j)
			array, arrayMax := arrayCap(j)
			in.Queued = append(in.Queued, queue.QueuedJob{ID: j.ID, User: j.User, Team: j.Team, GPUs: j.GPUsRequested, SubmittedAt: j.SubmittedAt, Held: j.Held,
				GPUMemory: ri.memory, Class: ri.class, TimeLimit: j.TimeLimit, Array: array, ArrayMax: arrayMax, Node: ri.node, Model: ri.model,
				Image: j.Image})
		case queue.Starting, queue.Running:
			in.Running = append(in.Running, queue.RunningJob{ID: j.ID, User: j.User, Team: j.Team, GPUs: j.GPUs, StartedAt: j.StartedAt, TimeLimit: j.TimeLimit,
				GPUMemory: info(j).memory, Array: arrayOf(j), Node: j.Node})
			if j.State == queue.Running && q.mine(j) {
				next = minTime(next, q.enforce(ctx, l, j, now))
				if mem := info(j).memory; mem > 0 {
					memJobs[j.ID] = mem
					next = minTime(next, q.memory.enforce(ctx, j, mem, now))
				}
			}
		}
	}
	var depWaits []queue.Wait
	var depRetry bool
	in.Queued, depWaits, depRetry = q.dependencies(ctx, in.Queued, byID)
	if depRetry {
		next = minTime(next, now.Add(faultRetry))
	}
	if q.standing != nil && len(in.Queued) > 0 {
		users, teams := owners(in.Queued)
		in.FairShare, in.Expected, in.OverBudget = q.standing(ctx, users, teams)
	}
	preemptInput(&in, byID)
	var plan queue.Plan
	if q.fleet != nil {
		var due time.Time
		plan, due = q.fleetPass(ctx, l, leader, in, byID)
		next = minTime(next, due)
		next = minTime(next, q.preempt(ctx, l, plan, byID))
		if now.Sub(q.fleet.reconciled) >= fleetReconcile {
			q.fleet.reconciled = now
			l.reconciled = false
			next = minTime(next, now.Add(faultRetry))
		}
	} else {
		plan = queue.Schedule(in)
		next = minTime(next, q.preempt(ctx, l, plan, byID))
	}
	plan.Waits = append(plan.Waits, depWaits...)
	for _, s := range plan.Starts {
		if q.fleet != nil {
			break // written as intents; the nodes start them
		}
		if l.engineDown {
			// Nothing starts while the engine is away; the job says why.
			plan.Waits = append(plan.Waits, queue.Wait{JobID: s.JobID, Reason: queue.ReasonEngineUnavailable})
			continue
		}
		if at, ok := l.retryAt[s.JobID]; ok && now.Before(at) {
			next = minTime(next, at)
			continue
		}
		delete(l.retryAt, s.JobID)
		next = minTime(next, q.start(ctx, l, byID[s.JobID], s.GPUs, s.Placement))
		if mem := info(byID[s.JobID]).memory; mem > 0 {
			memJobs[s.JobID] = mem // watched from the next tick
		}
	}
	q.memory.setJobs(memJobs)
	// A start that failed in this pass waits for its retry time, and the
	// timer must cover it: nothing else may wake the loop.
	for id, at := range l.retryAt {
		if _, live := byID[id]; !live || !now.Before(at) {
			delete(l.retryAt, id) // ended, or due: it holds back no start
			continue
		}
		next = minTime(next, at)
	}
	// Why each job waits is kept in memory, never written per pass: the
	// readers take it from the ranking (Service.Job and Jobs). In a
	// fleet the scheduler's ranking is every agent's.
	if q.fleet != nil {
		next = minTime(next, q.shareRanks(ctx, leader, plan))
	} else {
		q.ranks.set(plan)
	}
	for cid, at := range l.retention {
		if !now.Before(at) && !l.engineDown {
			if err := q.engine.Remove(ctx, cid); err != nil {
				q.log.Warn("remove an ended job's container", "container", cid, "err", err)
				continue
			}
			delete(l.retention, cid)
			continue
		}
		next = minTime(next, at)
	}
	// The ended jobs' environment values kept for requeue expire with
	// their containers.
	next = minTime(next, q.env.sweep())
	q.updateSnapshot(ctx, obs, cfg, jobs)
	return next
}

// enforce asks for the stops a running job is due: a cancel or a time
// limit. It returns when its time limit is due, or zero.
func (q *Launcher) enforce(ctx context.Context, l *loop, j queue.Job, now time.Time) time.Time {
	var due time.Time
	if j.TimeLimit > 0 && !j.StartedAt.IsZero() {
		due = j.StartedAt.Add(j.TimeLimit)
		if !now.Before(due) {
			q.stops.ask(j.ID, &stop{state: queue.Timeout, reason: queue.ReasonTimeLimit,
				text:  "reached its time limit of " + formatLimit(j.TimeLimit) + " and was stopped",
				audit: q.fill(audit.Event{Caller: "queue", Outcome: "allowed"}, "jobs.timeout", j.ID)})
			due = time.Time{}
		}
	}
	s, send := q.stops.toSend(j.ID, j.ContainerID != "" && !l.engineDown)
	if send {
		q.sendStop(ctx, l, j.ContainerID, s)
		return time.Time{}
	}
	if s != nil {
		return time.Time{}
	}
	return due
}

// sendStop stops a container without holding up the loop; once Stop
// returns, the loop looks at the container as at a death.
func (q *Launcher) sendStop(ctx context.Context, l *loop, cid string, s *stop) {
	l.stops.Add(1)
	go func() {
		defer l.stops.Done()
		grace := q.stopGrace
		if s.grace > 0 {
			grace = s.grace
		}
		if err := q.engine.Stop(ctx, cid, grace); err != nil && ctx.Err() == nil {
			q.log.Warn("stop a job's container", "container", cid, "err", err)
			if errors.Is(err, container.ErrUnavailable) {
				// Sent again by a pass once the engine answers.
				q.stops.unsent(s)
			}
		}
		select {
		case l.stopped <- cid:
		case <-ctx.Done():
		}
	}()
}

// cancelQueued ends a queued job a cancel was asked for while it was
// starting (its start failed, and it went back to the queue).
func (q *Launcher) cancelQueued(ctx context.Context, j queue.Job, s *stop) {
	out, err := q.update(ctx, j.ID, queue.Queued, s.state, func(j *queue.Job) {
		j.Reason, j.ReasonText, j.EndedAt, j.GPUs = s.reason, s.text, q.now().UTC(), nil
	}, s.audit)
	if err != nil {
		q.log.Warn("cancel a job back in the queue", "job", j.ID, "err", err)
		return
	}
	q.jobEnded(out)
}

// updateSnapshot recounts the jobs and GPUs for metrics.
//
// Only the jobs that hold GPUs are read again, a few rows: the queued and
// lost ones are counted from what the pass read (passed), less those it
// started, so that a deep queue is read once a pass, not twice.
func (q *Launcher) updateSnapshot(ctx context.Context, obs Observation, cfg queue.Config, passed []queue.Job) {
	holding, err := q.store.ActiveJobs(ctx, queue.Starting, queue.Running)
	if err != nil {
		return
	}
	s := emptySnapshot()
	held := map[string]bool{}
	placed := make(map[string]bool, len(holding))
	// In a fleet an agent counts the jobs that hold its node's GPUs, and
	// the scheduler alone the queued and lost ones, so that a sum over
	// the agents counts each job once.
	for _, j := range holding {
		placed[j.ID] = true
		if !q.mine(j) {
			continue
		}
		s.Jobs[j.State]++
		for _, g := range j.GPUs {
			held[g] = true
		}
	}
	for _, j := range passed {
		if q.fleet != nil && q.fleet.token == 0 {
			break
		}
		if (j.State == queue.Queued || j.State == queue.Lost) && !placed[j.ID] {
			s.Jobs[j.State]++
		}
	}
	outside := map[string]bool{}
	for _, c := range obs.Outside.Containers {
		for _, g := range c.GPUs {
			outside[g] = true
		}
	}
	threshold := cfg.OutsideMemoryThreshold
	if threshold <= 0 {
		threshold = queue.DefaultOutsideMemoryThreshold
	}
	for _, g := range obs.GPUs {
		switch {
		case held[g.UUID]:
			s.GPUsHeld++
		case outside[g.UUID] || float64(obs.Outside.MemoryUsed[g.UUID]) > threshold*float64(g.MemoryTotal):
			s.GPUsOutside++
		default:
			s.GPUsFree++
		}
	}
	q.metrics.set(s)
}

func minTime(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// untilOrHour is how long to wait for t: an hour at most, for a zero t
// too, so that a clock jump is never waited out for long.
func untilOrHour(t, now time.Time) time.Duration {
	if t.IsZero() {
		return time.Hour
	}
	return min(max(t.Sub(now), time.Millisecond), time.Hour)
}

// owners are the users and teams of the queued jobs, each once.
func owners(js []queue.QueuedJob) (users, teams []string) {
	seenU, seenT := map[string]bool{}, map[string]bool{}
	for _, j := range js {
		if !seenU[j.User] {
			seenU[j.User] = true
			users = append(users, j.User)
		}
		if j.Team != "" && !seenT[j.Team] {
			seenT[j.Team] = true
			teams = append(teams, j.Team)
		}
	}
	return users, teams
}
