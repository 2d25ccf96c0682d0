package run

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// fakeLaunch is a launcher as the service sees it, recording what it is
// asked: the service must need nothing else of a launcher, which may one
// day run on another node.
type fakeLaunch struct {
	mu     sync.Mutex
	pokes  int
	stops  map[string]*stop
	ended  []queue.Job
	runsOn bool
}

func (f *fakeLaunch) poke() {
	f.mu.Lock()
	f.pokes++
	f.mu.Unlock()
}

func (f *fakeLaunch) submitted() { f.poke() }

// askStop records the stop and answers at once, as a launcher would once
// the job ended.
func (f *fakeLaunch) askStop(id string, s *stop) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops[id] = s
	done := make(chan struct{})
	close(done)
	return done
}

func (f *fakeLaunch) jobEnded(j queue.Job) {
	f.mu.Lock()
	f.ended = append(f.ended, j)
	f.mu.Unlock()
}

func (f *fakeLaunch) runs() bool { return f.runsOn }

func (f *fakeLaunch) logs(_ context.Context, cid string, _ bool, w io.Writer) error {
	_, err := io.WriteString(w, "logs of "+cid)
	return err
}

// TestServiceThroughLaunch: a submit wakes the launcher; a cancel ends a
// queued job itself and tells the launcher, and asks the launcher to stop
// a running one; logs come from the launcher.
func TestServiceThroughLaunch(t *testing.T) {
	e := newEnv(t, nil)
	f := &fakeLaunch{stops: map[string]*stop{}, runsOn: true}
	e.q.Service.launch = f
	ctx := context.Background()

	queued := e.submit(t, "alice", request())
	if f.pokes != 1 {
		t.Errorf("after a submit: %d pokes, want 1", f.pokes)
	}
	got, err := e.q.Cancel(ctx, queued.ID, audit.Event{Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != queue.Cancelled || len(f.ended) != 1 || f.ended[0].ID != queued.ID || f.pokes != 2 {
		t.Errorf("cancel of a queued job: %s, ended %v, %d pokes; want cancelled, told once, 2 pokes", got.State, f.ended, f.pokes)
	}

	running := e.submit(t, "alice", request())
	for _, to := range []queue.State{queue.Starting, queue.Running} {
		from := queue.Queued
		if to == queue.Running {
			from = queue.Starting
		}
		if _, err := e.q.Service.update(ctx, running.ID, from, to, func(j *queue.Job) { j.ContainerID = "c-1" }, audit.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.q.Cancel(ctx, running.ID, audit.Event{Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	if s := f.stops[running.ID]; s == nil || s.state != queue.Cancelled || s.reason != queue.ReasonCancelled || s.text != "cancelled by alice" {
		t.Errorf("cancel of a running job asked the launcher for %+v, want a cancel by alice", s)
	}
	var out bytes.Buffer
	if err := e.q.Logs(ctx, running.ID, false, &out); err != nil || out.String() != "logs of c-1" {
		t.Errorf("logs: %q, %v; want the launcher's logs of c-1", out.String(), err)
	}
}
