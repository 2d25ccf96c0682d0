package sqlledger

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// maxSubmitGroup is the most submissions one transaction writes: 27
// arguments a job row and 20 an audit row stay far under both databases'
// limits on a statement's arguments.
const maxSubmitGroup = 64

// submitCall is one SubmitJob waiting in a group.
type submitCall struct {
	ctx context.Context
	job queue.Job
	ev  audit.Event
	out queue.Job
	err error
	// done is closed once out and err are set; lead, when this call is
	// to write the next group itself.
	done, lead chan struct{}
}

// group gathers the calls that arrive while a group is being written
// into the next one: a group commit. Nobody waits for a group to fill;
// a call that arrives when none is being written is written at once,
// alone. The calls' own goroutines do the writing, each writer handing
// the role on when its group is written, so that no call waits behind
// others' groups for longer than one.
type group struct {
	mu      sync.Mutex
	pending []*submitCall
	writing bool
}

// do runs c in a group written by write, which sets every call's out
// and err, and returns once c's are set.
func (g *group) do(c *submitCall, write func([]*submitCall)) {
	c.done, c.lead = make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	g.pending = append(g.pending, c)
	if g.writing {
		g.mu.Unlock()
		select {
		case <-c.done:
			return
		case <-c.lead:
		}
	} else {
		g.writing = true
		g.mu.Unlock()
	}
	// This call writes the next group, which holds it: it is the oldest
	// pending, as each writer hands on to the oldest.
	g.mu.Lock()
	n := min(len(g.pending), maxSubmitGroup)
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	g.mu.Unlock()
	write(batch)
	for _, b := range batch {
		close(b.done)
	}
	g.mu.Lock()
	if len(g.pending) > 0 {
		close(g.pending[0].lead)
	} else {
		g.writing = false
		g.pending = nil
	}
	g.mu.Unlock()
}

// submitGrouped is SubmitJob through the ledger's group.
func (l Ledger) submitGrouped(ctx context.Context, job queue.Job, ev audit.Event) (queue.Job, error) {
	c := &submitCall{ctx: ctx, job: job, ev: ev}
	l.g.do(c, l.writeSubmits)
	return c.out, c.err
}

// writeSubmits writes calls in one transaction. When it fails for a
// reason other than the database's being out of reach, each call is
// written again alone, so that one call's bad row fails that call only.
func (l Ledger) writeSubmits(calls []*submitCall) {
	live := make([]*submitCall, 0, len(calls))
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		c := live[0]
		c.out, c.err = l.submitOne(c.ctx, c.job, c.ev)
		return
	}
	// The transaction runs under the first call's context: cancelling it
	// fails the group, and each is written alone under its own.
	outs, err := l.submitMany(live[0].ctx, live)
	if err == nil {
		for i, c := range live {
			c.out = outs[i]
		}
		return
	}
	if errors.Is(err, ledger.ErrUnavailable) {
		for _, c := range live {
			c.err = fmt.Errorf("submit job to %s: %w", l.b.Name, err)
		}
		return
	}
	for _, c := range live {
		c.out, c.err = l.submitOne(c.ctx, c.job, c.ev)
	}
}

// submitMany writes calls' jobs with consecutive IDs in their order, and
// their audit events, in one transaction with one wake-up.
func (l Ledger) submitMany(ctx context.Context, calls []*submitCall) ([]queue.Job, error) {
	var out []queue.Job
	err := l.b.WriteTx(ctx, func(tx Tx) error {
		var last int64
		if err := queryOne(ctx, tx, "UPDATE job_sequence SET last = last + $1 RETURNING last", []any{int64(len(calls))}, &last); err != nil {
			return fmt.Errorf("job sequence: %w", err)
		}
		base := last - int64(len(calls))
		out = make([]queue.Job, len(calls))
		evs := make([]audit.Event, len(calls))
		for i, c := range calls {
			j := c.job
			j.Seq = base + 1 + int64(i)
			j.ID = ledger.JobID(j.Seq)
			out[i] = j
			evs[i] = c.ev
			if evs[i].Target == "" {
				evs[i].Target = j.ID
			}
		}
		if err := insertJobs(ctx, tx, out); err != nil {
			return err
		}
		if err := l.notify(ctx, tx); err != nil {
			return err
		}
		return insertAudits(ctx, tx, evs)
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = normalise(out[i])
	}
	return out, nil
}
