package queue

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// rankingInput is a queue with starts, waits for GPUs with estimates, a
// held job and a job too big for the host.
func rankingInput() Input {
	in := Input{GPUs: hostGPUs(4), Now: t0.Add(time.Hour)}
	in.Running = []RunningJob{running("j-000090", "bo", t0, 2*time.Hour, "GPU-0", "GPU-1")}
	for i := 1; i <= 8; i++ {
		q := queued(i, []string{"ana", "bo", "cy"}[i%3], 1+i%2)
		q.TimeLimit = time.Hour
		in.Queued = append(in.Queued, q)
	}
	in.Queued[2].Held = true
	in.Queued = append(in.Queued, queued(20, "ana", 9))
	return in
}

func TestRankingRoundTrip(t *testing.T) {
	p := Schedule(rankingInput())
	if len(p.Starts) == 0 || len(p.Waits) < 3 {
		t.Fatalf("the input should start some jobs and leave some waiting: %d starts, %d waits", len(p.Starts), len(p.Waits))
	}
	got, err := DecodeRanking(AppendRanking(nil, p))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Order, p.Order) {
		t.Errorf("order:\n got %v\nwant %v", got.Order, p.Order)
	}
	var want []string
	for _, s := range p.Starts {
		want = append(want, s.JobID)
	}
	var ids []string
	for _, s := range got.Starts {
		ids = append(ids, s.JobID)
	}
	slices.Sort(want)
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		t.Errorf("started: %v, want %v", ids, want)
	}
	if g, w := waits(got), waits(p); !slices.Equal(g, w) {
		t.Errorf("waits:\n got %q\nwant %q", g, w)
	}
	estimates := 0
	for i, w := range got.Waits {
		if !w.EstimatedStart.Equal(p.Waits[i].EstimatedStart) || w.Position != p.Waits[i].Position || w.Priority != p.Waits[i].Priority {
			t.Errorf("wait %s: %v/%d/%v, want %v/%d/%v", w.JobID, w.EstimatedStart, w.Position, w.Priority,
				p.Waits[i].EstimatedStart, p.Waits[i].Position, p.Waits[i].Priority)
		}
		if !w.EstimatedStart.IsZero() {
			estimates++
		}
	}
	if estimates == 0 {
		t.Error("no wait carried an estimate: the test does not cover them")
	}
}

func TestDecodeRankingRefuses(t *testing.T) {
	good := AppendRanking(nil, Schedule(rankingInput()))
	unknown := AppendRanking(nil, Plan{Waits: []Wait{{JobID: "j-000001", Reason: "napping"}}})
	for name, tt := range map[string]struct {
		b    []byte
		want string
	}{
		"empty":          {nil, "version: cut short"},
		"newer":          {[]byte{2, 0, 0}, "version 2"},
		"cut":            {good[:len(good)-3], "the fleet's ranking, at byte"},
		"trailing":       {append(slices.Clone(good), 0), "1 bytes after the end"},
		"count too big":  {[]byte{1, 0xff, 0xff, 0x03}, "more than the 0 bytes left"},
		"unknown reason": {unknown, `reason "napping"`},
		"bad flag":       {[]byte{1, 1, 2, 'j', '1', 1, 7}, "7 is not a flag"},
		"ranked twice":   {AppendRanking(nil, Plan{Order: []Ranked{{JobID: "j-000001"}, {JobID: "j-000001"}}}), "j-000001 is ranked twice"},
	} {
		_, err := DecodeRanking(tt.b)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tt.want)
		}
	}
}

// TestPackRanking: a packed ranking unpacks to the same plan; what does
// not inflate, or inflates to no ranking, is an error.
func TestPackRanking(t *testing.T) {
	p := Schedule(rankingInput())
	raw := AppendRanking(nil, p)
	got, err := UnpackRanking(PackRanking(raw))
	if err != nil {
		t.Fatal(err)
	}
	if again := AppendRanking(nil, got); !slices.Equal(again, raw) {
		t.Error("a packed ranking unpacks to another")
	}
	if _, err := UnpackRanking([]byte("not deflate")); err == nil || !strings.Contains(err.Error(), "does not inflate") {
		t.Errorf("garbage: %v, want it not to inflate", err)
	}
	if _, err := UnpackRanking(PackRanking([]byte{7})); err == nil || !strings.Contains(err.Error(), "version 7") {
		t.Errorf("a packed ranking of another version: %v", err)
	}
}

// TestRankingOrder: rankings that differ only in their priorities share
// their order; a changed position or reason does not.
func TestRankingOrder(t *testing.T) {
	p := Schedule(rankingInput())
	older := AppendRanking(nil, p)
	aged := p
	aged.Order = slices.Clone(p.Order)
	aged.Waits = slices.Clone(p.Waits)
	for i := range aged.Order {
		aged.Order[i].Priority += 0.125
	}
	for i := range aged.Waits {
		aged.Waits[i].Priority += 0.125
	}
	newer := AppendRanking(nil, aged)
	if slices.Equal(older, newer) || !slices.Equal(RankingOrder(older, p), RankingOrder(newer, aged)) {
		t.Error("priorities alone changed the order's part, or nothing at all")
	}
	moved := aged
	moved.Waits = slices.Clone(aged.Waits)
	moved.Waits[0].Reason = ReasonHeld
	if slices.Equal(RankingOrder(AppendRanking(nil, moved), moved), RankingOrder(newer, aged)) {
		t.Error("a changed reason left the order's part as it was")
	}
}

func FuzzDecodeRanking(f *testing.F) {
	f.Add(AppendRanking(nil, Schedule(rankingInput())))
	f.Add(AppendRanking(nil, Plan{}))
	f.Add([]byte{1, 1, 2, 'j', '1', 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeRanking(b)
		if err != nil {
			return
		}
		again, err := DecodeRanking(AppendRanking(nil, p))
		if err != nil {
			t.Fatalf("a decoded ranking does not decode again: %v", err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", again, p)
		}
		for _, w := range p.Waits {
			_ = w.Text()
		}
	})
}

func FuzzUnpackRanking(f *testing.F) {
	f.Add(PackRanking(AppendRanking(nil, Schedule(rankingInput()))))
	f.Add([]byte("not deflate"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := UnpackRanking(b); err == nil {
			if _, err := DecodeRanking(AppendRanking(nil, p)); err != nil {
				t.Fatalf("an unpacked ranking does not decode again: %v", err)
			}
		}
	})
}
