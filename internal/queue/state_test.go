package queue

import (
	"strings"
	"testing"
)

// TestTransitionsEveryPair checks every (from, to) pair of states against
// the allowed changes written out here, apart from the table in state.go.
func TestTransitionsEveryPair(t *testing.T) {
	allowed := map[[2]State]bool{
		{Queued, Starting}:    true,
		{Queued, Cancelled}:   true,
		{Queued, Failed}:      true,
		{Starting, Running}:   true,
		{Starting, Queued}:    true,
		{Starting, Failed}:    true,
		{Starting, Cancelled}: true,
		{Starting, Lost}:      true,
		{Running, Succeeded}:  true,
		{Running, Failed}:     true,
		{Running, Timeout}:    true,
		{Running, Cancelled}:  true,
		{Running, Lost}:       true,
		{Running, Queued}:     true,
		{Lost, Queued}:        true,
		{Lost, Failed}:        true,
	}
	all := States()
	if len(all) != 8 {
		t.Fatalf("States() = %v, want the 8 states", all)
	}
	for _, from := range all {
		for _, to := range all {
			want := allowed[[2]State{from, to}]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
			err := Transition(from, to)
			if want && err != nil {
				t.Errorf("Transition(%s, %s) = %v, want nil", from, to, err)
			}
			if !want {
				if err == nil {
					t.Errorf("Transition(%s, %s) = nil, want an error", from, to)
				} else if !strings.Contains(err.Error(), string(from)) || !strings.Contains(err.Error(), string(to)) {
					t.Errorf("Transition(%s, %s) = %q, want both states named", from, to, err)
				}
			}
		}
	}
}

func TestTransitionErrors(t *testing.T) {
	for _, tc := range []struct {
		from, to State
		want     string
	}{
		{Queued, Running, "job state queued cannot go to running (from queued: starting, cancelled, failed)"},
		{Succeeded, Queued, "job state succeeded cannot go to queued: succeeded is final"},
		{"paused", Queued, `job state "paused" cannot go to "queued": "paused" is not a job state`},
		{Queued, "done", `job state "queued" cannot go to "done": "done" is not a job state`},
	} {
		err := Transition(tc.from, tc.to)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Transition(%q, %q) = %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}

func TestEnded(t *testing.T) {
	ended := map[State]bool{Succeeded: true, Failed: true, Timeout: true, Cancelled: true}
	for _, s := range States() {
		if got := s.Ended(); got != ended[s] {
			t.Errorf("%s.Ended() = %v, want %v", s, got, ended[s])
		}
	}
	if State("nope").Ended() {
		t.Error(`State("nope").Ended() = true, want false`)
	}
}

func TestParseState(t *testing.T) {
	for _, s := range States() {
		if got, err := ParseState(string(s)); err != nil || got != s {
			t.Errorf("ParseState(%q) = %q, %v", s, got, err)
		}
	}
	_, err := ParseState("done")
	if err == nil || !strings.Contains(err.Error(), `"done"`) || !strings.Contains(err.Error(), "queued, starting") {
		t.Errorf("ParseState(done) = %v, want an error naming it and the states", err)
	}
}

func TestReasons(t *testing.T) {
	must := []Reason{ReasonResources, ReasonOutsideUse, ReasonUserGPULimit, ReasonHeld, ReasonStartFailed,
		ReasonTimeLimit, ReasonCancelled, ReasonStoppedByPolicy, ReasonExitCode, ReasonLostRequeued}
	for _, r := range must {
		if !r.Valid() || r.Meaning() == "" {
			t.Errorf("reason %q: valid %v, meaning %q", r, r.Valid(), r.Meaning())
		}
	}
	seen := map[Reason]bool{}
	waitingDone := false
	for _, info := range Reasons() {
		if seen[info.Code] {
			t.Errorf("reason %q listed twice", info.Code)
		}
		seen[info.Code] = true
		if info.Meaning == "" {
			t.Errorf("reason %q has no meaning", info.Code)
		}
		if !info.Waiting {
			waitingDone = true
		} else if waitingDone {
			t.Errorf("waiting reason %q listed after an end reason", info.Code)
		}
	}
	if Reason("nope").Valid() || Reason("nope").Meaning() != "" {
		t.Error(`Reason("nope") is valid`)
	}
}
