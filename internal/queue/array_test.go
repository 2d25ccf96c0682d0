package queue

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArray(t *testing.T) {
	for _, tc := range []struct {
		in      string
		indices []int
		max     int
		text    string
	}{
		{"0-3", []int{0, 1, 2, 3}, 0, "0-3"},
		{"0-3%2", []int{0, 1, 2, 3}, 2, "0-3%2"},
		{"1,3,5", []int{1, 3, 5}, 0, "1,3,5"},
		{"0-6:3", []int{0, 3, 6}, 0, "0,3,6"},
		{"7,0-2%1", []int{7, 0, 1, 2}, 1, "7,0-2%1"},
		{"5", []int{5}, 0, "5"},
		{"0-1%8", []int{0, 1}, 0, "0-1"}, // a cap above the count caps nothing
	} {
		got, err := ParseArray(tc.in)
		if err != nil {
			t.Errorf("ParseArray(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(got.Indices, tc.indices) || got.MaxRunning != tc.max {
			t.Errorf("ParseArray(%q) = %v %%%d, want %v %%%d", tc.in, got.Indices, got.MaxRunning, tc.indices, tc.max)
		}
		if s := got.String(); s != tc.text {
			t.Errorf("ParseArray(%q).String() = %q, want %q", tc.in, s, tc.text)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "the array is empty"},
		{"0-9%0", "%0 is not a number of tasks of 1 or more"},
		{"0-9%x", "%x is not a number of tasks"},
		{"0-9%", "% is not a number of tasks"},
		{"9-0", "range 9-0 ends before it begins"},
		{"-1", `"" is not an index`},
		{"a-b", `"a" is not an index`},
		{"1,,2", `"" is not an index`},
		{"1,1", "names index 1 twice"},
		{"0-3,2", "names index 2 twice"},
		{"5:2", "has a step but no range"},
		{"0-9:0", `step "0" is not a number of 1 or more`},
		{"0-9:-1", `step "-1" is not a number`},
		{"0-10000", "more than 10000 tasks"},
		{"1000001", "index 1000001 is over 1000000"},
		{"0-9%2%3", "is not a number of tasks"},
		{" 1", `" 1" is not an index`},
		{"+1", `"+1" is not an index`},
	} {
		_, err := ParseArray(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArray(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// task returns task index of array arrayID, capped at max, submitted n
// minutes after t0.
func task(arrayID string, index, max, n int) QueuedJob {
	j := queued(n, "ann", 1)
	j.ID, j.Array, j.ArrayMax = fmt.Sprintf("%s_%d", arrayID, index), arrayID, max
	return j
}

// TestArrayLimit: a capped array starts no more of its tasks than its
// cap, counting those that run and those this pass starts; the tasks
// held back say why and do not hold up a job behind them.
func TestArrayLimit(t *testing.T) {
	in := Input{GPUs: hostGPUs(4), Now: t0.Add(time.Hour), Config: Config{MaxGPUsPerUser: 8}}
	for i := range 4 {
		in.Queued = append(in.Queued, task("j-000001", i, 2, 1))
	}
	later := queued(9, "bob", 1)
	in.Queued = append(in.Queued, later)
	check(t, Schedule(in),
		[]string{"j-000001_0=GPU-0", "j-000001_1=GPU-1", "j-000009=GPU-2"},
		[]string{
			"j-000001_2 array_limit: 2 of array j-000001's tasks run, its limit (%2); this task starts when one of them ends",
			"j-000001_3 array_limit: 2 of array j-000001's tasks run, its limit (%2); this task starts when one of them ends",
		})

	// One task runs: one more starts.
	in.Queued = []QueuedJob{task("j-000001", 1, 2, 1), task("j-000001", 2, 2, 1), task("j-000001", 3, 2, 1)}
	in.Running = []RunningJob{{ID: "j-000001_0", User: "ann", GPUs: []string{"GPU-0"}, StartedAt: t0, Array: "j-000001"}}
	check(t, Schedule(in),
		[]string{"j-000001_1=GPU-1"},
		[]string{
			"j-000001_2 array_limit: 2 of array j-000001's tasks run, its limit (%2); this task starts when one of them ends",
			"j-000001_3 array_limit: 2 of array j-000001's tasks run, its limit (%2); this task starts when one of them ends",
		})

	// Another array's tasks and an uncapped array are not counted.
	in.Queued = []QueuedJob{task("j-000001", 1, 2, 1), task("j-000005", 0, 1, 2), task("j-000007", 0, 0, 3), task("j-000007", 1, 0, 3)}
	in.Running = []RunningJob{
		{ID: "j-000001_0", User: "ann", GPUs: []string{"GPU-0"}, StartedAt: t0, Array: "j-000001"},
		{ID: "j-000001_9", User: "ann", GPUs: []string{"GPU-1"}, StartedAt: t0, Array: "j-000001"},
	}
	check(t, Schedule(in),
		[]string{"j-000005_0=GPU-2", "j-000007_0=GPU-3"},
		[]string{
			"j-000001_1 array_limit: 2 of array j-000001's tasks run, its limit (%2); this task starts when one of them ends",
			"j-000007_1 resources: waiting for 1 free GPU; none is free; no job ahead of you waits for GPUs; no start estimate: what it waits for has no time limit",
		})
}

// TestArrayLimitHeldTaskNoReservation: a task held back by its cap does
// not become the head of the queue, so a small job behind it backfills
// as if it were not there.
func TestArrayLimitHeldTaskNoReservation(t *testing.T) {
	in := Input{GPUs: hostGPUs(2), Now: t0.Add(time.Hour), Config: Config{MaxGPUsPerUser: 8}}
	in.Running = []RunningJob{{ID: "j-000001_0", User: "ann", GPUs: []string{"GPU-0"}, StartedAt: t0, TimeLimit: 10 * time.Hour, Array: "j-000001"}}
	in.Queued = []QueuedJob{task("j-000001", 1, 1, 1), queued(5, "bob", 1)}
	in.Queued[1].TimeLimit = 100 * time.Hour
	p := Schedule(in)
	if got := starts(p); !slices.Equal(got, []string{"j-000005=GPU-1"}) {
		t.Errorf("starts %q, want j-000005 on GPU-1", got)
	}
	if len(p.Waits) != 1 || p.Waits[0].Reason != ReasonArrayLimit || !p.Waits[0].EstimatedStart.IsZero() {
		t.Errorf("waits %+v, want j-000001_1 array_limit with no estimate", p.Waits)
	}
}
