package server

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// TestSnapshotAsTheRoutes: for every role, each part of the snapshot is
// what its own route answers the same caller, over real HTTP with a real
// queue on SQLite: the snapshot never shows more than the routes, and
// leaves nothing out that they show.
func TestSnapshotAsTheRoutes(t *testing.T) {
	f := newJobsFixture(t, nil)
	alice1 := f.submit(t, asAlice, goodJob)
	alice2 := f.submit(t, asAlice, goodJob)
	bob1 := f.submit(t, asBob, goodJob)
	for _, caller := range []string{asAdmin, asViewer, asAlice, asBob, asNobody} {
		t.Run(caller, func(t *testing.T) {
			var snap apitype.Snapshot
			f.get(t, caller, "/api/v1/snapshot").decode(t, &snap)

			var gpus apitype.GPUsResponse
			f.get(t, caller, "/api/v1/gpus").decode(t, &gpus)
			if diff := cmp.Diff(gpus.GPUs, snap.GPUs); diff != "" {
				t.Errorf("GPUs (-/api/v1/gpus +snapshot):\n%s", diff)
			}
			if snap.Node != gpus.Node || !snap.Time.Equal(gpus.Time) || snap.DriverVersion != gpus.DriverVersion {
				t.Errorf("snapshot of node %q at %s driver %q, /api/v1/gpus %q at %s driver %q", snap.Node, snap.Time, snap.DriverVersion, gpus.Node, gpus.Time, gpus.DriverVersion)
			}

			var ctrs apitype.ContainersResponse
			f.get(t, caller, "/api/v1/containers").decode(t, &ctrs)
			if diff := cmp.Diff(ctrs, apitype.ContainersResponse{Node: snap.Node, Time: snap.Time, Containers: snap.Containers, HostUsers: snap.HostUsers, Unresolved: snap.Unresolved}); diff != "" {
				t.Errorf("containers (-/api/v1/containers +snapshot):\n%s", diff)
			}

			var wr apitype.WasteReport
			f.get(t, caller, "/api/v1/waste").decode(t, &wr)
			if snap.Waste == nil {
				t.Fatal("no waste findings in the snapshot, though the live rules are on")
			}
			if diff := cmp.Diff(wr, *snap.Waste); diff != "" {
				t.Errorf("waste (-/api/v1/waste +snapshot):\n%s", diff)
			}

			// A user lists their own jobs; admins and viewers everyone's.
			path := "/api/v1/jobs?all_users=1"
			if roleOf[caller] == "user" || caller == asNobody {
				path = "/api/v1/jobs"
			}
			wantIDs := listIDs(t, f.get(t, caller, path))
			if snap.Queue == nil {
				t.Fatal("no queue in the snapshot, though the queue is on")
			}
			var gotIDs []string
			for _, j := range snap.Queue.Jobs {
				gotIDs = append(gotIDs, j.ID)
			}
			slices.Sort(wantIDs)
			slices.Sort(gotIDs)
			if !slices.Equal(gotIDs, wantIDs) {
				t.Errorf("queue jobs %v, /api/v1/jobs lists %v", gotIDs, wantIDs)
			}
			if n := snap.Queue.Counts["queued"]; n != len(wantIDs) || snap.Queue.Truncated {
				t.Errorf("queue counts %v (truncated %v), want %d queued", snap.Queue.Counts, snap.Queue.Truncated, len(wantIDs))
			}
		})
	}

	// What each user sees, spelt out, so that a filter broken the same
	// way in the routes and the snapshot still fails here.
	for caller, want := range map[string]struct {
		containers, hostUsers, jobs, findings []string
	}{
		asAlice:  {[]string{"alice-old", "alice-train"}, []string{"alice"}, []string{alice1.ID, alice2.ID}, []string{"idle-alice"}},
		asBob:    {[]string{"bob-train"}, nil, []string{bob1.ID}, []string{"idle-bob"}},
		asNobody: {nil, nil, nil, nil},
	} {
		t.Run("own rows of "+caller, func(t *testing.T) {
			var snap apitype.Snapshot
			f.get(t, caller, "/api/v1/snapshot").decode(t, &snap)
			var got struct{ containers, hostUsers, jobs, findings []string }
			for _, c := range snap.Containers {
				got.containers = append(got.containers, c.Name)
			}
			for _, h := range snap.HostUsers {
				got.hostUsers = append(got.hostUsers, h.User)
			}
			for _, j := range snap.Queue.Jobs {
				got.jobs = append(got.jobs, j.ID)
			}
			for _, fd := range snap.Waste.Findings {
				got.findings = append(got.findings, fd.ID)
			}
			slices.Sort(got.containers)
			slices.Sort(got.jobs)
			slices.Sort(want.jobs)
			if !slices.Equal(got.containers, want.containers) || !slices.Equal(got.hostUsers, want.hostUsers) ||
				!slices.Equal(got.jobs, want.jobs) || !slices.Equal(got.findings, want.findings) {
				t.Errorf("containers %v, host users %v, jobs %v, findings %v; want %v, %v, %v, %v",
					got.containers, got.hostUsers, got.jobs, got.findings, want.containers, want.hostUsers, want.jobs, want.findings)
			}
			if len(snap.Unresolved) != 0 {
				t.Errorf("a user sees unresolved processes: %+v", snap.Unresolved)
			}
			// Every GPU is shown with its own figures and holder count,
			// but only the caller's processes.
			if len(snap.GPUs) != 2 || snap.GPUs[0].Holders == 0 {
				t.Errorf("GPUs %+v, want both with their holders", snap.GPUs)
			}
			for _, g := range snap.GPUs {
				for _, p := range g.Processes {
					if p.OwnerKind == "host" && !slices.Contains(want.hostUsers, p.Owner) {
						t.Errorf("GPU %d shows %s's process %d", g.Index, p.Owner, p.PID)
					}
				}
			}
		})
	}
}

// TestSnapshotParts: without the live waste rules or the queue their
// parts are null and the rest is there; the route takes no parameters
// and answers 503 before the first sample.
func TestSnapshotParts(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Waste = nil })
	var snap apitype.Snapshot
	a := f.get(t, asAdmin, "/api/v1/snapshot")
	a.decode(t, &snap)
	if snap.Waste != nil || snap.Queue != nil {
		t.Errorf("waste %+v and queue %+v, want both null", snap.Waste, snap.Queue)
	}
	if len(snap.GPUs) != 2 || len(snap.Containers) == 0 {
		t.Errorf("%d GPUs and %d containers, want 2 and some", len(snap.GPUs), len(snap.Containers))
	}
	f.get(t, asAdmin, "/api/v1/snapshot?user=alice").apiError(t, http.StatusBadRequest, apitype.CodeBadRequest)

	f = newFixture(t, func(c *Config) { c.Ticks = nilTicks{} })
	f.get(t, asViewer, "/api/v1/snapshot").apiError(t, http.StatusServiceUnavailable, apitype.CodeNoSample)
}

// snapshotBench is the API over the load scenario's latest tick (8 GPUs,
// 64 containers), a live waste finding for every container and a real
// queue on SQLite holding 32 queued jobs of the scenario's users, with a
// viewer token and a user token.
func snapshotBench(b *testing.B) (h http.Handler, viewer, user string) {
	b.Helper()
	ctx := context.Background()
	ticks := benchSampler(b)
	t := ticks.Latest()
	var findings []waste.Finding
	for _, c := range t.Containers {
		findings = append(findings, waste.Finding{ID: "idle-" + c.Name, Rule: config.RuleIdle, Node: t.Node, OwnerKind: waste.OwnerContainer,
			ContainerID: c.ID, Container: c.Name, Owner: c.User, GPUs: []waste.GPURef{{Index: 0, UUID: "GPU-0"}},
			Since: t.Time, FirstSeen: t.Time, Until: t.Time, Active: true, Evidence: map[string]float64{waste.EvSMPercent: 1}, WastedGPUHours: 1, Cost: 2})
	}
	rep := (&waste.Report{From: t.Time.Add(-time.Hour), To: t.Time, Currency: "EUR", Findings: findings}).Only(func(*waste.Finding) bool { return true })

	store, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	q, err := run.New(run.Config{
		Store: store, Node: "bench", EnvDir: filepath.Join(b.TempDir(), "env"),
		Identity: func(string) (spec.Identity, error) { return spec.Identity{UID: 5000, GID: 5000}, nil },
		Rules:    spec.Rules{Images: []string{"gpumeter/sleeper:*"}, MaxGPUs: 8, MaxTimeLimit: 24 * time.Hour},
	})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 32 {
		req := spec.Request{GPUs: 1, TimeLimit: time.Hour, Image: "gpumeter/sleeper:1", Command: []string{"sleep", "60"}}
		if _, err := q.Submit(ctx, run.Submission{Request: req, User: fmt.Sprintf("user%d", i%12)}); err != nil {
			b.Fatal(err)
		}
	}

	vSecret, vTok, err := auth.NewToken("load", "load", config.RoleViewer, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	uSecret, uTok, err := auth.NewToken("user0", "user0", config.RoleUser, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	authn, err := auth.New(auth.Config{Tokens: []config.Token{vTok, uTok}})
	if err != nil {
		b.Fatal(err)
	}
	limiter := auth.NewLimiter(0, 1, 0)
	h = New(Config{
		Ticks: ticks, Waste: fixedWaste{rep}, Jobs: q, Audit: newCountingAudit(),
		Auth:    func() *auth.Authenticator { return authn },
		Limiter: func() *auth.Limiter { return limiter },
	})
	return h, vSecret, uSecret
}

// BenchmarkSnapshot is one authenticated GET /api/v1/snapshot under the
// benchmark load, without the network: what `gpumeter top` costs the
// agent once a redraw. A viewer gets the whole node; a user their own
// rows, filtered per call.
//
//	go test -run '^$' -bench Snapshot -benchmem ./internal/api/server
func BenchmarkSnapshot(b *testing.B) {
	h, viewer, user := snapshotBench(b)
	for _, bb := range []struct{ name, secret string }{{"viewer", viewer}, {"user", user}} {
		b.Run(bb.name, func(b *testing.B) {
			r, err := http.NewRequest(http.MethodGet, "/api/v1/snapshot", nil)
			if err != nil {
				b.Fatal(err)
			}
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("Authorization", "Bearer "+bb.secret)
			b.ReportMetric(float64(serveLoop(b, h, r, http.StatusOK)), "bytes/response")
		})
	}
}
