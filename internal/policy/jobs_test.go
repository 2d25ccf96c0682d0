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

	"github.com/gpumeter/gpumeter/internal/config"
	gpuqueue "github.com/gpumeter/gpumeter/internal/queue"
)

// TestJobNotifier posts a job's start and end to a real HTTP server: the
// body holds the job and a sentence, a 500 is tried again, and each
// notice is audited with its outcome.
func TestJobNotifier(t *testing.T) {
	var mu sync.Mutex
	var bodies []JobMessage
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var m JobMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("body %s: %v", b, err)
		}
		bodies = append(bodies, m)
	}))
	defer srv.Close()
	audit := &memAudit{}
	n := NewJobNotifier(JobNotifierConfig{Webhook: config.Webhook{URL: srv.URL, Timeout: 5 * time.Second, Retries: 2}, Audit: audit})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	three := 3
	n.Notify("start", gpuqueue.Job{ID: "j-000007", Name: "train", User: "alice", State: gpuqueue.Running, GPUs: []string{"GPU-a", "GPU-b"}})
	n.Notify("end", gpuqueue.Job{ID: "j-000007", User: "alice", State: gpuqueue.Failed, Reason: gpuqueue.ReasonExitCode, ExitCode: &three})
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := len(bodies)
		mu.Unlock()
		if got == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 {
		t.Fatalf("webhook got %d notices, want 2", len(bodies))
	}
	if b := bodies[0]; b.Kind != "job_start" || b.Job.ID != "j-000007" || len(b.Job.GPUs) != 2 || !strings.Contains(b.Text, "started on 2 GPU(s)") {
		t.Errorf("start notice %+v", b)
	}
	if b := bodies[1]; b.Kind != "job_end" || b.Job.ExitCode == nil || *b.Job.ExitCode != 3 || !strings.Contains(b.Text, "ended: failed, exit code 3") {
		t.Errorf("end notice %+v", b)
	}
	audit.mu.Lock()
	defer audit.mu.Unlock()
	if len(audit.events) != 2 || audit.events[0].Outcome != OutcomeSent || audit.events[0].Attempts != 2 || audit.events[0].Target != "j-000007" {
		t.Errorf("audit %+v", audit.events)
	}
}

// TestJobNotifierFull drops what does not fit, and audits the drop.
func TestJobNotifierFull(t *testing.T) {
	audit := &memAudit{}
	n := NewJobNotifier(JobNotifierConfig{Webhook: config.Webhook{URL: "http://127.0.0.1:1"}, Audit: audit, Queue: 1})
	n.Notify("start", gpuqueue.Job{ID: "j-1"})
	n.Notify("start", gpuqueue.Job{ID: "j-2"})
	audit.mu.Lock()
	defer audit.mu.Unlock()
	if len(audit.events) != 1 || audit.events[0].Outcome != "dropped" || audit.events[0].Target != "j-2" {
		t.Errorf("audit %+v, want j-2 dropped", audit.events)
	}
}
