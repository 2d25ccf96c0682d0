package run

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// TestStopRequests: a stop keeps its first cause, is sent once until
// marked unsent, and is forgotten with its container's when the job ends.
func TestStopRequests(t *testing.T) {
	r := newStopRequests()
	first := &stop{state: queue.Timeout}
	done := r.ask("j-1", first)
	if again := r.ask("j-1", &stop{state: queue.Cancelled}); again != done || r.pending("j-1") != first {
		t.Error("a second ask replaced the first cause")
	}
	if _, send := r.toSend("j-1", false); send {
		t.Error("sent while it could not be")
	}
	if s, send := r.toSend("j-1", true); !send || s != first {
		t.Error("not sent when it could be")
	}
	if _, send := r.toSend("j-1", true); send {
		t.Error("sent twice")
	}
	r.unsent(first)
	if _, send := r.toSend("j-1", true); !send {
		t.Error("not sent again after unsent")
	}
	r.expect("c-1", queue.ReasonStoppedByPolicy)
	if s, reason, ok := r.causes("j-1", "c-1"); s != first || !ok || reason != queue.ReasonStoppedByPolicy {
		t.Errorf("causes: %v, %s, %v", s, reason, ok)
	}
	if s := r.end("j-1", "c-1"); s != first {
		t.Errorf("end returned %v, want the first cause", s)
	}
	if s, _, ok := r.causes("j-1", "c-1"); s != nil || ok {
		t.Error("the ended job's stops are still there")
	}
}
