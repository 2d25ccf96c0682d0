package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// nodeGPUs returns n GPUs of model on node: node-0 … node-(n-1), 80 GiB.
func nodeGPUs(node string, n int, model string) []GPU {
	gs := make([]GPU, n)
	for i := range gs {
		gs[i] = GPU{UUID: fmt.Sprintf("%s-%d", node, i), Index: i, MemoryTotal: 80 * gib, Node: node, Model: model}
	}
	return gs
}

// fleet returns the GPUs of nodes named by name with their count.
func fleet(nodes ...any) []GPU {
	var gs []GPU
	for k := 0; k < len(nodes); k += 2 {
		gs = append(gs, nodeGPUs(nodes[k].(string), nodes[k+1].(int), "H100")...)
	}
	return gs
}

// nodeStarts returns the plan's starts as "job@node=GPU,GPU".
func nodeStarts(p Plan) []string {
	var out []string
	for _, s := range p.Starts {
		out = append(out, s.JobID+"@"+s.Node+"="+strings.Join(s.GPUs, ","))
	}
	return out
}

// TestFleetNodeChoice: each placement chooses the node first, then the
// GPUs on it, and records every node that fitted, the chosen first.
func TestFleetNodeChoice(t *testing.T) {
	// a: 2 of 4 busy; b: idle; c: 3 of 4 busy.
	run := []RunningJob{
		running("j-a", "zed", t0, 0, "a-0", "a-1"),
		running("j-c", "zed", t0, 0, "c-0", "c-1", "c-2"),
	}
	util := map[string]float64{"a-0": 1, "a-1": 1, "c-0": 0.9, "c-1": 0.9, "c-2": 0.9}
	for _, tc := range []struct {
		name   string
		p      Placement
		gpus   int
		want   string
		scores []NodeCandidate
	}{
		{"binpack takes the busiest node", Binpack, 1, "j-000001@c=c-3",
			[]NodeCandidate{{"c", 3, 0.675, true}, {"a", 2, 0.5, false}, {"b", 0, 0, false}}},
		{"binpack: the busiest node with room", Binpack, 2, "j-000001@a=a-2,a-3",
			[]NodeCandidate{{"a", 2, 0.5, true}, {"b", 0, 0, false}}},
		{"spread takes the idlest node", Spread, 1, "j-000001@b=b-0",
			[]NodeCandidate{{"b", 0, 0, true}, {"a", -2, 0.5, false}, {"c", -3, 0.675, false}}},
		// Target 0.7, expected 1: a 1-GPU job adds 0.25 to a node of 4.
		// a: 0.5 + 0.25 = 0.75 (95), b: 0.25 (55), c: 0.925 (77.5).
		{"target takes the node nearest the target", Target, 1, "j-000001@a=a-2",
			[]NodeCandidate{{"a", 95, 0.75, true}, {"c", 77.5, 0.925, false}, {"b", 55, 0.25, false}}},
		// A 2-GPU job adds 0.5: a 1.0 (70), b 0.5 (80).
		{"target: a bigger job goes elsewhere", Target, 2, "j-000001@b=b-0,b-1",
			[]NodeCandidate{{"b", 80, 0.5, true}, {"a", 70, 1, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{GPUs: fleet("c", 4, "a", 4, "b", 4), Running: run, Util: util,
				Queued: []QueuedJob{queued(1, "ann", tc.gpus)}, Config: Config{Placement: tc.p}, Now: t0}
			p := Schedule(in)
			if got := nodeStarts(p); !slices.Equal(got, []string{tc.want}) {
				t.Fatalf("starts = %q, want %q", got, tc.want)
			}
			got := p.Starts[0].Placement.Nodes
			if diff := cmp.Diff(tc.scores, got, cmp.Comparer(func(x, y float64) bool { return fmt.Sprintf("%.6f", x) == fmt.Sprintf("%.6f", y) })); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			for _, c := range p.Starts[0].Placement.Candidates {
				if c.Node != p.Starts[0].Node {
					t.Errorf("candidate %s is on %s, not the chosen node %s", c.UUID, c.Node, p.Starts[0].Node)
				}
			}
		})
	}
}

// TestFleetTiesByName: equal nodes go by name, and one pass fills them
// as binpack and spread say.
func TestFleetTiesByName(t *testing.T) {
	jobs := []QueuedJob{queued(1, "a", 1), queued(2, "b", 1), queued(3, "c", 1)}
	for p, want := range map[Placement][]string{
		Binpack: {"j-000001@x=x-0", "j-000002@x=x-1", "j-000003@y=y-0"},
		Spread:  {"j-000001@x=x-0", "j-000002@y=y-0", "j-000003@x=x-1"},
	} {
		in := Input{GPUs: fleet("y", 2, "x", 2), Queued: jobs, Config: Config{Placement: p}, Now: t0}
		if got := nodeStarts(Schedule(in)); !slices.Equal(got, want) {
			t.Errorf("%s: starts = %q, want %q", p, got, want)
		}
	}
}

// TestFleetNeverSpansNodes: four free GPUs on two nodes do not make a
// 4-GPU job's start.
func TestFleetNeverSpansNodes(t *testing.T) {
	in := Input{
		GPUs:    fleet("a", 4, "b", 4),
		Running: []RunningJob{running("j-1", "zed", t0, 0, "a-0", "a-1"), running("j-2", "zed", t0, 0, "b-2", "b-3")},
		Queued:  []QueuedJob{queued(1, "ann", 4), queued(2, "bob", 2)},
		Config:  Config{MaxGPUsPerUser: 8},
		Now:     t0,
	}
	p := Schedule(in)
	check(t, p, nil, []string{
		"j-000001 resources: waiting for 4 free GPUs on one node; 4 are free, at most 2 on one node (a); no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
		"j-000002 resources: waiting behind j-000001 (ann), first in the queue, which waits for 4 free GPUs; 1 job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
	})
	// Without the head, the 2-GPU job starts on one node.
	in.Queued = in.Queued[1:]
	if got := nodeStarts(Schedule(in)); !slices.Equal(got, []string{"j-000002@a=a-2,a-3"}) {
		t.Errorf("starts = %q", got)
	}
}

// TestFleetTopologyPerNode: NVLink islands are per node; a 2-GPU job
// takes a linked pair on the node chosen.
func TestFleetTopologyPerNode(t *testing.T) {
	gs := fleet("a", 4, "b", 4)
	// On b, GPUs 1 and 3 share NVLink.
	gs[5].NVLink, gs[7].NVLink = []string{"b-3"}, []string{"b-1"}
	in := Input{GPUs: gs, Queued: []QueuedJob{queued(1, "ann", 2)}, Running: []RunningJob{running("j-1", "zed", t0, 0, "a-0", "a-1", "a-2")}, Now: t0}
	if got := nodeStarts(Schedule(in)); !slices.Equal(got, []string{"j-000001@b=b-1,b-3"}) {
		t.Errorf("starts = %q, want the linked pair on b", got)
	}
}

func TestFleetConstraints(t *testing.T) {
	gs := append(fleet("gpu-a", 2, "gpu-b1", 2, "gpu-b2", 2), nodeGPUs("big", 4, "A100-SXM4-80GB")...)
	gs[0].Model = "A100-PCIE-40GB" // gpu-a has one GPU of another model
	for _, tc := range []struct {
		name        string
		node, model string
		want        []string // starts, or
		wait        string   // the wait
	}{
		{"a name", "gpu-b2", "", []string{"j-000001@gpu-b2=gpu-b2-0"}, ""},
		{"a glob", "gpu-b*", "", []string{"j-000001@gpu-b1=gpu-b1-0"}, ""},
		{"a model", "", "A100-SXM*", []string{"j-000001@big=big-0"}, ""},
		{"a model glob: binpack takes the node with the fewest free", "", "A100*", []string{"j-000001@gpu-a=gpu-a-0"}, ""},
		{"a model on a node of two models", "gpu-a", "A100*", []string{"j-000001@gpu-a=gpu-a-0"}, ""},
		{"a model on a node of two models, the other", "gpu-a", "H100", []string{"j-000001@gpu-a=gpu-a-1"}, ""},
		{"no node of the name", "cpu-*", "", nil,
			"j-000001 node_constraint: asks for --node cpu-*; no node matches (the nodes are big, gpu-a, gpu-b1, gpu-b2)"},
		{"no GPU of the model", "gpu-b1", "A100*", nil,
			"j-000001 node_constraint: asks for --node gpu-b1 --model A100*; no node matches (the nodes are big, gpu-a, gpu-b1, gpu-b2; their GPU models A100-PCIE-40GB, A100-SXM4-80GB, H100)"},
		{"a bad glob", "gpu-[", "", nil,
			`j-000001 node_constraint: asks for --node gpu-[: "gpu-[" is not a valid pattern (use a name, or * ? [a-z] as path.Match reads them): syntax error in pattern`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := queued(1, "ann", 1)
			j.Node, j.Model = tc.node, tc.model
			in := Input{GPUs: gs, Queued: []QueuedJob{j, queued(2, "bob", 1)}, Now: t0}
			if tc.wait != "" {
				in.Queued = in.Queued[:1]
			}
			p := Schedule(in)
			if tc.wait != "" {
				check(t, p, nil, []string{tc.wait})
				return
			}
			if got := nodeStarts(p); len(got) == 0 || got[0] != tc.want[0] {
				t.Errorf("starts = %q, want %q first", got, tc.want)
			}
		})
	}
	// A model constraint with too few of the model on any node.
	j := queued(1, "ann", 2)
	j.Model = "A100-PCIE*"
	check(t, Schedule(Input{GPUs: gs, Queued: []QueuedJob{j}, Now: t0}), nil, []string{
		"j-000001 too_big: asks for 2 GPUs, more than any node it may run on gives (a job's GPUs are all on one node); the largest, gpu-a, has 1",
	})
}

// TestOneHostConstraints: on one host (no GPU names its node) a --node
// constraint matches nothing, a --model one the host's models, and a
// drained host starts nothing; each sentence says so.
func TestOneHostConstraints(t *testing.T) {
	gs := hostGPUs(2)
	gs[1].Model = "H100"
	for _, tc := range []struct {
		node, model string
		drained     bool
		want        string
	}{
		{"gpu-a", "", false, "j-000001 node_constraint: asks for --node gpu-a; this host's GPUs name no node (it is one host, not a fleet)"},
		{"", "A100*", false, "j-000001 node_constraint: asks for --model A100*; no GPU here matches (the GPU models here: H100)"},
		{"", "", true, "j-000001 node_constraint: this host is drained: no job starts here until an admin undrains it (gpumeter node undrain)"},
	} {
		j := queued(1, "ann", 1)
		j.Node, j.Model = tc.node, tc.model
		in := Input{GPUs: gs, Queued: []QueuedJob{j}, Drained: map[string]bool{"": tc.drained}, Now: t0}
		check(t, Schedule(in), nil, []string{tc.want})
	}
	j := queued(1, "ann", 1)
	j.Model = "H1*"
	check(t, Schedule(Input{GPUs: gs, Queued: []QueuedJob{j}, Now: t0}), []string{"j-000001=GPU-1"}, nil)
}

func TestValidNodeGlob(t *testing.T) {
	for _, s := range []string{"", "gpu-a", "gpu-*", "gpu-[ab]?", `gpu\-a`} {
		if err := ValidNodeGlob(s); err != nil {
			t.Errorf("ValidNodeGlob(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"gpu-[", "[a-", `a\`} {
		err := ValidNodeGlob(s)
		if err == nil || !errors.Is(err, path.ErrBadPattern) || !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
			t.Errorf("ValidNodeGlob(%q) = %v, want ErrBadPattern naming it", s, err)
		}
	}
}

// TestFleetDrained: a drained node starts nothing, its running jobs still
// count against caps, and a job with every node it may use drained waits.
func TestFleetDrained(t *testing.T) {
	in := Input{
		GPUs:    fleet("a", 2, "b", 2),
		Drained: map[string]bool{"a": true},
		Running: []RunningJob{{ID: "j-r", User: "ann", GPUs: []string{"a-0"}, StartedAt: t0, Node: "a"}},
		Queued:  []QueuedJob{queued(1, "ann", 2), queued(2, "bob", 1), queued(3, "cat", 1), queued(4, "dan", 1)},
		Config:  Config{MaxGPUsPerUser: 2},
		Now:     t0,
	}
	onA := queued(5, "eve", 1)
	onA.Node = "a"
	in.Queued = append(in.Queued, onA)
	check(t, Schedule(in), []string{"j-000002=b-0", "j-000003=b-1"}, []string{
		"j-000001 user_gpu_limit: ann's jobs hold 1 of the 2 GPUs queue.max_gpus_per_user allows; this job asks for 2 more",
		"j-000004 resources: waiting for 1 free GPU on one node; none is free; no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
		"j-000005 node_constraint: asks for --node a; every node that matches is drained (a): it starts once an admin undrains one (gpumeter node undrain)",
	})
	in.Drained["b"] = true
	in.Queued = in.Queued[1:2]
	check(t, Schedule(in), nil, []string{
		"j-000002 node_constraint: every node is drained (a, b): no job starts until an admin undrains one (gpumeter node undrain)",
	})
}

// TestFleetTooBig: too_big is about one node, the largest open one.
func TestFleetTooBig(t *testing.T) {
	in := Input{
		GPUs:   fleet("a", 4, "b", 8, "c", 2),
		Queued: []QueuedJob{queued(1, "ann", 9), queued(2, "bob", 6), queued(3, "cat", 8)},
		Config: Config{MaxGPUsPerUser: 16, SharedGPUs: []string{"b-7"}},
		Now:    t0,
	}
	in.Queued[1].Node = "[ac]"
	check(t, Schedule(in), nil, []string{
		"j-000001 too_big: asks for 9 GPUs, more than any node it may run on gives (a job's GPUs are all on one node); the largest, b, has 7 not marked for sharing",
		"j-000002 too_big: asks for 6 GPUs, more than any node it may run on gives (a job's GPUs are all on one node); the largest, a, has 4",
		"j-000003 too_big: asks for 8 GPUs, more than any node it may run on gives (a job's GPUs are all on one node); the largest, b, has 7 not marked for sharing",
	})
	// A memory job over what any shared GPU allows, and one with no
	// shared GPU where it may run.
	m := QueuedJob{ID: "j-000004", User: "dan", GPUMemory: 79 * gib, SubmittedAt: t0}
	m2 := QueuedJob{ID: "j-000005", User: "dan", GPUMemory: gib, SubmittedAt: t0, Node: "a"}
	in.Queued = []QueuedJob{m, m2}
	check(t, Schedule(in), nil, []string{
		"j-000004 too_big: asks for 79.0 GiB on one GPU; the most a shared GPU on the nodes it may run on allows is 72.0 GiB (90% of 80.0 GiB, queue.shared_memory_fraction)",
		"j-000005 too_big: asks for 1.0 GiB on a shared GPU; no node it may run on has a GPU marked for sharing (queue.shared_gpus)",
	})
}

// TestFleetCaps: a user's GPUs on every node count against the cap.
func TestFleetCaps(t *testing.T) {
	in := Input{
		GPUs: fleet("a", 4, "b", 4),
		Running: []RunningJob{
			{ID: "j-r1", User: "ann", Team: "lab", GPUs: []string{"a-0", "a-1"}, StartedAt: t0, Node: "a"},
			{ID: "j-r2", User: "ann", Team: "lab", GPUs: []string{"b-0"}, StartedAt: t0, Node: "b"},
		},
		Queued: []QueuedJob{queued(1, "ann", 2), queued(2, "ann", 1), queued(3, "bob", 3)},
		Config: Config{MaxGPUsPerUser: 4, MaxGPUsPerTeam: 6},
		Now:    t0,
	}
	check(t, Schedule(in), []string{"j-000002=a-2"}, []string{
		"j-000001 user_gpu_limit: ann's jobs hold 3 of the 4 GPUs queue.max_gpus_per_user allows; this job asks for 2 more",
		"j-000003 team_gpu_limit: team lab's jobs hold 4 of the 6 GPUs queue.max_gpus_per_team allows; this job asks for 3 more",
	})
}

// TestFleetHeadReservation: the head's reservation is the earliest time
// enough frees up on one node, not across the fleet, and a job behind
// backfills only where that allows.
func TestFleetHeadReservation(t *testing.T) {
	in := Input{
		GPUs: fleet("a", 3, "b", 3),
		Running: []RunningJob{
			running("j-r1", "zed", t0, time.Hour, "a-1"),
			running("j-r2", "zed", t0, 2*time.Hour, "a-2"),
			running("j-r3", "zed", t0, 30*time.Minute, "b-0"),
			running("j-r4", "zed", t0, 3*time.Hour, "b-1", "b-2"),
		},
		Queued: []QueuedJob{limited(1, "ann", 3, 4*time.Hour), limited(2, "bob", 1, 0), limited(3, "cat", 1, time.Hour)},
		Config: Config{MaxGPUsPerUser: 8},
		Now:    t0,
	}
	// Across the fleet three GPUs are free at 10:00 (a-0, b-0, a-1); on
	// one node, at 11:00 on a. j-000002 (no limit) may not take a-0,
	// which the head needs; j-000003 ends by 10:00 and may.
	p := Schedule(in)
	check(t, p, []string{"j-000003=a-0"}, []string{
		"j-000001 resources: waiting for 3 free GPUs on one node; 1 is free; j-r3 (zed) reaches its time limit in 30 min; no job ahead of you waits for GPUs; next GPUs free by j-r2's time limit at 11:00 UTC",
		"j-000002 resources: waiting behind j-000001 (ann), first in the queue, which waits for 3 free GPUs; 1 job ahead of you waits for GPUs; next GPUs free by j-r2's time limit at 11:00 UTC",
	})
	if got, want := p.Waits[0].EstimatedStart, t0.Add(2*time.Hour); !got.Equal(want) {
		t.Errorf("head's estimate %v, want %v", got, want)
	}
	// b frees its three first: the reservation moves there, and a-0 is
	// open to the job without a limit.
	in.Running[3].TimeLimit = 45 * time.Minute
	check(t, Schedule(in), []string{"j-000002=a-0"}, []string{
		"j-000001 resources: waiting for 3 free GPUs on one node; 1 is free; j-r3 (zed) reaches its time limit in 30 min; no job ahead of you waits for GPUs; next GPUs free by j-r4's time limit at 09:45 UTC",
		"j-000003 resources: waiting behind j-000001 (ann), first in the queue, which waits for 3 free GPUs; 1 job ahead of you waits for GPUs; next GPUs free by j-r1's time limit at 10:00 UTC",
	})
}

// TestFleetPreemptsOnOneNode: the head preempts on the node that needs
// the fewest preemptions, never half on each node.
func TestFleetPreemptsOnOneNode(t *testing.T) {
	pre := func(id, node string, gpus ...string) RunningJob {
		return RunningJob{ID: id, User: "zed", GPUs: gpus, StartedAt: t0, Preemptible: true, Node: node}
	}
	in := Input{
		GPUs: fleet("a", 2, "b", 2),
		Running: []RunningJob{
			pre("j-p1", "a", "a-0"), pre("j-p2", "a", "a-1"),
			pre("j-p3", "b", "b-0", "b-1"),
		},
		Queued: []QueuedJob{queued(1, "ann", 2)},
		Now:    t0.Add(time.Hour),
	}
	p := Schedule(in)
	if want := []Preemption{{JobID: "j-p3", For: "j-000001"}}; !slices.Equal(p.Preemptions, want) {
		t.Errorf("preemptions = %v, want %v", p.Preemptions, want)
	}
}

// TestFleetMemoryJobs: a memory job chooses its node among those with a
// shared GPU it fits on, and waits with each open GPU's story.
func TestFleetMemoryJobs(t *testing.T) {
	in := Input{
		GPUs: fleet("a", 2, "b", 2),
		Running: []RunningJob{
			{ID: "j-m", User: "zed", GPUs: []string{"b-1"}, GPUMemory: 30 * gib, StartedAt: t0, Node: "b"},
		},
		Queued: []QueuedJob{{ID: "j-000001", User: "ann", GPUMemory: 20 * gib, SubmittedAt: t0}},
		Config: Config{SharedGPUs: []string{"a-1", "b-1"}},
		Now:    t0,
	}
	for pl, want := range map[Placement]string{Binpack: "j-000001@b=b-1", Spread: "j-000001@a=a-1"} {
		in.Config.Placement = pl
		p := Schedule(in)
		if got := nodeStarts(p); !slices.Equal(got, []string{want}) {
			t.Errorf("%s: starts = %q, want %q", pl, got, want)
		} else if n := p.Starts[0].Placement.Nodes; len(n) != 2 || !n[0].Chosen {
			t.Errorf("%s: nodes = %+v", pl, n)
		}
	}
	in.Queued[0].GPUMemory = 50 * gib
	in.Queued[0].Node = "b"
	check(t, Schedule(in), nil, []string{
		"j-000001 resources: waiting for 50.0 GiB on a shared GPU; GPU 1 of b has 42.0 GiB of its 72.0 GiB free (30.0 GiB declared by jobs); no job ahead of you waits for shared GPU memory; no start estimate: what it waits for has no time limit",
	})
}

// TestOneNamedNodeIsOneHost: a fleet of one named node gives the starts
// and reasons one host gives.
func TestOneNamedNodeIsOneHost(t *testing.T) {
	r := newRand(11)
	for iter := range 1000 {
		in := randomInput(r)
		want := Schedule(in)
		in.GPUs = slices.Clone(in.GPUs)
		for i := range in.GPUs {
			in.GPUs[i].Node = "only"
		}
		got := Schedule(in)
		if !slices.Equal(starts(got), starts(want)) {
			t.Fatalf("pass %d: starts on one named node %q, on one host %q", iter, starts(got), starts(want))
		}
		for k := range got.Waits {
			g, w := got.Waits[k], want.Waits[k]
			if g.JobID != w.JobID || g.Reason != w.Reason || !g.EstimatedStart.Equal(w.EstimatedStart) {
				t.Fatalf("pass %d: wait %d on one named node %+v, on one host %+v", iter, k, g, w)
			}
		}
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

// TestConsolidate: quiet nodes whose jobs fit elsewhere at the target
// could be drained, all of them together; busy ones, ones with a job too
// big for the room elsewhere, and ones with use outside the queue not.
func TestConsolidate(t *testing.T) {
	in := Input{
		GPUs: fleet("a", 4, "b", 4, "c", 4, "d", 2, "e", 2),
		Running: []RunningJob{
			{ID: "j-a1", User: "ann", GPUs: []string{"a-0"}, Node: "a"},
			{ID: "j-b1", User: "bob", GPUs: []string{"b-0", "b-1"}, Node: "b"},
			{ID: "j-c1", User: "cat", GPUs: []string{"c-0", "c-1", "c-2"}, Node: "c"},
			{ID: "j-d1", User: "dan", GPUs: []string{"d-0", "d-1"}, Node: "d"},
		},
		Outside: Outside{Containers: []OutsideContainer{{Name: "notebook", GPUs: []string{"e-1"}}}},
		Util: map[string]float64{
			"a-0": 0.4, "b-0": 0.6, "b-1": 0.6, "c-0": 0.9, "c-1": 0.9, "c-2": 0.9, "d-0": 0.2, "d-1": 0.2,
		},
		Config: Config{TargetUtilization: 0.7},
	}
	got := Consolidate(in)
	want := []ConsolidateAdvice{
		// Tried least loaded first: e (use outside the queue), a, b, d, c.
		// a's job goes to e, the node with room and the fewest free GPUs.
		{Node: "a", Drain: true, Jobs: []string{"j-a1"}, Moves: []Move{{"j-a1", "e"}},
			Why: "its 1 job fit on the other nodes (j-a1 to e), none of them over 20% of the 70% target utilisation"},
		// b's 2 GPUs: c has 1 free, e none now, d is busy, a gives.
		{Node: "b", Jobs: []string{"j-b1"}, Why: "j-b1 (2 GPUs) fits on no other node's free GPUs"},
		{Node: "c", Jobs: []string{"j-c1"}, Why: "j-c1 (3 GPUs) fits on no other node's free GPUs"},
		// d's go to b: (0.6 + 0.6 + 0.2 + 0.2) / 4 = 40%.
		{Node: "d", Drain: true, Jobs: []string{"j-d1"}, Moves: []Move{{"j-d1", "b"}},
			Why: "its 1 job fit on the other nodes (j-d1 to b), none of them over 40% of the 70% target utilisation"},
		{Node: "e", Why: "container notebook, outside the queue, uses a GPU there: the queue cannot move it"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("advice (-want +got):\n%s", diff)
	}
	// Busier, d's jobs would take b past the target: (1 + 1 + 0.5 + 0.5) / 4.
	in.Util["b-0"], in.Util["b-1"], in.Util["d-0"], in.Util["d-1"] = 1, 1, 0.5, 0.5
	if got := Consolidate(in)[3]; got.Drain || got.Why != "j-d1 (2 GPUs) would take every other node with room past the 70% target utilisation (b, queue.target_utilization)" {
		t.Errorf("d: %+v", got)
	}
	// The same input gives the same advice.
	if !cmp.Equal(Consolidate(in), Consolidate(in)) {
		t.Error("two calls gave other advice")
	}
}

// TestConsolidateKeepsConstraints: a job is moved only to a node it could
// have started on: its --node and --model, and the nodes' queue.images.
func TestConsolidateKeepsConstraints(t *testing.T) {
	gs := slices.Concat(fleet("a", 4), nodeGPUs("b", 4, "A100"), fleet("c", 4))
	base := func(r RunningJob) Input {
		r.ID, r.User, r.GPUs, r.Node, r.Image = "j-a1", "ann", []string{"a-0"}, "a", "lab/train:1"
		// b and c run a job each, so that neither is advised first and
		// gives rather than takes.
		return Input{GPUs: gs, Running: []RunningJob{r,
			{ID: "j-b1", User: "bob", GPUs: []string{"b-0"}, Node: "b"}, {ID: "j-c1", User: "cat", GPUs: []string{"c-0"}, Node: "c"}},
			Config: Config{TargetUtilization: 0.7}}
	}
	advice := func(in Input) ConsolidateAdvice {
		for _, a := range Consolidate(in) {
			if a.Node == "a" {
				return a
			}
		}
		t.Fatal("no advice for node a")
		return ConsolidateAdvice{}
	}
	// Unconstrained, a's job goes to b: the fewest free GPUs, then the name.
	if a := advice(base(RunningJob{})); !a.Drain || !cmp.Equal(a.Moves, []Move{{"j-a1", "b"}}) {
		t.Fatalf("unconstrained: %+v", a)
	}
	pinned := advice(base(RunningJob{NodeGlob: "a"}))
	if pinned.Drain || pinned.Why != "j-a1 (1 GPU) fits on no other node's free GPUs that it may run on (its --node or --model, or the nodes' queue.images: 2 nodes barred)" {
		t.Errorf("--node a: %+v", pinned)
	}
	if a := advice(base(RunningJob{ModelGlob: "*H100*"})); !a.Drain || !cmp.Equal(a.Moves, []Move{{"j-a1", "c"}}) {
		t.Errorf("--model *H100*: %+v, want it moved to c, not to b's A100s", a)
	}
	images := base(RunningJob{})
	images.NodeImages = map[string][]string{"b": {"other/*"}, "c": {"lab/*"}}
	if a := advice(images); !a.Drain || !cmp.Equal(a.Moves, []Move{{"j-a1", "c"}}) {
		t.Errorf("b refusing the image: %+v, want it moved to c", a)
	}
	images.NodeImages["c"] = []string{"other/*"}
	if a := advice(images); a.Drain {
		t.Errorf("every other node refusing the image: %+v, want no drain", a)
	}
}

// TestFleetDeterministic: the GPUs' and jobs' order in the input does not
// change a fleet's plan, nor does Schedule change its input.
func TestFleetDeterministic(t *testing.T) {
	in := fleetBenchInput(6, true)
	in.Queued = in.Queued[:600]
	want := Schedule(in)
	if len(want.Starts) < 20 {
		t.Fatalf("only %d starts", len(want.Starts))
	}
	r := newRand(3)
	for range 10 {
		r.Shuffle(len(in.GPUs), func(i, j int) { in.GPUs[i], in.GPUs[j] = in.GPUs[j], in.GPUs[i] })
		r.Shuffle(len(in.Queued), func(i, j int) { in.Queued[i], in.Queued[j] = in.Queued[j], in.Queued[i] })
		keep := slices.Clone(in.Queued)
		if got := Schedule(in); !cmp.Equal(got, want, cmp.AllowUnexported(Wait{}, waitFigures{})) {
			t.Fatalf("GPUs and jobs in another order gave another plan:\n got %q\nwant %q", nodeStarts(got), nodeStarts(want))
		}
		if !slices.Equal(in.Queued, keep) {
			t.Fatal("Schedule changed its input")
		}
	}
}
