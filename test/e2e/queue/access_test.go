package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestQueueAccess: alice cannot see, cancel, hold or read the logs of
// bob's job (each a 404, as for a job nobody has); a viewer reads jobs
// but not their logs; bob's logs -f streams his job's output as it is
// printed.
func TestQueueAccess(t *testing.T) {
	t.Parallel()
	h := newHost(t, "")
	a := h.start(t)
	bobs := a.submit(t, h.bob, h.request(1, "5m", "print-every", "300ms", "tick"))
	a.await(t, bobs.ID, 30*time.Second, "running")
	path := "/api/v1/jobs/" + bobs.ID

	for _, c := range []struct{ method, path string }{
		{http.MethodGet, path},
		{http.MethodGet, path + "/logs"},
		{http.MethodPost, path + "/cancel"},
		{http.MethodPost, path + "/hold"},
		{http.MethodPost, path + "/release"},
	} {
		var body any
		if c.method == http.MethodPost {
			body = []byte(`{}`)
		}
		status, out := a.call(t, c.method, c.path, h.alice, body)
		var e apitype.Error
		_ = json.Unmarshal(out, &e)
		if status != http.StatusNotFound || e.Code != apitype.CodeNotFound {
			t.Errorf("alice: %s %s: %d %s, want 404 not_found", c.method, c.path, status, out)
		}
	}
	if out, _, code := a.userCLI(t, h.alice, "cancel", bobs.ID); code == 0 {
		t.Errorf("gpumeter cancel of bob's job as alice: exit 0: %s", out)
	}
	if j := a.job(t, bobs.ID); j.State != "running" {
		t.Fatalf("bob's job after alice's tries: %s", j.State)
	}
	if ids := a.list(t, h.alice, ""); len(ids) != 0 {
		t.Errorf("alice lists %v, want none of bob's", ids)
	}
	if status, out := a.call(t, http.MethodGet, "/api/v1/jobs?all_users=1", h.alice, nil); status != http.StatusForbidden {
		t.Errorf("alice lists all users' jobs: %d %s, want 403", status, out)
	}

	// A viewer reads jobs, everyone's, but not their logs.
	if status, out := a.call(t, http.MethodGet, path, h.viewer, nil); status != http.StatusOK {
		t.Errorf("viewer: GET %s: %d %s, want 200", path, status, out)
	}
	if ids := a.list(t, h.viewer, "all_users=1"); len(ids) != 1 || ids[0] != bobs.ID {
		t.Errorf("viewer lists %v, want [%s]", ids, bobs.ID)
	}
	if status, out := a.call(t, http.MethodGet, path+"/logs", h.viewer, nil); status != http.StatusForbidden {
		t.Errorf("viewer: GET %s/logs: %d %s, want 403", path, status, out)
	}
	if status, e := a.post(t, bobs.ID, "cancel", h.viewer); status != http.StatusForbidden {
		t.Errorf("viewer: cancel: %d %+v, want 403", status, e)
	}

	// bob follows his job's output: lines arrive while it runs.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary(t), "logs", "-f", bobs.ID)
	cmd.Env = append(os.Environ(), "GPUMETER_URL="+a.URL, "GPUMETER_TOKEN="+h.bob)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() && len(seen) < 100 {
		seen = append(seen, sc.Text())
		if strings.HasPrefix(sc.Text(), "tick ") && len(seen) >= 3 {
			break
		}
	}
	first := len(seen)
	// Two more lines, printed after the stream began.
	for len(seen) < first+2 && sc.Scan() {
		seen = append(seen, sc.Text())
	}
	if len(seen) < first+2 || !strings.HasPrefix(seen[len(seen)-1], "tick ") {
		t.Errorf("logs -f showed %q, want tick lines as they are printed", seen)
	}
	// The job ends: the stream ends with it.
	mustPost(t, a, bobs.ID, "cancel", h.bob)
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("logs -f after the job ended: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("logs -f still follows 20s after the job was cancelled")
	}
	// bob reads his own logs once the job has ended.
	if status, out := a.call(t, http.MethodGet, path+"/logs", h.bob, nil); status != http.StatusOK || !strings.Contains(string(out), "tick 1") {
		t.Errorf("bob: GET %s/logs: %d %q, want 200 with his output", path, status, out)
	}
}

// list is the ids of the jobs token lists with the query.
func (a *agent) list(t *testing.T, token, query string) []string {
	t.Helper()
	status, out := a.call(t, http.MethodGet, "/api/v1/jobs?"+query, token, nil)
	var l apitype.JobsResponse
	if err := json.Unmarshal(out, &l); status != http.StatusOK || err != nil {
		t.Fatalf("GET /api/v1/jobs?%s: %d %s", query, status, out)
	}
	var ids []string
	for _, j := range l.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}
