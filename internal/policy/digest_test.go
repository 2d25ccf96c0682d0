package policy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

func TestNextDigest(t *testing.T) {
	for _, tc := range []struct{ now, want string }{
		{"2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}, // a Monday at midnight: the next one
		{"2026-12-03T09:15:00Z", "2026-12-07T00:00:00Z"},
		{"2026-12-06T23:59:59Z", "2026-12-07T00:00:00Z"},
	} {
		now, _ := time.Parse(time.RFC3339, tc.now)
		if got := NextDigest(now).Format(time.RFC3339); got != tc.want {
			t.Errorf("NextDigest(%s) = %s, want %s", tc.now, got, tc.want)
		}
	}
}

// TestAdviceDigest: on Monday the week's advice goes to the webhook as
// JSON with a line of text, and is audited.
func TestAdviceDigest(t *testing.T) {
	got := make(chan DigestMessage, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m DigestMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("digest body: %v: %s", err, b)
		}
		got <- m
	}))
	defer srv.Close()
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var asked [2]time.Time
	aud := &fakeAuditor{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waits := 0
	d := NewAdviceDigest(DigestConfig{
		Webhook: config.Webhook{URL: srv.URL, Timeout: 5 * time.Second},
		Advice: func(_ context.Context, from, to time.Time) (*whatif.AdviceReport, error) {
			asked = [2]time.Time{from, to}
			return &whatif.AdviceReport{Advice: []whatif.Advice{{User: "olga", Group: "train-* (train:3, 4 GPUs)", Kind: whatif.KindGPUs, Flag: "--gpus 1", SavedGPUHours: 60}}}, nil
		},
		Audit: aud, Now: func() time.Time { return now },
		Wait: func(ctx context.Context, at time.Time) error {
			if waits++; waits > 1 {
				cancel()
				return ctx.Err()
			}
			now = at
			return nil
		},
	})
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	select {
	case m := <-got:
		if m.Kind != EventDigest || len(m.Advice) != 1 || !strings.Contains(m.Text, "olga") || !strings.Contains(m.Text, "--gpus 1") {
			t.Errorf("digest: %+v", m)
		}
	case <-time.After(time.Minute):
		t.Fatal("no digest sent")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC); !asked[1].Equal(want) || !asked[0].Equal(want.AddDate(0, 0, -7)) {
		t.Errorf("advice asked for %v, want the week before %v", asked, want)
	}
	if evs := aud.events(); len(evs) != 1 || evs[0].Action != "advice.digest" || evs[0].Outcome != OutcomeSent {
		t.Errorf("audit: %+v", evs)
	}
}

// fakeAuditor keeps what it is given.
type fakeAuditor struct {
	mu  sync.Mutex
	got []audit.Event
}

func (a *fakeAuditor) Act(_ context.Context, e audit.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, e)
	return nil
}

func (a *fakeAuditor) events() []audit.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]audit.Event(nil), a.got...)
}
