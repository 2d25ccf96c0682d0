package sqlledger

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestGroupGathersWhileWriting checks that the calls arriving while a
// group is written go together in the next one, that each call is in
// exactly one group, and that a call arriving when none is written goes
// alone at once.
func TestGroupGathersWhileWriting(t *testing.T) {
	var g group
	release := make(chan struct{})
	started := make(chan struct{})
	var (
		mu     sync.Mutex
		groups [][]int
	)
	write := func(calls []*submitCall) {
		mu.Lock()
		var seqs []int
		for _, c := range calls {
			seqs = append(seqs, int(c.job.Seq))
			c.out.Seq = c.job.Seq * 10
		}
		groups = append(groups, seqs)
		first := len(groups) == 1 && seqs[0] == 1
		mu.Unlock()
		if first {
			close(started)
			<-release
		}
	}
	call := func(seq int64) *submitCall {
		c := &submitCall{ctx: context.Background()}
		c.job.Seq = seq
		return c
	}
	var wg sync.WaitGroup
	run := func(c *submitCall) {
		wg.Add(1)
		go func() { defer wg.Done(); g.do(c, write) }()
	}
	first := call(1)
	run(first)
	<-started
	rest := make([]*submitCall, 10)
	for i := range rest {
		rest[i] = call(int64(i + 2))
		run(rest[i])
	}
	// Wait until all ten are pending behind the first group.
	deadline := time.Now().Add(time.Minute)
	for {
		g.mu.Lock()
		n := len(g.pending)
		g.mu.Unlock()
		if n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls pending after a minute, want 10", n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if len(groups) != 2 || len(groups[0]) != 1 || len(groups[1]) != 10 {
		t.Fatalf("groups %v, want [1] then the other ten together", groups)
	}
	seen := map[int]bool{}
	for _, gr := range groups {
		for _, s := range gr {
			if seen[s] {
				t.Errorf("call %d written twice", s)
			}
			seen[s] = true
		}
	}
	for _, c := range append(rest, first) {
		if c.out.Seq != c.job.Seq*10 {
			t.Errorf("call %d: out %d, want its own result %d", c.job.Seq, c.out.Seq, c.job.Seq*10)
		}
	}
	if g.writing || len(g.pending) != 0 {
		t.Errorf("after every call: writing %v, %d pending; want idle", g.writing, len(g.pending))
	}
	// Idle again: the next call is written alone, at once.
	groups = nil
	g.do(call(99), write)
	if len(groups) != 1 || len(groups[0]) != 1 || groups[0][0] != 99 {
		t.Errorf("a call on an idle group: groups %v, want [[99]]", groups)
	}
}

// TestGroupCapsItsSize checks that no group is larger than
// maxSubmitGroup, however many calls wait.
func TestGroupCapsItsSize(t *testing.T) {
	var g group
	var mu sync.Mutex
	var sizes []int
	var total int
	write := func(calls []*submitCall) {
		mu.Lock()
		sizes = append(sizes, len(calls))
		total += len(calls)
		mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	const n = 3 * maxSubmitGroup
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); g.do(&submitCall{ctx: context.Background()}, write) }()
	}
	wg.Wait()
	if total != n {
		t.Fatalf("%d calls written, want %d", total, n)
	}
	for _, s := range sizes {
		if s < 1 || s > maxSubmitGroup {
			t.Errorf("a group of %d, want 1 to %d", s, maxSubmitGroup)
		}
	}
}
