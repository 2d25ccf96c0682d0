package queue

import (
	"strings"
	"testing"
)

// TestCheckDependencies: each condition against each way a job named
// can stand, arrays standing for all of their tasks, and the sentence
// naming the job that decides.
func TestCheckDependencies(t *testing.T) {
	jobs := map[string]DependedJob{
		"j-1":   {Known: true, State: Running},
		"j-2":   {Known: true, State: Succeeded, Reason: ReasonExitCode},
		"j-3":   {Known: true, State: Failed, Reason: ReasonExitCode},
		"j-4":   {Known: true, State: Cancelled, Reason: ReasonCancelled},
		"j-5":   {Known: true, State: Queued},
		"j-6":   {Known: true, State: Timeout, Reason: ReasonTimeLimit},
		"j-7":   {Known: true, State: Lost},
		"j-bad": {Known: true, State: "exploded"},
		// Arrays: all done and succeeded; one still running; one task failed.
		"a-ok":   {Known: true, Count: 2, Tasks: map[string]State{"a-ok_0": Succeeded, "a-ok_1": Succeeded}},
		"a-run":  {Known: true, Count: 3, Tasks: map[string]State{"a-run_0": Succeeded, "a-run_1": Running, "a-run_2": Queued}},
		"a-fail": {Known: true, Count: 12, Tasks: map[string]State{"a-fail_10": Failed, "a-fail_2": Failed, "a-fail_1": Succeeded}},
		// Fewer tasks seen than the array has: not all done.
		"a-part": {Known: true, Count: 3, Tasks: map[string]State{"a-part_0": Succeeded}},
	}
	look := func(id string) DependedJob { return jobs[id] }
	dep := func(typ DependencyType, ids ...string) []Dependency {
		var out []Dependency
		for _, id := range ids {
			out = append(out, Dependency{Type: typ, ID: id})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		deps []Dependency
		want DependencyStatus
		// text must contain each of these.
		text []string
	}{
		{"none", nil, DependencyMet, nil},
		{"ok on a running job", dep(AfterOK, "j-1"), DependencyWaiting, []string{"waiting for j-1 to succeed (running)"}},
		{"ok on a queued job", dep(AfterOK, "j-5"), DependencyWaiting, []string{"j-5 to succeed (queued)"}},
		{"ok on a lost job waits for its decision", dep(AfterOK, "j-7"), DependencyWaiting, []string{"j-7 to succeed (lost)"}},
		{"ok on a succeeded job", dep(AfterOK, "j-2"), DependencyMet, nil},
		{"ok on a failed job", dep(AfterOK, "j-3"), DependencyNever, []string{"j-3 ended failed (exit_code)", "--after ok:j-3"}},
		{"ok on a cancelled job", dep(AfterOK, "j-4"), DependencyNever, []string{"j-4 ended cancelled"}},
		{"ok on a timed-out job", dep(AfterOK, "j-6"), DependencyNever, []string{"j-6 ended timeout (time_limit)"}},
		{"any on a running job", dep(AfterAny, "j-1"), DependencyWaiting, []string{"j-1 to end (running)"}},
		{"any on a failed job", dep(AfterAny, "j-3"), DependencyMet, nil},
		{"any on a cancelled job", dep(AfterAny, "j-4"), DependencyMet, nil},
		{"any on a succeeded job", dep(AfterAny, "j-2"), DependencyMet, nil},
		{"fail on a running job", dep(AfterFail, "j-1"), DependencyWaiting, []string{"j-1 to fail (running)"}},
		{"fail on a failed job", dep(AfterFail, "j-3"), DependencyMet, nil},
		{"fail on a timed-out job", dep(AfterFail, "j-6"), DependencyMet, nil},
		{"fail on a succeeded job", dep(AfterFail, "j-2"), DependencyNever, []string{"j-2 ended succeeded", "would fail", "--after fail:j-2"}},
		{"an unknown job", dep(AfterAny, "j-404"), DependencyNever, []string{"j-404 is no longer known"}},
		{"a damaged state", dep(AfterAny, "j-bad"), DependencyNever, []string{"j-bad ended exploded"}},
		{"never wins over waiting", append(dep(AfterOK, "j-1"), dep(AfterOK, "j-3")...), DependencyNever, []string{"j-3"}},
		{"two waiting", append(dep(AfterOK, "j-1"), dep(AfterAny, "j-5")...), DependencyWaiting, []string{"j-1 to succeed (running) and 1 more"}},
		{"one met, one waiting", append(dep(AfterOK, "j-2"), dep(AfterAny, "j-1")...), DependencyWaiting, []string{"waiting for j-1 to end (running)"}},
		{"all met", append(dep(AfterOK, "j-2"), dep(AfterFail, "j-3")...), DependencyMet, nil},
		{"array all succeeded", dep(AfterOK, "a-ok"), DependencyMet, nil},
		{"array running", dep(AfterOK, "a-run"), DependencyWaiting, []string{"every task of a-run to succeed (1 of 3 done)"}},
		{"array with a failed task, ok", dep(AfterOK, "a-fail"), DependencyNever, []string{"task a-fail_2 of array a-fail ended failed"}},
		{"array with a failed task, any", dep(AfterAny, "a-fail"), DependencyWaiting, []string{"(3 of 12 done)"}},
		{"array all succeeded, fail", dep(AfterFail, "a-ok"), DependencyNever, []string{"task a-ok_0 of array a-ok ended succeeded"}},
		{"array seen in part", dep(AfterOK, "a-part"), DependencyWaiting, []string{"(1 of 3 done)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckDependencies(tc.deps, look)
			if got.Status != tc.want {
				t.Errorf("status %d (%q), want %d", got.Status, got.Text, tc.want)
			}
			for _, s := range tc.text {
				if !strings.Contains(got.Text, s) {
					t.Errorf("text %q, want it to contain %q", got.Text, s)
				}
			}
			if tc.want != DependencyMet && got.Text == "" {
				t.Error("no sentence")
			}
		})
	}
}

// TestDependencyWait: the wait carries reason dependency and the
// sentence as it is given.
func TestDependencyWait(t *testing.T) {
	w := DependencyWait("j-9", "waiting for j-1 to succeed (running)")
	if w.JobID != "j-9" || w.Reason != ReasonDependency || w.Text() != "waiting for j-1 to succeed (running)" || !w.EstimatedStart.IsZero() {
		t.Errorf("got %+v %q", w, w.Text())
	}
}
