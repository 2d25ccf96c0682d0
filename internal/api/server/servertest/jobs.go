package servertest

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
)

// RankTable is the scheduler's ranks as the runtime would keep them, by
// job id.
type RankTable map[string]struct {
	Prio float64
	Pos  int
	Est  time.Time
}

func (r RankTable) Rank(id string) (float64, int, time.Time, bool) {
	x, ok := r[id]
	return x.Prio, x.Pos, x.Est, ok
}

// hostUsers are the users the test host's passwd file would list; root,
// the admin's token user, is uid 0.
var hostUsers = map[string]spec.Identity{
	"root":  {UID: 0, GID: 0},
	"alice": {UID: 4242, GID: 4242},
	"bob":   {UID: 4343, GID: 4343},
}

// LookupUser finds user in hostUsers, as the agent finds one in the
// host's passwd file.
func LookupUser(user string) (spec.Identity, error) {
	id, ok := hostUsers[user]
	if !ok {
		return spec.Identity{}, fmt.Errorf("no user %s in the passwd file", user)
	}
	return id, nil
}

// JobsFixture is the API over a real queue on a real SQLite ledger, with
// no engine: jobs stay queued, which is all the API needs.
type JobsFixture struct {
	*Fixture
	Store *sqlite.Store
}

// NewJobsFixture serves the API over a queue whose config edit may
// change.
func NewJobsFixture(t *testing.T, edit func(*run.Config)) *JobsFixture {
	t.Helper()
	return NewJobsFixtureServer(t, edit, nil)
}

// NewJobsFixtureServer is NewJobsFixture with the API's config edited by
// api.
func NewJobsFixtureServer(t *testing.T, edit func(*run.Config), api func(*server.Config)) *JobsFixture {
	t.Helper()
	return NewJobsFixtureIn(t, t.TempDir(), edit, api)
}

// NewJobsFixtureIn is NewJobsFixtureServer with the ledger and the jobs'
// environment files in dir, as in an agent's data directory.
func NewJobsFixtureIn(t *testing.T, dir string, edit func(*run.Config), api func(*server.Config)) *JobsFixture {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := run.Config{
		Store: store, Node: "n1", Identity: LookupUser, EnvDir: filepath.Join(dir, "job-env"),
		Rules: spec.Rules{Images: []string{"gpumeter/sleeper:*"}, MaxGPUs: 8, MaxTimeLimit: 24 * time.Hour},
	}
	if edit != nil {
		edit(&cfg)
	}
	q, err := run.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFixture(t, func(c *server.Config) {
		c.Jobs = q
		c.Limits.MaxBodyBytes = 16 << 10
		if api != nil {
			api(c)
		}
	})
	return &JobsFixture{Fixture: f, Store: store}
}

// GoodJob is a job request the fixture's rules allow.
const GoodJob = `{"gpus":1,"time_limit":"4h","image":"gpumeter/sleeper:1","name":"train","env":["WANDB_MODE=offline"],"command":["sleep","60"]}`

// Submit posts body as caller and returns the job it made.
func (f *JobsFixture) Submit(t *testing.T, caller, body string) apitype.Job {
	t.Helper()
	a := f.Do(t, caller, http.MethodPost, "/api/v1/jobs", strings.NewReader(body), "")
	if a.Status != http.StatusOK {
		t.Fatalf("submit as %s: %d %s", caller, a.Status, a.Body)
	}
	var j apitype.Job
	a.Decode(t, &j)
	return j
}

// Post sends a POST without a body as caller.
func (f *JobsFixture) Post(t *testing.T, caller, path string) Answer {
	t.Helper()
	return f.Do(t, caller, http.MethodPost, path, nil, "")
}
