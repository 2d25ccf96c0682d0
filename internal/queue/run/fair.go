package run

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// Standing gives a pass what the fair share says of the users and teams
// it sees: each user's factor and expected share of a GPU, and the teams
// over budget. It must answer from memory (a cache refreshed in the
// background), never from the ledger on the call.
type Standing func(ctx context.Context, users, teams []string) (factor, expected map[string]float64, overBudget map[string]bool)

// reqInfo is what the scheduler needs of a job's stored request.
type reqInfo struct {
	memory      uint64
	class       queue.Class
	node, model string // the placement's constraints (globs)
}

// rank is a queued job's place after the last pass, and why it waits:
// the pass's queue.Wait, whose sentence is built only when read.
type rank struct {
	priority  float64
	position  int
	estimated time.Time
	wait      queue.Wait
	waits     bool // wait is the pass's
}

// info returns the scheduler's view of job j's request; a job whose
// request the store could not read asks for whole GPUs in the normal
// class, and its start is refused.
func info(j queue.Job) reqInfo {
	if r := j.Request; r != nil {
		return reqInfo{memory: r.GPUMemory, class: r.Class, node: r.Node, model: r.Model}
	}
	return reqInfo{}
}

// ranking is the queued jobs' places after the launcher's last pass,
// which the API reads.
type ranking struct {
	mu    sync.Mutex
	ranks map[string]rank
}

func newRanking() *ranking { return &ranking{ranks: map[string]rank{}} }

// forget drops what the queue kept of an ended job.
func (q *ranking) forget(id string) {
	q.mu.Lock()
	delete(q.ranks, id)
	q.mu.Unlock()
}

// Rank implements the API's view of the queue's order: a queued job's
// priority, its position (1 first) and its estimated start, as of the
// last pass.
func (q *Queue) Rank(id string) (priority float64, position int, estimated time.Time, ok bool) {
	return q.Launcher.ranks.rank(id)
}

// rank returns job id's place after the last pass.
func (q *ranking) rank(id string) (priority float64, position int, estimated time.Time, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r, ok := q.ranks[id]
	return r.priority, r.position, r.estimated, ok
}

// set keeps the order and the estimates of a pass. A position is
// the job's place among the jobs the pass leaves queued: one the pass
// starts is no longer ahead of anyone, as the waits' sentences already
// count ("no job ahead of you waits for GPUs").
func (q *ranking) set(p queue.Plan) {
	started := make(map[string]bool, len(p.Starts))
	for _, s := range p.Starts {
		started[s.JobID] = true
	}
	ranks := make(map[string]rank, len(p.Order))
	pos := 0
	for _, r := range p.Order {
		if started[r.JobID] {
			ranks[r.JobID] = rank{priority: r.Priority}
			continue
		}
		pos++
		ranks[r.JobID] = rank{priority: r.Priority, position: pos}
	}
	for _, w := range p.Waits {
		r := ranks[w.JobID]
		r.estimated, r.wait, r.waits = w.EstimatedStart, w, true
		ranks[w.JobID] = r
	}
	q.mu.Lock()
	q.ranks = ranks
	q.mu.Unlock()
}

// waiting fills queued job j's reason and sentence from the last pass,
// which keeps them in memory rather than in the store: the store holds
// the reason a restart needs (submitted, held, start_failed,
// engine_unavailable), the pass what it found since. A job whose last
// start failed keeps start_failed, with the error, while the pass finds
// it waits only for GPUs.
func (q *ranking) waiting(j queue.Job) queue.Job {
	if j.State != queue.Queued {
		return j
	}
	q.mu.Lock()
	r, ok := q.ranks[j.ID]
	q.mu.Unlock()
	if !ok || !r.waits || j.Reason == queue.ReasonStartFailed && r.wait.Reason == queue.ReasonResources {
		return j
	}
	if j.Held != (r.wait.Reason == queue.ReasonHeld) {
		// Held or released since the pass: the store's reason is the
		// newer.
		return j
	}
	j.Reason, j.ReasonText = r.wait.Reason, r.wait.Text()
	return j
}

// resolveShared turns queue.shared_gpus (UUIDs, indices or all) into the
// UUIDs of the GPUs seen.
func resolveShared(entries []string, gpus []queue.GPU) []string {
	if len(entries) == 0 {
		return nil
	}
	var out []string
	for _, g := range gpus {
		for _, e := range entries {
			if e == "all" || strings.EqualFold(e, g.UUID) || e == strconv.Itoa(g.Index) {
				out = append(out, g.UUID)
				break
			}
		}
	}
	return out
}

// maxGPUMemory is the most GPU memory one job may declare: the largest
// shared GPU's memory times the fraction its memory jobs may fill. 0 when
// no GPU seen is shared.
func maxGPUMemory(cfg queue.Config, gpus []queue.GPU) uint64 {
	frac := cfg.SharedMemoryFraction
	if frac <= 0 {
		frac = queue.DefaultSharedMemoryFraction
	}
	var most uint64
	for _, g := range gpus {
		if slices.Contains(cfg.SharedGPUs, g.UUID) {
			most = max(most, uint64(float64(g.MemoryTotal)*frac))
		}
	}
	return most
}
