package queue

import (
	"strings"
	"testing"
	"time"
)

// TestFleetImages: a fleet places a job only on a node whose queue.images
// allow its image; a job no node takes waits with node_constraint, naming
// the nodes that refuse it; a node the input does not name takes any
// image.
func TestFleetImages(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	in := Input{Now: now,
		GPUs: []GPU{{UUID: "a0", Node: "a", MemoryTotal: 80 << 30}, {UUID: "b0", Node: "b", MemoryTotal: 80 << 30}, {UUID: "b1", Node: "b", MemoryTotal: 80 << 30}},
		NodeImages: map[string][]string{"a": {"train:*"}, "b": {"eval:*"}},
		Queued: []QueuedJob{
			{ID: "j-000001", User: "alice", GPUs: 1, Image: "eval:2", SubmittedAt: now, TimeLimit: time.Hour},
			{ID: "j-000002", User: "bob", GPUs: 1, Image: "train:1", SubmittedAt: now.Add(time.Second), TimeLimit: time.Hour},
			{ID: "j-000003", User: "carol", GPUs: 1, Image: "other:1", SubmittedAt: now.Add(2 * time.Second), TimeLimit: time.Hour},
		},
	}
	plan := Schedule(in)
	on := map[string]string{}
	for _, s := range plan.Starts {
		on[s.JobID] = s.Node
	}
	if on["j-000001"] != "b" || on["j-000002"] != "a" {
		t.Errorf("starts %v, want eval:2 on b and train:1 on a, each where its image is allowed", on)
	}
	var w *Wait
	for i := range plan.Waits {
		if plan.Waits[i].JobID == "j-000003" {
			w = &plan.Waits[i]
		}
	}
	if w == nil || w.Reason != ReasonNodeConstraint || !strings.Contains(w.Text(), "other:1") || !strings.Contains(w.Text(), "a, b") {
		t.Errorf("other:1, which no node allows: %+v (%q), want node_constraint naming the image and the nodes", w, textOf(w))
	}
	// A node the input does not name takes any image: other:1 may go to
	// b now, and waits only for its GPUs.
	in.NodeImages = map[string][]string{"a": {"train:*"}}
	for _, w := range Schedule(in).Waits {
		if w.Reason == ReasonNodeConstraint {
			t.Errorf("with b's images unknown, %s waits with node_constraint: %s", w.JobID, w.Text())
		}
	}
}

func textOf(w *Wait) string {
	if w == nil {
		return ""
	}
	return w.Text()
}
