package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// The fleet (queue.fleet): every agent of a ledger many nodes share
// registers its node and starts only its own node's jobs; the one agent
// that holds the scheduler lease runs the pass over every node's GPUs and
// writes start intents under the lease's fencing token; each node claims
// the intents that name it and launches them as its own starts. Nothing
// else changes: the job states, the reconciliation and the container
// specs are a single node's.

// DefaultFleetPoll is how often an agent of a fleet looks for intents and,
// as the scheduler, makes a pass, when nothing woke it sooner.
const DefaultFleetPoll = 2 * time.Second

// fleetReconcile is how often an agent of a fleet reconciles its job
// containers with the ledger even when its engine's events never broke:
// the fleet's scheduler may have requeued its jobs while the agent could
// not reach the ledger.
const fleetReconcile = 30 * time.Second

// FleetConfig makes the queue one node of a fleet.
type FleetConfig struct {
	Store ledger.Fleet
	// Instance is the agent's node-lease instance; it names the agent
	// as the scheduler and as the claimer of its intents.
	Instance string
	// Takeover is ledger.lease_takeover: a node whose lease is silent
	// for longer is lost, and so is a scheduler.
	Takeover time.Duration
	// Poll is how often the loop looks for intents and passes when
	// nothing woke it; 0: DefaultFleetPoll.
	Poll time.Duration
	// AgentVersion, API and Images go into the node's registration.
	AgentVersion string
	API          string
	Images       []string
}

// fleetState is the loop's part of the fleet.
type fleetState struct {
	FleetConfig
	// token is the scheduler lease's fencing token while this agent
	// holds it, 0 otherwise.
	token int64
	// registered is when the node last registered, and regKey what.
	registered time.Time
	regKey     string
	// reconciled is when the loop last reconciled; lastOK is when the
	// store last answered a pass.
	reconciled, lastOK time.Time
	// fenced is set once the agent stopped its jobs for having been
	// out of the ledger's reach for too long (see fence).
	fenced bool
	// takeable is when another agent's scheduler lease may be taken
	// over, as the latest try to take it saw; zero when this agent holds
	// it or the try failed otherwise.
	takeable time.Time
	// published is the ranking this agent last published as the
	// scheduler (encoded), publishedOrder its part without priorities,
	// packedLen its size packed, publishedAt when and pubToken under
	// which token (a new lease publishes even an unchanged ranking);
	// ranksVersion is the version of the fleet's ranking the queue's
	// ranks hold.
	published      []byte
	publishedOrder []byte
	packedLen      int
	publishedAt    time.Time
	pubToken       int64
	ranksVersion   int64
}

// leaderClaims is how many of its own node's intents the scheduler
// claims and starts in one pass.
const leaderClaims = 2

// How often the scheduler publishes its ranking (see shareRanks): the
// other agents' answers lag it by as much. publishRate, in bytes a
// second, spaces the writes of a deep queue's ranking (10,000 jobs pack
// to about 170 kB: one every 5.2 s), so that the database's write-ahead
// log does not take a ranking a second.
const (
	publishEvery = time.Second
	refreshEvery = 30 * time.Second
	publishRate  = 32 << 10
)

// takeoverMargin is how long after a held lease may be taken over the
// loop tries: the lease is taken only once it has been silent for longer
// than the takeover time, by the database's clock.
const takeoverMargin = 50 * time.Millisecond

// registerEvery is how often a node registers when nothing changed, so
// that its GPUs' utilisation reaches the scheduler.
const registerEvery = 10 * time.Second

// register writes the node's registration from what the latest tick saw,
// when it changed or registerEvery has passed.
func (q *Launcher) register(ctx context.Context, obs Observation, cfg queue.Config) {
	f := q.fleet
	shared := resolveShared(cfg.SharedGPUs, obs.GPUs)
	n := ledger.NodeInfo{Node: q.node, AgentVersion: f.AgentVersion, API: f.API, Images: f.Images}
	outside := map[string]string{}
	for _, c := range obs.Outside.Containers {
		for _, g := range c.GPUs {
			outside[g] = c.Name
		}
	}
	for _, g := range obs.GPUs {
		n.GPUs = append(n.GPUs, ledger.NodeGPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryBytes: g.MemoryTotal,
			NVLink: g.NVLink, PCIeSwitch: g.PCIeSwitch, Shared: slices.Contains(shared, g.UUID), Util: obs.Util[g.UUID],
			MemoryUsedOutside: obs.Outside.MemoryUsed[g.UUID], OutsideContainer: outside[g.UUID]})
	}
	key := fmt.Sprint(n)
	now := q.now()
	if key == f.regKey && now.Sub(f.registered) < registerEvery {
		return
	}
	cctx, cancel := f.call(ctx)
	defer cancel()
	if err := f.Store.RegisterNode(cctx, n); err != nil {
		if ctx.Err() == nil {
			q.log.Warn("register the node with the fleet", "err", err)
		}
		return
	}
	f.registered, f.regKey = now, key
}

// lead takes or renews the scheduler lease, and reports whether this
// agent holds it; err is set when the ledger did not answer (another
// agent holding the lease is no error). When another agent holds it,
// f.takeable is when its lease may be taken over: the loop tries again
// then, rather than at its next poll, so that a dead scheduler is
// replaced within the takeover time and not up to a poll later.
func (q *Launcher) lead(ctx context.Context) (leader bool, err error) {
	f := q.fleet
	f.takeable = time.Time{}
	cctx, cancel := f.call(ctx)
	lease, err := f.Store.AcquireScheduler(cctx, f.Instance, q.node, f.Takeover)
	cancel()
	if err != nil {
		var held *ledger.SchedulerHeldError
		if errors.As(err, &held) {
			f.takeable = q.now().Add(f.Takeover - held.Silent + takeoverMargin)
		} else if ctx.Err() == nil {
			q.log.Warn("take the fleet's scheduler lease", "err", err)
		}
		if f.token != 0 {
			q.log.Info("no longer the fleet's scheduler", "err", err)
		}
		f.token = 0
		q.setLeading(false)
		if errors.As(err, &held) {
			err = nil // another agent schedules: nothing is wrong
		}
		return false, err
	}
	if f.token != lease.Token {
		q.log.Info("now the fleet's scheduler", "token", lease.Token)
	}
	f.token = lease.Token
	q.setLeading(true)
	return true, nil
}

// fleetPass is the fleet's part of a pass: as the scheduler (leader: the
// pass began by taking or renewing the lease), it loses the
// jobs of lost nodes, schedules every node's GPUs and writes the starts
// as intents; then it launches the intents that name this node. in holds
// the queued and running jobs the pass read, with the dependencies and
// the fair share applied. It returns the plan the scheduler made (empty
// on any other agent) and when the next pass is due.
func (q *Launcher) fleetPass(ctx context.Context, l *loop, leader bool, in queue.Input, byID map[string]queue.Job) (queue.Plan, time.Time) {
	f := q.fleet
	now := q.now()
	next := now.Add(cmpPoll(f.Poll))
	var plan queue.Plan
	if leader {
		plan = q.schedulePass(ctx, in, byID)
	}
	next = minTime(next, f.takeable)
	if l.engineDown {
		return plan, next
	}
	limit := 0
	if leader {
		// The scheduler's own starts come a few at a time, with a pass
		// between: the fleet's other nodes wait for the pass, not for
		// this node's containers.
		limit = leaderClaims
	}
	cctx, cancel := f.call(ctx)
	claimed, err := f.Store.ClaimIntents(cctx, q.node, f.Instance, limit)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			q.log.Warn("claim this node's start intents", "err", err)
		}
		return plan, next
	}
	if limit > 0 && len(claimed) == limit {
		next = now // more may wait: the next pass is due at once
	}
	renewed := q.now()
	for _, j := range claimed {
		if leader && q.now().Sub(renewed) > f.Takeover/4 {
			// Many starts take a while: the scheduler renews its lease
			// between them, so that it is not taken for dead.
			if leader, _ = q.lead(ctx); leader {
				renewed = q.now()
			}
		}
		tr := l.trace.start()
		tr.mark(q.now())
		if j.Held {
			// Held after the scheduler read it: it keeps its place.
			q.backToQueue(ctx, j, "held while the fleet's scheduler placed it; back in the queue")
			continue
		}
		next = minTime(next, q.launchIntent(ctx, l, j, tr))
	}
	return plan, next
}

// shareRanks keeps the queue's ranking, which the API reads, as the
// fleet's: the scheduler ranks from its plan and publishes the ranking,
// every other agent reads the latest the scheduler published. The
// scheduler publishes when the order, the starts or a wait changed, at
// most every publishEvery and, for a deep queue, no more bytes than
// publishRate a second; when only the priorities changed (the queue
// ages), every refreshEvery. It returns when a ranking held back is due,
// or zero.
func (q *Launcher) shareRanks(ctx context.Context, leader bool, plan queue.Plan) time.Time {
	f := q.fleet
	now := q.now()
	if leader {
		q.ranks.set(plan)
		raw := queue.AppendRanking(nil, plan)
		if f.token == f.pubToken && bytes.Equal(raw, f.published) {
			return time.Time{}
		}
		due := f.publishedAt.Add(refreshEvery)
		if f.token != f.pubToken || !bytes.Equal(queue.RankingOrder(raw, plan), f.publishedOrder) {
			due = f.publishedAt.Add(max(publishEvery, time.Duration(float64(f.packedLen)/publishRate*float64(time.Second))))
		}
		if now.Before(due) {
			return due
		}
		packed := queue.PackRanking(raw)
		cctx, cancel := f.call(ctx)
		v, err := f.Store.PublishRanks(cctx, f.token, packed)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				q.log.Warn("publish the fleet's ranking", "err", err)
			}
			return now.Add(faultRetry)
		}
		f.published, f.publishedOrder, f.packedLen = raw, queue.RankingOrder(raw, plan), len(packed)
		f.publishedAt, f.ranksVersion, f.pubToken = now, v, f.token
		return time.Time{}
	}
	cctx, cancel := f.call(ctx)
	r, err := f.Store.Ranks(cctx, f.ranksVersion)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			q.log.Warn("read the fleet's ranking", "err", err)
		}
		return time.Time{} // the last one read stands; the next pass reads again
	}
	if r.Body == nil {
		return time.Time{}
	}
	f.ranksVersion = r.Version
	if len(r.Body) == 0 {
		q.ranks.set(queue.Plan{})
		return time.Time{}
	}
	p, err := queue.UnpackRanking(r.Body)
	if err != nil {
		q.log.Warn("the fleet's ranking, as its scheduler published it, does not read; queued jobs show no position until the next",
			"version", r.Version, "token", r.Token, "err", err)
		p = queue.Plan{}
	}
	q.ranks.set(p)
	return time.Time{}
}

func cmpPoll(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultFleetPoll
	}
	return d
}

// schedulePass is the scheduler's pass over the fleet.
func (q *Launcher) schedulePass(ctx context.Context, in queue.Input, byID map[string]queue.Job) queue.Plan {
	f := q.fleet
	began := q.now()
	cctx, cancel := f.call(ctx)
	nodes, err := f.Store.Nodes(cctx, f.Takeover)
	cancel()
	if err != nil {
		q.log.Warn("read the fleet's nodes", "err", err)
		return queue.Plan{}
	}
	states := map[string]int{string(queue.NodeUp): 0, string(queue.NodeDraining): 0, string(queue.NodeLost): 0}
	for _, n := range nodes {
		states[string(nodeState(n))]++
	}
	defer func() { q.metrics.fleetPass(q.now().Sub(began), states) }()
	lost := fleetInput(nodes, &in)
	// The jobs of a lost node are lost: they go back to the queue (by
	// queue.requeue_on) and the node's GPUs leave the pool.
	running := in.Running[:0:0]
	for _, r := range in.Running {
		j := byID[r.ID]
		if lost[j.Node] {
			q.nodeLost(ctx, j)
			continue
		}
		running = append(running, r)
	}
	in.Running = running
	plan := queue.Schedule(in)
	if len(plan.Starts) == 0 {
		return plan
	}
	intents := make([]ledger.Intent, 0, len(plan.Starts))
	evs := make([]audit.Event, 0, len(plan.Starts))
	for _, s := range plan.Starts {
		intents = append(intents, ledger.Intent{JobID: s.JobID, Node: s.Node, GPUs: s.GPUs, Shared: info(byID[s.JobID]).memory > 0, Placement: s.Placement})
		evs = append(evs, q.queueEvent("jobs.start", s.JobID))
	}
	q.writeIntents(ctx, intents, evs)
	return plan
}

// writeIntents writes the pass's intents in one transaction; when that is
// refused for one of them (a job cancelled or held meanwhile, a GPU the
// pass took for free that is not), each is written alone, so that one
// stale decision holds up no other.
func (q *Launcher) writeIntents(ctx context.Context, intents []ledger.Intent, evs []audit.Event) {
	f := q.fleet
	cctx, cancel := f.call(ctx)
	err := f.Store.WriteIntents(cctx, f.token, intents, evs)
	cancel()
	if err == nil || len(intents) == 1 {
		q.intentsWritten(intents, err)
		return
	}
	if errors.Is(err, ledger.ErrStaleToken) {
		q.intentsWritten(intents, err)
		return
	}
	for i := range intents {
		cctx, cancel := f.call(ctx)
		err := f.Store.WriteIntents(cctx, f.token, intents[i:i+1], evs[i:i+1])
		cancel()
		q.intentsWritten(intents[i:i+1], err)
		if errors.Is(err, ledger.ErrStaleToken) {
			return
		}
	}
}

// intentsWritten logs how a write of intents went.
func (q *Launcher) intentsWritten(intents []ledger.Intent, err error) {
	var se *ledger.JobStateError
	switch {
	case err == nil:
		for _, in := range intents {
			q.log.Debug("start intent", "job", in.JobID, "node", in.Node, "gpus", strings.Join(in.GPUs, ","))
		}
	case errors.Is(err, ledger.ErrStaleToken):
		q.log.Info("another agent became the fleet's scheduler; this pass's intents were refused")
		q.fleet.token = 0
		q.setLeading(false)
	case errors.As(err, &se), errors.Is(err, ledger.ErrDoubleAllocation):
		q.log.Info("a start intent was refused; the next pass decides again", "job", intents[0].JobID, "err", err)
	default:
		q.log.Warn("write start intents", "jobs", len(intents), "err", err)
	}
}

// nodeLost marks a starting or running job of a lost node lost, and
// requeues or fails it as queue.requeue_on says.
func (q *Launcher) nodeLost(ctx context.Context, j queue.Job) {
	out, err := q.update(ctx, j.ID, j.State, queue.Lost, func(j *queue.Job) {
		j.ReasonText = "its node " + j.Node + " was lost (its agent's ledger lease expired)"
	}, q.queueEvent("jobs.lost", j.ID))
	if err != nil {
		var se *ledger.JobStateError
		if !errors.As(err, &se) {
			q.log.Error("mark a lost node's job lost", "job", j.ID, "node", j.Node, "err", err)
		}
		return
	}
	if !q.requeueOn[config.RequeueNodeFailure] {
		q.fail(ctx, out, queue.Lost, queue.ReasonRequeueLimit,
			"its node "+j.Node+" was lost; not requeued, as queue.requeue_on leaves out node_failure", out.Attempts)
		return
	}
	_, err = q.update(ctx, out.ID, queue.Lost, queue.Queued, func(j *queue.Job) {
		j.GPUs, j.ContainerID, j.StartedAt, j.Node = nil, "", time.Time{}, ""
		j.Reason = queue.ReasonLostRequeued
		j.ReasonText = "its node " + out.Node + " was lost (its agent's ledger lease expired); back in the queue, no requeue counted"
	}, q.queueEvent("jobs.requeue", out.ID))
	if err != nil {
		q.log.Error("requeue a lost node's job", "job", out.ID, "err", err)
	}
}

// setLeading records whether this agent holds the scheduler lease, for
// its metrics and for the service's submissions (see submitted).
func (q *Launcher) setLeading(on bool) {
	q.leading.Store(on)
	q.metrics.setLeader(on)
}

// mine reports whether job j is this node's to run: always on one node,
// and in a fleet when the job was placed here.
func (q *Launcher) mine(j queue.Job) bool { return q.fleet == nil || j.Node == q.node }

// fence stops this node's running job containers once the agent has been
// out of the ledger's reach for so long that the fleet may soon take its
// node for lost and start its jobs elsewhere: a job must never run twice,
// so each container is stopped, its grace included, before the takeover
// can come (see fenceTimes). The reconciliation that follows, once the
// ledger answers, settles the jobs.
func (q *Launcher) fence(ctx context.Context, l *loop) {
	f := q.fleet
	after, grace := fenceTimes(f.Takeover, q.stopGrace)
	if f.fenced || f.lastOK.IsZero() || q.now().Sub(f.lastOK) < after {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	cs, err := q.engine.List(lctx)
	if err != nil {
		return
	}
	f.fenced = true
	for _, c := range cs {
		if !c.Running {
			continue
		}
		q.log.Warn("out of the ledger's reach for "+after.Round(100*time.Millisecond).String()+": the fleet may take this node for lost and start this job elsewhere; stopping its container",
			"container", c.ID, "job", c.JobID, "grace", grace)
		q.sendStop(ctx, l, c.ID, &stop{state: queue.Lost, reason: queue.ReasonLostRequeued, text: "its node lost the ledger", grace: grace})
	}
	l.reconciled = false
}

// fenceTimes are how long after the ledger last answered a pass the fence
// stops this node's job containers, and the grace it gives each: both
// within ledger.lease_takeover, so that the containers are gone before the
// fleet may take the node for lost. The others judge the node by its
// lease's heartbeat, which the ledger writer renews every
// ledger.flush_interval, so it may be up to that much older than the
// pass's last answer; the config keeps the interval within a third of the
// takeover. The fence leaves that third to it, gives the stop at most
// another third (queue.stop_grace when shorter), and stops what is left
// earlier: at the soonest a third of the takeover after the ledger went
// away.
func fenceTimes(takeover, stopGrace time.Duration) (after, grace time.Duration) {
	grace = min(stopGrace, takeover/3)
	return takeover - takeover/3 - grace, grace
}

// fleetInput sets in's GPUs, their use and the drained nodes from the
// nodes' registrations, leaving the lost nodes out, and returns the lost
// ones.
func fleetInput(nodes []ledger.NodeStatus, in *queue.Input) (lost map[string]bool) {
	lost = map[string]bool{}
	in.GPUs, in.Util = nil, map[string]float64{}
	in.Outside = queue.Outside{MemoryUsed: map[string]uint64{}}
	in.Drained = map[string]bool{}
	in.NodeImages = map[string][]string{}
	in.Config.SharedGPUs = nil
	for _, n := range nodes {
		if n.Lost {
			lost[n.Node] = true
			continue
		}
		if n.Drained {
			in.Drained[n.Node] = true
		}
		in.NodeImages[n.Node] = n.Images
		for _, g := range n.GPUs {
			in.GPUs = append(in.GPUs, queue.GPU{UUID: g.UUID, Index: g.Index, MemoryTotal: g.MemoryBytes, NVLink: g.NVLink, PCIeSwitch: g.PCIeSwitch, Node: n.Node, Model: g.Model})
			in.Util[g.UUID] = g.Util
			if g.MemoryUsedOutside > 0 {
				in.Outside.MemoryUsed[g.UUID] = g.MemoryUsedOutside
			}
			if g.OutsideContainer != "" {
				in.Outside.Containers = append(in.Outside.Containers, queue.OutsideContainer{Name: g.OutsideContainer, GPUs: []string{g.UUID}})
			}
			if g.Shared {
				in.Config.SharedGPUs = append(in.Config.SharedGPUs, g.UUID)
			}
		}
	}
	return lost
}

// call bounds one of the fleet's reads or writes of the ledger to a third
// of the takeover time: a partition that drops packets rather than
// breaking connections must end the call in time for the fence, not hang
// the loop until TCP gives up.
func (f *fleetState) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.Takeover/3)
}

// fleetMemory is the most GPU memory a memory job may ask for in the
// fleet: the largest shared GPU's of any node that is not lost, times
// queue.shared_memory_fraction; local, this node's own figure, where the
// ledger cannot say.
func (q *Service) fleetMemory(ctx context.Context, local uint64) uint64 {
	nodes, err := q.fleetStore.Nodes(ctx, q.takeover)
	if err != nil {
		return local
	}
	_, cfg := q.settings.forPass()
	cfg.SharedGPUs = nil
	var gpus []queue.GPU
	for _, n := range nodes {
		if n.Lost {
			continue
		}
		for _, g := range n.GPUs {
			if g.Shared {
				gpus = append(gpus, queue.GPU{UUID: g.UUID, MemoryTotal: g.MemoryBytes})
				cfg.SharedGPUs = append(cfg.SharedGPUs, g.UUID)
			}
		}
	}
	return max(local, maxGPUMemory(cfg, gpus))
}
