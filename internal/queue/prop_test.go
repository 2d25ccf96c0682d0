package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// randomInput returns a pass over a random host: some GPUs shared, some
// held by jobs or containers outside the queue, whole and memory jobs
// queued and running, caps, budgets and utilisation.
func randomInput(r *rand.Rand) Input {
	n := 2 + r.IntN(7)
	in := Input{GPUs: hostGPUs(n), Now: t0.Add(time.Duration(r.IntN(600)) * time.Minute)}
	placements := []Placement{Binpack, Spread, Target}
	in.Config = Config{
		Placement:            placements[r.IntN(3)],
		MaxGPUsPerUser:       1 + r.IntN(4),
		MaxGPUsPerTeam:       r.IntN(5),
		SharedMemoryFraction: 0.5 + r.Float64()/2,
		Weights:              Weights{FairShare: r.Float64(), Age: r.Float64(), Class: r.Float64()},
	}
	in.FairShare, in.Util, in.Expected = map[string]float64{}, map[string]float64{}, map[string]float64{}
	in.OverBudget = map[string]bool{"t2": r.IntN(2) == 0}
	for u := range 5 {
		in.FairShare[fmt.Sprintf("u%d", u)] = r.Float64()
		in.Expected[fmt.Sprintf("u%d", u)] = r.Float64()
	}
	in.Outside.MemoryUsed = map[string]uint64{}
	for i := range in.GPUs {
		uuid := in.GPUs[i].UUID
		in.Util[uuid] = r.Float64()
		if r.IntN(3) == 0 {
			in.Config.SharedGPUs = append(in.Config.SharedGPUs, uuid)
		}
		if r.IntN(4) == 0 {
			in.Outside.MemoryUsed[uuid] = uint64(r.IntN(20)) * gib
		}
		if r.IntN(8) == 0 {
			in.Outside.Containers = append(in.Outside.Containers, OutsideContainer{Name: "c" + uuid, GPUs: []string{uuid}})
		}
	}
	for k := range r.IntN(6) {
		g := in.GPUs[r.IntN(n)].UUID
		rj := RunningJob{ID: fmt.Sprintf("j-r%d", k), User: fmt.Sprintf("u%d", r.IntN(5)), Team: fmt.Sprintf("t%d", r.IntN(3)),
			GPUs: []string{g}, StartedAt: t0, TimeLimit: time.Duration(r.IntN(600)) * time.Minute}
		if r.IntN(2) == 0 {
			rj.GPUMemory = uint64(1+r.IntN(30)) * gib
		}
		in.Running = append(in.Running, rj)
	}
	for k := range 1 + r.IntN(30) {
		j := queued(k+1, fmt.Sprintf("u%d", r.IntN(5)), 1+r.IntN(3))
		j.Team = fmt.Sprintf("t%d", r.IntN(3))
		j.TimeLimit = time.Duration(r.IntN(300)) * time.Minute
		j.Class = []Class{ClassLow, "", ClassHigh}[r.IntN(3)]
		j.Held = r.IntN(10) == 0
		if r.IntN(2) == 0 {
			j.GPUs, j.GPUMemory = 0, uint64(1+r.IntN(50))*gib
		}
		in.Queued = append(in.Queued, j)
	}
	return in
}

// TestPropertiesOfAPass checks, over random passes: every queued job is
// started or waits, once; no GPU is given twice, nor one a whole-GPU job or
// a container outside the queue holds, nor a shared GPU to a whole-GPU job;
// the memory declared on a shared GPU stays within its fraction.
func TestPropertiesOfAPass(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	memStarts := 0
	for iter := range 3000 {
		in := randomInput(r)
		memStarts += checkPass(t, iter, in, Schedule(in))
	}
	if memStarts < 100 {
		t.Fatalf("only %d memory jobs started over all passes: the generator tests too little", memStarts)
	}
}

// checkPass checks TestPropertiesOfAPass's properties of plan p of in
// and returns how many memory jobs it starts.
func checkPass(t *testing.T, iter int, in Input, p Plan) int {
	t.Helper()
	memStarts := 0
	seen := map[string]bool{}
	for _, id := range append(startIDs(p), waitIDs(p)...) {
		if seen[id] {
			t.Fatalf("pass %d: %s is in the plan twice", iter, id)
		}
		seen[id] = true
	}
	if len(seen) != len(in.Queued) || len(p.Order) != len(in.Queued) {
		t.Fatalf("pass %d: %d jobs in the plan, %d in the order, for %d queued", iter, len(seen), len(p.Order), len(in.Queued))
	}
	shared, taken, declared := map[string]bool{}, map[string]bool{}, map[string]uint64{}
	for _, u := range in.Config.SharedGPUs {
		shared[u] = true
	}
	for _, c := range in.Outside.Containers {
		for _, u := range c.GPUs {
			taken[u] = true
		}
	}
	for _, rj := range in.Running {
		for _, u := range rj.GPUs {
			if rj.GPUMemory > 0 {
				declared[u] += rj.GPUMemory
			} else {
				taken[u] = true
			}
		}
	}
	jobs := map[string]QueuedJob{}
	for _, j := range in.Queued {
		jobs[j.ID] = j
	}
	for _, s := range p.Starts {
		j := jobs[s.JobID]
		if j.GPUMemory > 0 {
			if len(s.GPUs) != 1 || !shared[s.GPUs[0]] || taken[s.GPUs[0]] {
				t.Fatalf("pass %d: memory job %s got %v", iter, j.ID, s.GPUs)
			}
			declared[s.GPUs[0]] += j.GPUMemory
			memStarts++
			continue
		}
		if len(s.GPUs) != j.GPUs {
			t.Fatalf("pass %d: %s got %d GPUs, asked for %d", iter, j.ID, len(s.GPUs), j.GPUs)
		}
		for _, u := range s.GPUs {
			if taken[u] || shared[u] || declared[u] > 0 {
				t.Fatalf("pass %d: %s got GPU %s, which is taken or shared", iter, j.ID, u)
			}
			taken[u] = true
		}
	}
	for u, d := range declared {
		started := false
		for _, s := range p.Starts {
			started = started || jobs[s.JobID].GPUMemory > 0 && s.GPUs[0] == u
		}
		limit := uint64(in.Config.SharedMemoryFraction * 80 * gib)
		if started && d+in.Outside.MemoryUsed[u] > limit {
			t.Fatalf("pass %d: GPU %s has %d declared and %d outside, over %d", iter, u, d, in.Outside.MemoryUsed[u], limit)
		}
	}
	return memStarts
}

// randomFleet is randomInput over nodes: its GPUs spread over two to
// five nodes of one or two models, some drained, the running jobs on one
// node each, and some queued jobs with a --node or --model glob.
func randomFleet(r *rand.Rand) Input {
	in := randomInput(r)
	nodes := 2 + r.IntN(4)
	more := hostGPUs(r.IntN(12))
	for i := range more {
		more[i].UUID = fmt.Sprintf("GPU-m%d", i)
	}
	in.GPUs = append(in.GPUs, more...)
	models := []string{"H100-SXM", "A100-PCIE"}
	for i := range in.GPUs {
		g := &in.GPUs[i]
		g.Node = fmt.Sprintf("node-%d", r.IntN(nodes))
		g.Model = models[r.IntN(2)]
		g.Index = i % 8
		in.Util[g.UUID] = r.Float64()
	}
	in.Drained = map[string]bool{}
	if r.IntN(3) == 0 {
		in.Drained[fmt.Sprintf("node-%d", r.IntN(nodes))] = true
	}
	// Running whole-GPU jobs hold GPUs of one node: regroup them.
	byUUID := map[string]GPU{}
	for _, g := range in.GPUs {
		byUUID[g.UUID] = g
	}
	for k := range in.Running {
		rj := &in.Running[k]
		rj.Node = byUUID[rj.GPUs[0]].Node
		if rj.GPUMemory == 0 && r.IntN(2) == 0 {
			for _, g := range in.GPUs {
				if g.Node == rj.Node && !slices.Contains(rj.GPUs, g.UUID) && len(rj.GPUs) < 3 {
					rj.GPUs = append(rj.GPUs, g.UUID)
				}
			}
		}
	}
	globs := []string{"node-1", "node-[23]", "node-*", "nope", "node-["}
	for k := range in.Queued {
		j := &in.Queued[k]
		if j.GPUMemory == 0 && r.IntN(3) == 0 {
			j.GPUs = []int{1, 2, 4}[r.IntN(3)]
		}
		if r.IntN(5) == 0 {
			j.Node = globs[r.IntN(len(globs))]
		}
		if r.IntN(6) == 0 {
			j.Model = []string{"H100*", "A100-PCIE", "V100"}[r.IntN(3)]
		}
	}
	return in
}

// TestPropertiesOfAFleetPass checks TestPropertiesOfAPass's properties
// over random fleets, and more: every start's GPUs exist and are on one
// node, the start's and its record's, open to the job (its globs match,
// the node is not drained).
func TestPropertiesOfAFleetPass(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	memStarts, starts, spread := 0, 0, 0
	for iter := range 3000 {
		in := randomFleet(r)
		p := Schedule(in)
		memStarts += checkPass(t, iter, in, p)
		gpus := map[string]GPU{}
		for _, g := range in.GPUs {
			gpus[g.UUID] = g
		}
		jobs := map[string]QueuedJob{}
		for _, j := range in.Queued {
			jobs[j.ID] = j
		}
		for _, s := range p.Starts {
			j := jobs[s.JobID]
			starts++
			if s.Placement == nil || len(s.Placement.Nodes) == 0 || !s.Placement.Nodes[0].Chosen || s.Placement.Nodes[0].Node != s.Node {
				t.Fatalf("pass %d: %s on %s has the record %+v", iter, j.ID, s.Node, s.Placement)
			}
			for _, u := range s.GPUs {
				g, ok := gpus[u]
				switch {
				case !ok:
					t.Fatalf("pass %d: %s got GPU %s, which does not exist", iter, j.ID, u)
				case g.Node != s.Node:
					t.Fatalf("pass %d: %s got GPU %s of %s, starting on %s", iter, j.ID, u, g.Node, s.Node)
				case in.Drained[g.Node]:
					t.Fatalf("pass %d: %s started on drained %s", iter, j.ID, g.Node)
				case !match(j.Node, g.Node) || !match(j.Model, g.Model):
					t.Fatalf("pass %d: %s (--node %q --model %q) got %s of %s (%s)", iter, j.ID, j.Node, j.Model, u, g.Node, g.Model)
				}
			}
			if len(s.GPUs) > 1 {
				spread++
			}
		}
	}
	if memStarts < 100 || starts < 3000 || spread < 500 {
		t.Fatalf("%d starts, %d of several GPUs, %d memory jobs: the generator tests too little", starts, spread, memStarts)
	}
}

func startIDs(p Plan) []string {
	var ids []string
	for _, s := range p.Starts {
		ids = append(ids, s.JobID)
	}
	return ids
}

func waitIDs(p Plan) []string {
	var ids []string
	for _, w := range p.Waits {
		ids = append(ids, w.JobID)
	}
	return ids
}

// TestHeadStartsByItsReservation simulates a host of four GPUs over
// virtual time: a two-GPU head job waits while a stream of one-GPU jobs
// from other users arrives, each ending at a random time within its limit.
// The head must start no later than the first reservation it was given,
// and backfill must have happened around it.
func TestHeadStartsByItsReservation(t *testing.T) {
	headStartsByReservation(t, hostGPUs(4))
}

// TestFleetHeadStartsByItsReservation is TestHeadStartsByItsReservation
// on a fleet of two nodes of two GPUs and one of one: the 2-GPU head
// must start by its first reservation on one node.
func TestFleetHeadStartsByItsReservation(t *testing.T) {
	headStartsByReservation(t, fleet("a", 2, "b", 2, "c", 1))
}

// headStartsByReservation runs TestHeadStartsByItsReservation's
// simulation on gpus, a job without a limit on each at first.
func headStartsByReservation(t *testing.T, gpus []GPU) {
	t.Helper()
	totalBackfill := 0
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		type live struct {
			job RunningJob
			end time.Time
		}
		var runs []live
		for i, g := range gpus {
			limit := time.Duration(30+r.IntN(240)) * time.Minute
			runs = append(runs, live{running(fmt.Sprintf("j-init%d", i), "zed", t0, limit, g.UUID), t0.Add(limit)})
		}
		head := limited(0, "ann", 2, 3*time.Hour)
		head.SubmittedAt = t0
		queue := []QueuedJob{head}
		var reservation, headStart time.Time
		backfilled := 0
		next := 1
		for now := t0; headStart.IsZero(); now = now.Add(time.Minute) {
			if now.After(t0.Add(24 * time.Hour)) {
				t.Fatalf("seed %d: the head never started", seed)
			}
			kept := runs[:0]
			for _, l := range runs {
				if l.end.After(now) {
					kept = append(kept, l)
				}
			}
			runs = kept
			if r.IntN(4) == 0 {
				j := limited(next, fmt.Sprintf("u%d", next%5), 1, time.Duration(5+r.IntN(180))*time.Minute)
				j.SubmittedAt = now
				queue = append(queue, j)
				next++
			}
			in := Input{GPUs: gpus, Queued: queue, Now: now, Config: Config{MaxGPUsPerUser: 4}}
			for _, l := range runs {
				in.Running = append(in.Running, l.job)
			}
			p := Schedule(in)
			started := map[string][]string{}
			for _, s := range p.Starts {
				started[s.JobID] = s.GPUs
			}
			for _, w := range p.Waits {
				if w.JobID != head.ID || w.EstimatedStart.IsZero() {
					continue
				}
				if reservation.IsZero() {
					reservation = w.EstimatedStart
				} else if w.EstimatedStart.After(reservation) {
					t.Fatalf("seed %d: at %v the head's estimate moved from %v to %v", seed, now.Format("15:04"), reservation.Format("15:04"), w.EstimatedStart.Format("15:04"))
				}
			}
			kq := queue[:0]
			for _, j := range queue {
				gpus, ok := started[j.ID]
				if !ok {
					kq = append(kq, j)
					continue
				}
				if j.ID == head.ID {
					headStart = now
				} else if headStart.IsZero() && !reservation.IsZero() {
					backfilled++
				}
				d := time.Duration(1+r.Int64N(int64(j.TimeLimit/time.Minute))) * time.Minute
				runs = append(runs, live{RunningJob{ID: j.ID, User: j.User, GPUs: gpus, StartedAt: now, TimeLimit: j.TimeLimit}, now.Add(d)})
			}
			queue = kq
		}
		if reservation.IsZero() {
			continue // it started at once: nothing to check
		}
		if headStart.After(reservation) {
			t.Errorf("seed %d: the head started at %v, after its reservation at %v", seed, headStart.Format("15:04"), reservation.Format("15:04"))
		}
		totalBackfill += backfilled
	}
	if totalBackfill == 0 {
		t.Fatal("no job ever backfilled around the head: the test proves nothing")
	}
}
