package server_test

import (
	"context"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/run"
)

// TestForwardToTheJobsNode: in a fleet, the logs of a job whose container
// is on another node are asked of that node's agent over HTTPS, with the
// caller's token and the forwarding node named, checked against the
// fleet's CA; an agent that does not trust the certificate, a node without
// an API and a lost node are 503 node_lost, saying why.
func TestForwardToTheJobsNode(t *testing.T) {
	var seen *http.Request
	other := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Clone(context.Background())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("hello from n2\n"))
	}))
	other.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted handshake below
	other.StartTLS()
	defer other.Close()
	roots := x509.NewCertPool()
	roots.AddCert(other.Certificate())
	client := server.ForwardClient(roots)

	// The view reads the fixture's own store, set once it is made.
	nodes := &run.Nodes{Takeover: time.Hour}
	f := servertest.NewJobsFixtureServer(t, nil, func(c *server.Config) {
		c.Node = "n1"
		c.Forward = client
		c.Nodes = nodes
	})
	nodes.Fleet, nodes.Jobs = f.Store, f.Store
	ctx := context.Background()
	j := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	if _, err := f.Store.UpdateJob(ctx, j.ID, queue.Queued, func(j *queue.Job) {
		j.State, j.Node, j.GPUs, j.StartedAt = queue.Running, "n2", []string{"GPU-n2-0"}, time.Now()
	}, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	register := func(api string) {
		if err := f.Store.RegisterNode(ctx, ledger.NodeInfo{Node: "n2", API: api}); err != nil {
			t.Fatal(err)
		}
	}
	register(other.URL)
	lease, err := f.Store.Acquire(ctx, ledger.Lease{Node: "n2", Instance: "n2-1", Host: "n2", PID: os.Getpid()}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	a := f.Get(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID+"/logs")
	if a.Status != http.StatusOK || string(a.Body) != "hello from n2\n" {
		t.Fatalf("logs of a job on n2: %d %q, want n2's answer", a.Status, a.Body)
	}
	if seen == nil || seen.URL.Path != "/api/v1/jobs/"+j.ID+"/logs" || !strings.HasPrefix(seen.Header.Get("Authorization"), "Bearer ") ||
		seen.Header.Get("X-Gpumeter-Forwarded-By") != "n1" {
		t.Errorf("n2 was asked %+v, want the same path with the caller's token, from n1", seen)
	}
	// A request that was forwarded already is answered here.
	seen = nil
	req, err := http.NewRequest(http.MethodGet, f.URL+"/api/v1/jobs/"+j.ID+"/logs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", f.Headers[servertest.AsAlice])
	req.Header.Set("X-Gpumeter-Forwarded-By", "n3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seen != nil {
		t.Error("a forwarded request was forwarded again")
	}

	// Without the fleet's CA, n2's certificate is not trusted.
	*client = *server.ForwardClient(nil)
	e := f.Get(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID+"/logs").APIError(t, http.StatusServiceUnavailable, apitype.CodeNodeLost)
	if !strings.Contains(e.Message, "does not answer") || !strings.Contains(e.Message, "certificate") {
		t.Errorf("an agent without the fleet's CA: %q, want it to say the certificate is not trusted", e.Message)
	}

	register("")
	if e := f.Get(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID+"/logs").APIError(t, http.StatusServiceUnavailable, apitype.CodeNodeLost); !strings.Contains(e.Message, "queue.fleet_api") {
		t.Errorf("a node without an API: %q, want it to name queue.fleet_api", e.Message)
	}
	register(other.URL)
	if err := f.Store.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if e := f.Get(t, servertest.AsAlice, "/api/v1/jobs/"+j.ID+"/logs").APIError(t, http.StatusServiceUnavailable, apitype.CodeNodeLost); !strings.Contains(e.Message, "lost") {
		t.Errorf("a lost node: %q, want it to say so", e.Message)
	}
}
