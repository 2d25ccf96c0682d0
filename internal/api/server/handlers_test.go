package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/report"
)

// TestContainersSeenBy: a user sees their own containers and host user
// and nothing unresolved; admins and viewers see everything.
func TestContainersSeenBy(t *testing.T) {
	f := newFixture(t, nil)
	type seen struct {
		Containers, HostUsers []string
		Unresolved            int
	}
	everything := seen{Containers: []string{"alice-old", "alice-train", "bob-train", ghost[:12]}, HostUsers: []string{"alice", "carol"}, Unresolved: 1}
	for caller, want := range map[string]seen{
		asAdmin:  everything,
		asViewer: everything,
		asAlice:  {Containers: []string{"alice-old", "alice-train"}, HostUsers: []string{"alice"}},
		asBob:    {Containers: []string{"bob-train"}},
		// The placeholder user of a container the inventory does not
		// know is nobody's, even a user's of that name.
		asNobody: {},
	} {
		t.Run(caller, func(t *testing.T) {
			var got apitype.ContainersResponse
			f.get(t, caller, "/api/v1/containers").decode(t, &got)
			var s seen
			for _, c := range got.Containers {
				s.Containers = append(s.Containers, c.Name)
			}
			for _, h := range got.HostUsers {
				s.HostUsers = append(s.HostUsers, h.User)
			}
			s.Unresolved = len(got.Unresolved)
			if diff := cmp.Diff(want, s); diff != "" {
				t.Errorf("containers (-want +got):\n%s", diff)
			}
			// Empty lists are [], not null, for every caller.
			if got.Containers == nil || got.HostUsers == nil || got.Unresolved == nil {
				t.Errorf("a list is null: %+v", got)
			}
		})
	}
}

// TestGPUsSeenBy: a user sees every GPU with its own figures, which say
// nothing of anyone, but only their own processes and owners.
func TestGPUsSeenBy(t *testing.T) {
	f := newFixture(t, nil)
	var all apitype.GPUsResponse
	f.get(t, asAdmin, "/api/v1/gpus").decode(t, &all)
	if len(all.GPUs) != 2 || all.GPUs[0].Totals.MeteredSeconds != 60 || all.GPUs[0].UtilPercent == nil {
		t.Fatalf("the admin's view lacks the GPUs' figures: %+v", all.GPUs)
	}
	type seen struct {
		PIDs   [][]uint32
		Owners [][]string
	}
	for caller, want := range map[string]seen{
		asAdmin:  {PIDs: [][]uint32{{100, 200, 300, 400}, {101, 500}}, Owners: [][]string{{aliceTrain, "alice", "carol", ""}, {bobTrain, ghost}}},
		asViewer: {PIDs: [][]uint32{{100, 200, 300, 400}, {101, 500}}, Owners: [][]string{{aliceTrain, "alice", "carol", ""}, {bobTrain, ghost}}},
		asAlice:  {PIDs: [][]uint32{{100, 200}, {}}, Owners: [][]string{{aliceTrain, "alice"}, {}}},
		asBob:    {PIDs: [][]uint32{{}, {101}}, Owners: [][]string{{}, {bobTrain}}},
		asNobody: {PIDs: [][]uint32{{}, {}}, Owners: [][]string{{}, {}}},
	} {
		t.Run(caller, func(t *testing.T) {
			var got apitype.GPUsResponse
			f.get(t, caller, "/api/v1/gpus").decode(t, &got)
			s := seen{PIDs: [][]uint32{}, Owners: [][]string{}}
			for _, g := range got.GPUs {
				pids, owners := []uint32{}, []string{}
				for _, p := range g.Processes {
					pids = append(pids, p.PID)
				}
				for _, o := range g.Owners {
					owners = append(owners, o.Owner)
				}
				slices.Sort(owners)
				s.PIDs, s.Owners = append(s.PIDs, pids), append(s.Owners, owners)
			}
			for i := range want.Owners {
				slices.Sort(want.Owners[i])
			}
			if diff := cmp.Diff(want, s); diff != "" {
				t.Errorf("processes and owners (-want +got):\n%s", diff)
			}
			// The rest is the same for everyone.
			if diff := cmp.Diff(all, got, cmpopts.IgnoreFields(apitype.GPU{}, "Processes", "Owners")); diff != "" {
				t.Errorf("GPU figures differ from the admin's (-admin +%s):\n%s", caller, diff)
			}
		})
	}
}

// TestWasteSeenBy: a user sees their own findings, with the totals summed
// over those alone; findings nobody owns are nobody's.
func TestWasteSeenBy(t *testing.T) {
	f := newFixture(t, nil)
	for caller, want := range map[string]struct {
		ids    []string
		hours  float64
		active int
	}{
		asAdmin:  {[]string{"idle-bob", "idle-alice", "outside-carol", "outside-nobody"}, 3.75, 4},
		asViewer: {[]string{"idle-bob", "idle-alice", "outside-carol", "outside-nobody"}, 3.75, 4},
		asAlice:  {[]string{"idle-alice"}, 1, 1},
		asBob:    {[]string{"idle-bob"}, 2, 1},
		asNobody: {[]string{}, 0, 0},
	} {
		t.Run(caller, func(t *testing.T) {
			var got apitype.WasteReport
			f.get(t, caller, "/api/v1/waste").decode(t, &got)
			ids := []string{}
			for _, fd := range got.Findings {
				ids = append(ids, fd.ID)
			}
			if diff := cmp.Diff(want.ids, ids); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			total := got.Totals[len(got.Totals)-1]
			if total.Rule != apitype.WasteTotalKey || total.Findings != len(want.ids) || total.WastedGPUHours != want.hours || total.Active != want.active {
				t.Errorf("grand total %+v, want %d findings, %g GPU-hours, %d active", total, len(want.ids), want.hours, want.active)
			}
			var sum int
			for _, tot := range got.Totals[:len(got.Totals)-1] {
				sum += tot.Findings
			}
			if sum != len(want.ids) {
				t.Errorf("the rules' totals count %d findings, want %d", sum, len(want.ids))
			}
		})
	}
}

// TestUsageSeenBy: a user's report is always of their own usage; asking
// for someone else's is refused and audited.
func TestUsageSeenBy(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		caller, query string
		status        int
		user          string // the user the report was asked for
	}{
		{asAlice, "", 200, "alice"},
		{asAlice, "?user=alice", 200, "alice"},
		{asAlice, "?by=team&team=vision", 200, "alice"},
		{asAlice, "?user=bob", 403, ""},
		{asBob, "", 200, "bob"},
		{asAdmin, "", 200, ""},
		{asAdmin, "?user=bob", 200, "bob"},
		{asViewer, "?user=bob", 200, "bob"},
	}
	for _, tt := range tests {
		for _, path := range []string{"/api/v1/usage", "/api/v1/usage.csv"} {
			t.Run(tt.caller+" "+path+tt.query, func(t *testing.T) {
				a := f.get(t, tt.caller, path+tt.query)
				got := f.reports.take()
				events := f.audit.take()
				if tt.status == http.StatusForbidden {
					e := a.apiError(t, http.StatusForbidden, apitype.CodeForbidden)
					if want := `alice may usage.read only for their own containers and usage`; e.Message != want {
						t.Errorf("message %q, want %q", e.Message, want)
					}
					if len(got) != 0 {
						t.Errorf("the ledger was read: %+v", got)
					}
					want := []audit.Event{{Time: f.clock.Now(), Kind: audit.KindAPI, Caller: "alice (token alice-laptop)", Role: "user", Action: "usage.read",
						Target: "usage user=bob", Status: http.StatusForbidden, Outcome: audit.OutcomeDenied, Error: e.Message}}
					if diff := cmp.Diff(want, eventsWithoutSource(t, events)); diff != "" {
						t.Errorf("audit events (-want +got):\n%s", diff)
					}
					return
				}
				if a.status != http.StatusOK {
					t.Fatalf("%d %s", a.status, a.body)
				}
				if len(got) != 1 || got[0].User != tt.user {
					t.Errorf("reports asked %+v, want one for user %q", got, tt.user)
				}
				wantType := "application/json"
				if strings.HasSuffix(path, ".csv") {
					wantType = "text/csv; charset=utf-8"
				}
				if ct := a.header.Get("Content-Type"); ct != wantType {
					t.Errorf("Content-Type %q, want %q", ct, wantType)
				}
				// A read is observed, with what was asked, to be summed.
				want := []audit.Event{{Time: f.clock.Now(), Kind: audit.KindAPI, Caller: callerOf[tt.caller], Role: roleOf[tt.caller], Action: "usage.read",
					Target: "GET " + path + tt.query, Status: http.StatusOK, Outcome: audit.OutcomeAllowed}}
				if diff := cmp.Diff(want, eventsWithoutSource(t, events)); diff != "" {
					t.Errorf("audit events of the read (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestReportLimits: the API refuses a report over a longer window or with
// more rows than its limits, and says which limit.
func TestReportLimits(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Limits.MaxReportWindow = 7 * 24 * time.Hour; c.Limits.MaxReportRows = 5 })
	tests := []struct {
		name, query string
		rows        int
		status      int
		code, msg   string
	}{
		{"within both", "?since=7d", 5, 200, "", ""},
		{"window too long", "?since=8d", 1, 400, apitype.CodeWindowTooLong, "the window is 8d long; the API reports at most 7d at once (api.max_report_window)"},
		{"from and to too far apart", "?from=2026-01-01&to=2026-03-01", 1, 400, apitype.CodeWindowTooLong, "(api.max_report_window)"},
		{"too many rows", "?since=1d", 6, 400, apitype.CodeTooManyRows, "the report has 6 rows, more than the 5 the API returns (api.max_report_rows)"},
		{"unknown parameter", "?colour=red", 1, 400, apitype.CodeBadRequest, `unknown parameter "colour"`},
		{"bad grouping", "?by=colour", 1, 400, apitype.CodeBadRequest, `by: "colour" is not one of`},
		{"bad since", "?since=soon", 1, 400, apitype.CodeBadRequest, `since: "soon" is not a duration`},
		{"since and from", "?since=1d&from=2026-11-01", 1, 400, apitype.CodeBadRequest, "since and from exclude each other"},
		{"repeated", "?user=a&user=b", 1, 400, apitype.CodeBadRequest, "user: given 2 times"},
		// A pair that does not parse is refused, never dropped (which
		// would widen the report to every user).
		{"bad escape", "?by=user&user=alice%zz", 1, 400, apitype.CodeBadRequest, `user: "alice%zz" is not valid in a URL`},
		{"semicolon in a value", "?by=user&user=alice;x", 1, 400, apitype.CodeBadRequest, "user: a ';' in the query must be escaped"},
		{"semicolon after since", "?since=1h;x", 1, 400, apitype.CodeBadRequest, "since: a ';' in the query must be escaped"},
		{"bad escape in a name", "?us%zzer=alice", 1, 400, apitype.CodeBadRequest, `the query parameter "us%zzer" is not valid in a URL`},
		{"invalid UTF-8", "?user=%ff", 1, 400, apitype.CodeBadRequest, "user: the value is not valid UTF-8"},
		{"invalid UTF-8 in a label", "?label=team%3D%ff", 1, 400, apitype.CodeBadRequest, "label: the value is not valid UTF-8"},
		// The year 1 is a time like any other, not "no from".
		{"from the year 1", "?from=0001-01-01", 1, 400, apitype.CodeBadRequest, "is longer than the 800d a report may cover"},
		{"from the year 1, no overflow", "?from=0001-01-02&to=2026-11-02", 1, 400, apitype.CodeBadRequest, "the window of 739920.0 days is longer than the 800d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.reports.answer(tt.rows, nil)
			a := f.get(t, asAdmin, "/api/v1/usage"+tt.query)
			if tt.status == http.StatusOK {
				var got report.Report
				a.decode(t, &got)
				if a.status != http.StatusOK || len(got.Rows) != tt.rows {
					t.Errorf("%d with %d rows, want 200 with %d", a.status, len(got.Rows), tt.rows)
				}
				return
			}
			if e := a.apiError(t, tt.status, tt.code); !strings.Contains(e.Message, tt.msg) {
				t.Errorf("message %q, want it to contain %q", e.Message, tt.msg)
			}
		})
	}
	// The limit holds the window as asked, before its ends are rounded
	// out to whole minutes: since=7d fits a 7-day limit whatever the
	// second of now.
	f.clock.advance(30*time.Second + time.Millisecond)
	f.reports.answer(1, nil)
	if a := f.get(t, asAdmin, "/api/v1/usage?since=7d"); a.status != http.StatusOK {
		t.Errorf("since=7d at %s under a 7-day limit: %d %s", f.clock.Now().Format(time.RFC3339Nano), a.status, a.body)
	}
	f.clock.advance(-30*time.Second - time.Millisecond)
	f.reports.answer(1, nil)
	if e := f.get(t, asAdmin, "/api/v1/usage.csv?format=json").apiError(t, http.StatusBadRequest, apitype.CodeBadRequest); e.Message != "format: /api/v1/usage.csv serves csv only" {
		t.Errorf("message %q", e.Message)
	}

	// A ledger that fails says so without its own words.
	f.reports.answer(1, errors.New(`read usage: pq: relation "usage_hour" does not exist at /srv/ledger.go:12`))
	if e := f.get(t, asAdmin, "/api/v1/usage").apiError(t, http.StatusInternalServerError, "ledger_error"); strings.Contains(e.Message, "usage_hour") {
		t.Errorf("message %q shows the ledger's error", e.Message)
	}
	f.reports.answer(1, fmt.Errorf("price: %w", cost.ErrInvalidCost))
	f.get(t, asAdmin, "/api/v1/usage").apiError(t, http.StatusInternalServerError, "bad_config")

	off := newFixture(t, func(c *Config) { c.Reports = nil })
	off.get(t, asAlice, "/api/v1/usage").apiError(t, http.StatusServiceUnavailable, apitype.CodeLedgerOff)
}

// TestStop: who may stop which container, and what each failure answers.
func TestStop(t *testing.T) {
	tests := []struct {
		name, caller, target string
		stopErr              error
		noStopper            bool
		status               int
		code, msg            string
		stopped              string // the ID stopped
		outcome              string
		audited              int // the audit event's status, when not status
	}{
		{name: "admin stops bob's", caller: asAdmin, target: "bob-train", status: 200, stopped: bobTrain, outcome: audit.OutcomeAllowed},
		{name: "alice stops hers by name", caller: asAlice, target: "alice-train", status: 200, stopped: aliceTrain, outcome: audit.OutcomeAllowed},
		{name: "alice stops hers by ID", caller: asAlice, target: aliceTrain, status: 200, stopped: aliceTrain, outcome: audit.OutcomeAllowed},
		{name: "alice stops hers by short ID", caller: asAlice, target: aliceTrain[:12], status: 200, stopped: aliceTrain, outcome: audit.OutcomeAllowed},
		{name: "a prefix under 12 is no ID", caller: asAlice, target: aliceTrain[:11], status: 404, code: apitype.CodeNotFound, msg: `no container "` + aliceTrain[:11] + `" is known to the agent`, outcome: apitype.OutcomeFailed},
		// Answered as a name nobody has, so that alice cannot tell bob's
		// containers from no container; audited as the refusal it is.
		{name: "alice on bob's", caller: asAlice, target: "bob-train", status: 404, code: apitype.CodeNotFound, msg: `no container "bob-train" is known to the agent`, audited: 403, outcome: audit.OutcomeDenied},
		{name: "viewer", caller: asViewer, target: "alice-train", status: 403, code: apitype.CodeForbidden, msg: "role viewer may not containers.stop", outcome: audit.OutcomeDenied},
		{name: "unknown", caller: asAdmin, target: "nope", status: 404, code: apitype.CodeNotFound, msg: `no container "nope" is known to the agent`, outcome: apitype.OutcomeFailed},
		{name: "unknown to alice", caller: asAlice, target: "nope", status: 404, code: apitype.CodeNotFound, msg: `no container "nope" is known to the agent`, outcome: apitype.OutcomeFailed},
		{name: "not in the inventory", caller: asAdmin, target: ghost, status: 404, code: apitype.CodeNotFound, msg: "is known to the agent", outcome: apitype.OutcomeFailed},
		{name: "already stopped", caller: asAdmin, target: "alice-old", status: 409, code: apitype.CodeConflict, msg: "container alice-old is not running", outcome: apitype.OutcomeFailed},
		{name: "alice's already stopped", caller: asAlice, target: "alice-old", status: 409, code: apitype.CodeConflict, msg: "container alice-old is not running", outcome: apitype.OutcomeFailed},
		{name: "no docker", caller: asAdmin, target: "bob-train", noStopper: true, status: 503, code: apitype.CodeDockerOff, msg: "docker.enabled: false", outcome: apitype.OutcomeFailed},
		{name: "gone meanwhile", caller: asAlice, target: "alice-train", stopErr: fmt.Errorf("stop %s: %w", aliceTrain, container.ErrNotFound),
			status: 404, code: apitype.CodeNotFound, msg: "container alice-train no longer exists", stopped: aliceTrain, outcome: apitype.OutcomeFailed},
		{name: "docker fails", caller: asAlice, target: "alice-train", stopErr: errors.New("Post http://%2Fvar%2Frun%2Fdocker.sock/v1.47/containers/a1/stop: dial unix: permission denied"),
			status: 502, code: apitype.CodeInternal, msg: "docker could not stop the container; the agent's log says why", stopped: aliceTrain, outcome: apitype.OutcomeFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stopper := &recordingStopper{err: tt.stopErr}
			f := newFixture(t, func(c *Config) {
				c.Stopper = stopper
				if tt.noStopper {
					c.Stopper = nil
				}
			})
			f.stopper = stopper
			a := f.do(t, tt.caller, http.MethodPost, "/api/v1/containers/"+url.PathEscape(tt.target)+"/stop", strings.NewReader(`{"timeout":"1m"}`), "")
			if tt.status == http.StatusOK {
				var got apitype.StopResponse
				a.decode(t, &got)
				if a.status != http.StatusOK || got.ID != tt.stopped || !got.Stopped {
					t.Errorf("%d %+v, want 200 with %s stopped", a.status, got, tt.stopped)
				}
			} else if e := a.apiError(t, tt.status, tt.code); e.Message != tt.msg && !strings.Contains(e.Message, tt.msg) {
				t.Errorf("message %q, want it to contain %q", e.Message, tt.msg)
			}
			var want []stopCall
			if tt.stopped != "" {
				want = []stopCall{{tt.stopped, time.Minute}}
			}
			if diff := cmp.Diff(want, f.stopper.take()); diff != "" {
				t.Errorf("stops (-want +got):\n%s", diff)
			}
			events, acted := f.audit.takeActed()
			audited := tt.status
			if tt.audited != 0 {
				audited = tt.audited
			}
			if len(events) != 1 || events[0].Status != audited || events[0].Outcome != tt.outcome || events[0].Action != "containers.stop" {
				t.Errorf("audit events %+v, want one with status %d and outcome %s", events, audited, tt.outcome)
			}
			// Once Docker was asked, the call is an action, whatever came
			// of it; until then it is observed, as refusals are.
			if len(acted) == 1 && acted[0] != (tt.stopped != "") {
				t.Errorf("the event was an action: %v, want %v", acted[0], tt.stopped != "")
			}
		})
	}
}

// TestStopTwiceInOneTick: until the next sample shows the container
// stopped, a second stop of it is a conflict, not a second success; so is
// one while a stop is under way. After the next sample the inventory
// decides again.
func TestStopTwiceInOneTick(t *testing.T) {
	stopper := &recordingStopper{}
	f := newFixture(t, func(c *Config) { c.Stopper = stopper })
	f.stopper = stopper // no new sample after the stop
	path := "/api/v1/containers/alice-train/stop"
	if a := f.do(t, asAlice, http.MethodPost, path, nil, ""); a.status != http.StatusOK {
		t.Fatalf("first stop: %d %s", a.status, a.body)
	}
	e := f.do(t, asAdmin, http.MethodPost, path, nil, "").apiError(t, http.StatusConflict, apitype.CodeConflict)
	if want := "container alice-train was stopped at " + f.clock.Now().UTC().Format(time.RFC3339); e.Message != want {
		t.Errorf("second stop: %q, want %q", e.Message, want)
	}
	if calls := stopper.take(); len(calls) != 1 {
		t.Errorf("docker was asked %d times, want once", len(calls))
	}

	// Two at once: one stops, the other is told a stop is under way.
	slow := &recordingStopper{delay: 300 * time.Millisecond}
	g := newFixture(t, func(c *Config) { c.Stopper = slow })
	g.stopper = slow
	statuses := make(chan int, 2)
	for range 2 {
		go func() {
			statuses <- g.do(t, asAdmin, http.MethodPost, "/api/v1/containers/bob-train/stop", nil, "").status
		}()
	}
	got := []int{<-statuses, <-statuses}
	slices.Sort(got)
	if !slices.Equal(got, []int{http.StatusOK, http.StatusConflict}) {
		t.Errorf("two stops at once answered %v, want one 200 and one 409", got)
	}

	// The next sample is the inventory's word again.
	f.resample()
	if a := f.do(t, asAlice, http.MethodPost, path, nil, ""); a.status != http.StatusOK {
		t.Errorf("a stop after the next sample: %d %s, want 200 (the fixture's inventory still shows it running)", a.status, a.body)
	}
}

// TestStopLongGrace: a stop that takes longer than the server's write
// timeout still gets its answer, and the answer says how long it took.
// Without a longer deadline for the call, net/http closes the connection
// at the timeout and the client gets no answer, while the container is
// stopped and the audit log says 200.
func TestStopLongGrace(t *testing.T) {
	stopper := &recordingStopper{delay: 1500 * time.Millisecond}
	f := newFixtureServer(t, func(c *Config) { c.Stopper = stopper }, func(s *http.Server) { s.WriteTimeout = 500 * time.Millisecond })
	f.stopper = stopper
	a := f.do(t, asAlice, http.MethodPost, "/api/v1/containers/alice-train/stop", strings.NewReader(`{"timeout":"2s"}`), "")
	if a.status != http.StatusOK {
		t.Fatalf("%d %s, want 200", a.status, a.body)
	}
	var got apitype.StopResponse
	a.decode(t, &got)
	if !got.Stopped || got.Grace != "2s" || got.Seconds < 1.5 || got.Killed() {
		t.Errorf("answer %+v, want stopped in about 1.5 s of a 2s grace, not killed", got)
	}
	if events, acted := f.audit.takeActed(); len(events) != 1 || events[0].Status != http.StatusOK || !acted[0] {
		t.Errorf("audit events %+v (actions %v), want the stop as an action", events, acted)
	}
	// A stop that takes the whole grace was a kill.
	if !(apitype.StopResponse{Grace: "2s", Seconds: 2.01}).Killed() {
		t.Error("a stop that took its whole grace is not reported killed")
	}
}

// TestStopOutlivesTheClient: a client that hangs up does not cut the
// stop short, and the audit log says what Docker did.
func TestStopOutlivesTheClient(t *testing.T) {
	stopper := &recordingStopper{delay: 600 * time.Millisecond}
	f := newFixture(t, func(c *Config) { c.Stopper = stopper })
	f.stopper = stopper
	req, err := http.NewRequest(http.MethodPost, f.url+"/api/v1/containers/alice-train/stop", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", f.headers[asAlice])
	if _, err := (&http.Client{Timeout: 100 * time.Millisecond}).Do(req); err == nil {
		t.Fatal("the impatient client got an answer")
	}
	deadline := time.Now().Add(5 * time.Second)
	var events []audit.Event
	for len(events) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		events = f.audit.take()
	}
	if len(events) != 1 || events[0].Status != http.StatusOK || len(stopper.take()) != 1 {
		t.Errorf("audit events %+v, want the stop done and recorded with 200", events)
	}
}

// TestAuditEndpoint: the admin reads the audit log over a window and a
// limit.
func TestAuditEndpoint(t *testing.T) {
	f := newFixture(t, nil)
	now := f.clock.Now()
	for i := range 3 {
		f.audit.Observe(audit.Event{Time: now.Add(-time.Duration(3-i) * time.Minute), Kind: audit.KindAPI, Caller: fmt.Sprint("c", i)})
	}
	f.audit.Observe(audit.Event{Time: now.Add(-48 * time.Hour), Kind: audit.KindAPI, Caller: "old"})

	var got apitype.AuditResponse
	f.get(t, asAdmin, "/api/v1/audit").decode(t, &got)
	if len(got.Events) != 3 || got.Truncated || !got.To.Equal(now) || !got.From.Equal(now.Add(-24*time.Hour)) {
		t.Errorf("default window: %+v, want the 3 events of the last 24h", got)
	}
	f.get(t, asAdmin, "/api/v1/audit?limit=2").decode(t, &got)
	if len(got.Events) != 2 || !got.Truncated || got.Events[1].Caller != "c2" {
		t.Errorf("limit 2: %+v, want the 2 newest, truncated", got)
	}
	f.get(t, asAdmin, "/api/v1/audit?since=3d").decode(t, &got)
	if len(got.Events) != 4 {
		t.Errorf("since 3d: %d events, want 4", len(got.Events))
	}
	f.get(t, asAdmin, "/api/v1/audit?from=2020-01-01&to=2020-01-02").decode(t, &got)
	if got.Events == nil || len(got.Events) != 0 {
		t.Errorf("an empty window: %+v, want events []", got.Events)
	}
	for query, msg := range map[string]string{
		"?limit=0":                  `limit: "0" is not a number from 1 to 50`,
		"?limit=51":                 `limit: "51" is not a number from 1 to 50`,
		"?since=1h&from=2026-11-01": "since and from exclude each other",
		"?from=2026-11-03":          "from: 2026-11-03T00:00:00Z is not before to 2026-11-02T11:00:00Z",
		"?user=bob":                 "\"user\" is not a parameter of /api/v1/audit (since, from, to, limit)",
	} {
		if e := f.get(t, asAdmin, "/api/v1/audit"+query).apiError(t, http.StatusBadRequest, apitype.CodeBadRequest); e.Message != msg {
			t.Errorf("%s: message %q, want %q", query, e.Message, msg)
		}
	}
}
