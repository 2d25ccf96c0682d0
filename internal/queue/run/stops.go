package run

import (
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// stop is a stop the loop is asked to make, or has made, of a job's
// container; done is closed once the job has ended.
type stop struct {
	state  queue.State // the state the job ends in
	reason queue.Reason
	text   string
	audit  audit.Event
	sent   bool // the container was told to stop
	// preempt makes the job go back to the queue once its container has
	// exited (state is then queued); grace, when not 0, is the stop's
	// grace in place of queue.stop_grace.
	preempt bool
	grace   time.Duration
	done    chan struct{}
}

// stopRequests are the causes of the stops asked of the launcher: by job
// id (a cancel, a time limit, a memory overrun) or by container id (the
// waste policy). The service, the launcher and the memory enforcer ask;
// the launcher makes them.
type stopRequests struct {
	mu          sync.Mutex
	byJob       map[string]*stop
	byContainer map[string]queue.Reason
}

func newStopRequests() *stopRequests {
	return &stopRequests{byJob: map[string]*stop{}, byContainer: map[string]queue.Reason{}}
}

// ask records a stop of job id for the loop to make, and returns a
// channel closed once the job has ended. A stop already asked for (a time
// limit, an earlier cancel) keeps its cause, but for a preemption, which
// gives way to any other.
func (r *stopRequests) ask(id string, s *stop) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.byJob[id]; ok {
		if cur.preempt && !s.preempt {
			// A cancel or a time limit ends a job being preempted
			// rather than requeue it; its container is told already.
			s.done, s.sent, s.grace = cur.done, cur.sent, cur.grace
			r.byJob[id] = s
		}
		return cur.done
	}
	s.done = make(chan struct{})
	r.byJob[id] = s
	return s.done
}

// any reports whether a stop is asked for any job.
func (r *stopRequests) any() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byJob) > 0
}

// pending returns the stop asked for job id, or nil.
func (r *stopRequests) pending(id string) *stop {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byJob[id]
}

// toSend returns the stop asked for job id, and whether its container is
// to be told now: when it was not told yet and can be (canSend). It is
// marked sent then.
func (r *stopRequests) toSend(id string, canSend bool) (*stop, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.byJob[id]
	send := s != nil && !s.sent && canSend
	if send {
		s.sent = true
	}
	return s, send
}

// unsent marks s as not sent, for a pass to send it again.
func (r *stopRequests) unsent(s *stop) {
	r.mu.Lock()
	s.sent = false
	r.mu.Unlock()
}

// expect records that the waste policy is stopping container cid.
func (r *stopRequests) expect(cid string, reason queue.Reason) {
	r.mu.Lock()
	r.byContainer[cid] = reason
	r.mu.Unlock()
}

// causes returns the stop asked for job id, and the policy's reason when
// it is stopping container cid.
func (r *stopRequests) causes(id, cid string) (s *stop, policy queue.Reason, byPolicy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	policy, byPolicy = r.byContainer[cid]
	return r.byJob[id], policy, byPolicy
}

// end forgets the stops of job id, which ended, and of its container cid
// ("": none), and returns the job's, if one was asked for.
func (r *stopRequests) end(id, cid string) *stop {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.byJob[id]
	delete(r.byJob, id)
	if cid != "" {
		delete(r.byContainer, cid)
	}
	return s
}
