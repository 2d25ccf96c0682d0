package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// TestJobAsUser: as_user is honoured only from root on the agent's
// socket; a token, even an admin's, is refused with the rule.
func TestJobAsUser(t *testing.T) {
	f := newJobsFixture(t, nil)
	body := strings.Replace(goodJob, `"gpus":1,`, `"gpus":1,"as_user":"bob",`, 1)
	for _, caller := range []string{asAlice, asAdmin} {
		e := f.do(t, caller, http.MethodPost, "/api/v1/jobs", strings.NewReader(body), "").apiError(t, http.StatusForbidden, apitype.CodeForbidden)
		if !strings.Contains(e.Message, "root on the agent's socket") {
			t.Errorf("as_user from %s's token: %q, want the rule named", caller, e.Message)
		}
	}
	if got := listIDs(t, f.get(t, asAdmin, "/api/v1/jobs?all_users=1")); len(got) != 0 {
		t.Errorf("as_user from a token queued %v", got)
	}
}

// TestJobAsUserOnSocket: root on the agent's socket submits for another
// user, and the job is theirs; any other socket peer, though let in as
// admin by its uid, is refused. Which of the two this test sees depends
// on the uid it runs as.
func TestJobAsUserOnSocket(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	q, err := run.New(run.Config{Store: store, Node: "n1", Identity: lookupUser, EnvDir: filepath.Join(t.TempDir(), "env"),
		Rules: spec.Rules{Images: []string{"gpumeter/sleeper:*"}}})
	if err != nil {
		t.Fatal(err)
	}
	uid := os.Geteuid()
	authn, err := auth.New(auth.Config{SocketUIDs: []int{uid}})
	if err != nil {
		t.Fatal(err)
	}
	ln, path := testenv.ListenUnix(t)
	srv := &http.Server{ConnContext: auth.ConnContext, Handler: New(Config{
		Jobs: q, Auth: func() *auth.Authenticator { return authn }, Limiter: func() *auth.Limiter { return nil },
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c := &client.Client{URL: "unix://" + path}
	req := apitype.JobRequest{GPUs: 1, TimeLimit: "1h", Image: "gpumeter/sleeper:1", Command: []string{"true"}, AsUser: "bob"}
	job, err := c.Submit(ctx, req)
	if uid != 0 {
		if !client.IsForbidden(err) {
			t.Errorf("as_user from uid %d on the socket: %v, want a 403", uid, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("as_user from root on the socket: %v", err)
	}
	if job.User != "bob" {
		t.Errorf("the job is %s's, want bob's", job.User)
	}
	events, err := store.AuditEvents(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Caller != "uid:0 (socket uid 0)" || events[0].Owner != "bob" || events[0].Target != job.ID {
		t.Errorf("audit %+v, want root's submit for bob of %s", events, job.ID)
	}
}
