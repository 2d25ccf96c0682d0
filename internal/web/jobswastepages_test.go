package web_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// scriptName is what a container or a job is called by someone who
// hopes the console writes it into the page as it is.
const scriptName = "<script>alert(1)</script>"

// pageAs gets path as a browser signed in by caller's session (with its
// CSRF token, as console.js sends it), or with caller's token in the
// Authorization header when session is false.
func pageAs(t *testing.T, f *servertest.Fixture, caller string, session bool, path string) servertest.Answer {
	t.Helper()
	if !session {
		return f.Get(t, caller, path)
	}
	b, ses := f.SignIn(t, caller)
	b.CSRF = ses.CSRFToken
	return b.Do(t, http.MethodGet, path, "")
}

// checkHTMLPage checks that a is a console page with status and that
// nothing named by scriptName reached it unescaped.
func checkHTMLPage(t *testing.T, a servertest.Answer, status int) string {
	t.Helper()
	if a.Status != status {
		t.Fatalf("status %d, want %d; body %s", a.Status, status, a.Body)
	}
	if ct := a.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q, want text/html", ct)
	}
	body := string(a.Body)
	if strings.Contains(body, scriptName) || strings.Contains(body, "<script>alert") {
		t.Errorf("the page holds an unescaped script:\n%s", body)
	}
	return body
}

// apiButton is a button of a page that calls the API.
type apiButton struct {
	Label, Method, Path, Body, Confirm string
}

var buttonRE = regexp.MustCompile(`<button type="button"[^>]* data-method="([^"]*)" data-path="([^"]*)" data-confirm="([^"]*)"(?: data-body="([^"]*)")?[^>]*>([^<]*)</button>`)

// buttons are the API buttons of a page, attributes unescaped as a
// browser reads them.
func buttons(body string) []apiButton {
	var out []apiButton
	for _, m := range buttonRE.FindAllStringSubmatch(body, -1) {
		out = append(out, apiButton{Label: m[5], Method: html.UnescapeString(m[1]), Path: html.UnescapeString(m[2]),
			Confirm: html.UnescapeString(m[3]), Body: html.UnescapeString(m[4])})
	}
	return out
}

// pageMessage is the message the layout shows above a page, unescaped.
func pageMessage(body string) string {
	m := regexp.MustCompile(`<p class="msg err" role="alert" id="message">([^<]*)</p>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// pageWaste holds findings of alice's running container (named to
// break the page), her stopped one, bob's running one (once more for a
// finding that no longer holds) and carol's processes outside
// containers.
func pageWaste() *waste.Report {
	finding := func(id, rule, ctrID, ctr, owner string, hours float64, ev map[string]float64) waste.Finding {
		kind := waste.OwnerContainer
		if ctrID == "" {
			kind = waste.OwnerHost
		}
		return waste.Finding{ID: id, Rule: rule, Node: "n1", OwnerKind: kind, ContainerID: ctrID, Container: ctr, Owner: owner,
			GPUs: []waste.GPURef{{Index: 0, UUID: "GPU-0"}}, Since: servertest.Start, FirstSeen: servertest.Start, Until: servertest.Start.Add(time.Hour),
			Active: true, Evidence: ev, WastedGPUHours: hours, Cost: 2 * hours}
	}
	idle := map[string]float64{waste.EvSMPercent: 1.5, waste.EvSMPercentMax: 3, waste.EvCPUCores: 0.02, waste.EvCPUCoresMax: 0.05,
		waste.EvThreshold: 5, waste.EvThresholdCPU: 0.1, waste.EvDuration: 3700, waste.EvWindow: 3600}
	raw := &waste.Report{From: servertest.Start.Add(-time.Hour), To: servertest.Start.Add(time.Hour), Currency: "EUR", Findings: []waste.Finding{
		finding("idle-script", config.RuleIdle, servertest.AliceTrain, scriptName, "alice", 3, idle),
		finding("stalled-old", config.RuleStalled, servertest.AliceOld, "alice-old", "alice", 1, map[string]float64{waste.EvMemoryBytes: 4 << 30, waste.EvSMPercentMax: 0}),
		finding("idle-bob", config.RuleIdle, servertest.BobTrain, "bob-train", "bob", 2, idle),
		finding("outside-carol", config.RuleOutside, "", "", "carol", 0.5, map[string]float64{waste.EvPresentHours: 0.5, waste.EvMemoryBytes: 1 << 30}),
		finding("old-bob", config.RuleTooOld, servertest.BobTrain, "bob-train", "bob", 0.25, map[string]float64{waste.EvAge: 3 * 86400, waste.EvMaxAge: 2 * 86400}),
	}}
	raw.Findings[4].Active = false // it held, and holds no more
	return raw.Only(func(*waste.Finding) bool { return true })
}

func findingIDs(body string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`<tr id="finding-([^"]+)"`).FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestWastePageRoles: everyone sees the findings their role may see,
// with evidence in units; only an admin signed in by a session gets stop
// buttons, only for running containers, and the button stops the
// container through the API with the rule as its reason.
func TestWastePageRoles(t *testing.T) {
	f := servertest.NewFixture(t, func(c *server.Config) { c.Waste = servertest.FixedWaste{Findings: pageWaste()} })
	all := []string{"idle-script", "idle-bob", "stalled-old", "outside-carol", "old-bob"}
	for _, tt := range []struct {
		name, caller string
		session      bool
		ids          []string
		stops        []string
		note         string
	}{
		{"admin by session", servertest.AsAdmin, true, all, []string{servertest.AliceTrain, servertest.BobTrain}, ""},
		{"admin by token", servertest.AsAdmin, false, all, nil, "Sign in to the console to stop containers"},
		{"viewer", servertest.AsViewer, true, all, nil, ""},
		{"alice", servertest.AsAlice, true, []string{"idle-script", "stalled-old"}, nil, ""},
		{"bob", servertest.AsBob, true, []string{"idle-bob", "old-bob"}, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := checkHTMLPage(t, pageAs(t, f, tt.caller, tt.session, "/waste"), http.StatusOK)
			if got := findingIDs(body); !slices.Equal(got, tt.ids) {
				t.Errorf("findings %v, want %v", got, tt.ids)
			}
			var stops []string
			for _, b := range buttons(body) {
				id := strings.TrimSuffix(strings.TrimPrefix(b.Path, "/api/v1/containers/"), "/stop")
				stops = append(stops, id)
				if b.Method != "POST" || b.Body != `{"reason":"waste: idle"}` || b.Label != "Stop" || !strings.HasPrefix(b.Confirm, "Stop container ") {
					t.Errorf("button %+v, want a POST with the reason waste: idle", b)
				}
			}
			if !slices.Equal(stops, tt.stops) {
				t.Errorf("stop buttons for %v, want %v", stops, tt.stops)
			}
			if tt.note != "" && !strings.Contains(body, tt.note) {
				t.Errorf("the page does not say %q", tt.note)
			}
			if !slices.Contains(tt.ids, "idle-bob") && strings.Contains(body, "bob-train") {
				t.Errorf("%s sees bob's container", tt.caller)
			}
		})
	}

	body := checkHTMLPage(t, pageAs(t, f, servertest.AsAdmin, true, "/waste"), http.StatusOK)
	for _, want := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt;",
		// Evidence with units.
		"<dt>mean SM utilisation</dt><dd>1.5 %</dd>", "<dt>mean CPU use</dt><dd>0.02 cores</dd>",
		"<dt>rule threshold</dt><dd>5 % SM</dd>", "<dt>lasted</dt><dd>1h 1m</dd>", "<dt>mean GPU memory held</dt><dd>4 GiB</dd>",
		"<dt>GPU-hours present</dt><dd>0.5 h</dd>",
		// Per finding, and totals per rule.
		`<td class="num">3 h</td>`, `<td class="num">6.00 EUR</td>`,
		`<td>idle</td><td class="num">2</td><td class="num">2</td><td class="num">5 h</td><td class="num">10.00 EUR</td>`,
		`<tr class="total"><td>Total</td><td class="num">5</td><td class="num">4</td><td class="num">6.75 h</td><td class="num">13.50 EUR</td>`,
		`<tr id="finding-old-bob" class="finding inactive">`, "<dt>running for</dt><dd>3d 0h</dd>",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the admin's page lacks %s", want)
		}
	}

	// Press the button as console.js does: its path and body, with the
	// session's CSRF token.
	b, ses := f.SignIn(t, servertest.AsAdmin)
	b.CSRF = ses.CSRFToken
	f.Audit.Take()
	stop := buttons(body)[0]
	if a := b.Do(t, stop.Method, stop.Path, stop.Body); a.Status != http.StatusOK {
		t.Fatalf("the stop button's call: %d %s", a.Status, a.Body)
	}
	if calls := f.Stopper.Take(); len(calls) != 1 || calls[0].ID != servertest.AliceTrain {
		t.Errorf("stops %v, want alice's container", calls)
	}
	found := false
	for _, e := range f.Audit.Take() {
		found = found || e.Action == "containers.stop" && strings.Contains(e.Outcome+e.Error+e.Target, servertest.AliceTrain)
	}
	if !found {
		t.Errorf("the stop is not in the audit log")
	}
}

// TestWastePageOffAndBadInput: waste off says so, and so does Docker
// off to an admin; a parameter is a message, not a page.
func TestWastePageOffAndBadInput(t *testing.T) {
	f := servertest.NewFixture(t, func(c *server.Config) { c.Waste = nil })
	body := checkHTMLPage(t, pageAs(t, f, servertest.AsAdmin, true, "/waste"), http.StatusOK)
	if !strings.Contains(body, "The live waste rules are off on this agent (waste.enabled: false)") || len(buttons(body)) != 0 {
		t.Errorf("the page with waste off:\n%s", body)
	}
	// Without Docker there is nothing to stop with, and the page says so.
	f = servertest.NewFixture(t, func(c *server.Config) { c.Waste, c.Stopper = servertest.FixedWaste{Findings: pageWaste()}, nil })
	body = checkHTMLPage(t, pageAs(t, f, servertest.AsAdmin, true, "/waste"), http.StatusOK)
	if len(buttons(body)) != 0 || !strings.Contains(body, "The agent does not manage containers here (docker.enabled: false)") {
		t.Errorf("the page without Docker:\n%s", body)
	}
	body = checkHTMLPage(t, f.Get(t, servertest.AsViewer, "/waste?rule=idle"), http.StatusBadRequest)
	if msg := pageMessage(body); !strings.Contains(msg, `the waste page takes no parameters (it was given "rule=idle")`) {
		t.Errorf("message %q", msg)
	}
	if len(findingIDs(body)) != 0 {
		t.Errorf("a refused page lists findings")
	}
}

func jobIDs(body string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`<tr id="job-([^"]+)"`).FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// jobButtons are the page's buttons by job, as verbs: cancel, hold,
// release.
func jobButtons(t *testing.T, body string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, b := range buttons(body) {
		rest, ok := strings.CutPrefix(b.Path, "/api/v1/jobs/")
		id, verb, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 || b.Method != "POST" || b.Body != "" {
			t.Errorf("button %+v is not a job action", b)
			continue
		}
		out[id] = append(out[id], verb)
	}
	return out
}

// TestJobsPage: a user sees and acts on their own jobs only, a viewer
// sees every job and has no buttons, an admin acts on everyone's; the
// buttons follow the state (a running job can be cancelled, not held),
// and pressing one does what it says.
func TestJobsPage(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	cmdJob := strings.Replace(servertest.GoodJob, `"command":["sleep","60"]`, `"command":["sleep","`+strings.ReplaceAll(scriptName, `"`, `\"`)+`"]`, 1)
	a1 := f.Submit(t, servertest.AsAlice, cmdJob)
	a2 := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	b1 := f.Submit(t, servertest.AsBob, servertest.GoodJob)
	// a2 runs: the store takes the write as the queue's launcher makes it.
	now := time.Now().UTC()
	if _, err := f.Store.UpdateJob(context.Background(), a2.ID, "queued", func(j *queue.Job) {
		j.State, j.StartedAt, j.GPUs, j.Reason, j.ReasonText = "running", now, []string{"GPU-0"}, "", "running on GPU-0"
	}, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	// A job in the ledger with a name the queue would refuse, as another
	// agent or an older release may have written it.
	if _, err := f.Store.SubmitJob(context.Background(), queue.Job{Name: scriptName, User: "bob", State: "queued", GPUsRequested: 1,
		Image: "gpumeter/sleeper:1", TimeLimit: time.Hour, SubmittedAt: now, Reason: "resources", ReasonText: "waits for " + scriptName}, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	all, err := f.Store.Jobs(context.Background(), ledger.JobFilter{})
	if err != nil || len(all) != 4 {
		t.Fatalf("jobs %v, %v", all, err)
	}
	b2 := all[3].ID
	everyone := []string{a1.ID, a2.ID, b1.ID, b2}
	for _, tt := range []struct {
		name, caller string
		session      bool
		ids          []string
		buttons      map[string][]string
	}{
		{"alice", servertest.AsAlice, true, []string{a1.ID, a2.ID}, map[string][]string{a1.ID: {"cancel", "hold"}, a2.ID: {"cancel"}}},
		{"alice by token", servertest.AsAlice, false, []string{a1.ID, a2.ID}, map[string][]string{}},
		{"bob", servertest.AsBob, true, []string{b1.ID, b2}, map[string][]string{b1.ID: {"cancel", "hold"}, b2: {"cancel", "hold"}}},
		{"viewer", servertest.AsViewer, true, everyone, map[string][]string{}},
		{"admin", servertest.AsAdmin, true, everyone, map[string][]string{a1.ID: {"cancel", "hold"}, a2.ID: {"cancel"}, b1.ID: {"cancel", "hold"}, b2: {"cancel", "hold"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := checkHTMLPage(t, pageAs(t, f.Fixture, tt.caller, tt.session, "/jobs"), http.StatusOK)
			if got := jobIDs(body); !slices.Equal(got, tt.ids) {
				t.Errorf("jobs %v, want %v", got, tt.ids)
			}
			if got := jobButtons(t, body); !equalButtons(got, tt.buttons) {
				t.Errorf("buttons %v, want %v", got, tt.buttons)
			}
			if slices.Contains(tt.ids, a1.ID) && !strings.Contains(body, "sleep &lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Errorf("the page does not show a1's command escaped")
			}
			if slices.Contains(tt.ids, b2) && !strings.Contains(body, `<span class="job-name">&lt;script&gt;alert(1)&lt;/script&gt;</span>`) {
				t.Errorf("the page does not show b2's name escaped")
			}
			if !slices.Contains(tt.ids, b1.ID) && strings.Contains(body, ">bob<") {
				t.Errorf("%s sees bob's jobs:\n%s", tt.caller, body)
			}
		})
	}

	// A running job's GPUs are named by index, with the UUID in the
	// title, and the queue's "running on GPU-0" is not said again.
	row := regexp.MustCompile(`(?s)<tr id="job-` + a2.ID + `".*?</tr>`).FindString(checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/jobs"), http.StatusOK))
	if !strings.Contains(row, `<abbr class="gpu" title="GPU-0">GPU 0</abbr>`) || strings.Count(row, "GPU-0") != 1 {
		t.Errorf("the running job's row names its GPU other than once by index with the UUID on hover:\n%s", row)
	}

	// Alice holds a1 with the page's button; it then offers release.
	b, ses := f.SignIn(t, servertest.AsAlice)
	b.CSRF = ses.CSRFToken
	body := checkHTMLPage(t, b.Do(t, "GET", "/jobs", ""), http.StatusOK)
	var hold apiButton
	for _, bt := range buttons(body) {
		if bt.Path == "/api/v1/jobs/"+a1.ID+"/hold" {
			hold = bt
		}
	}
	if hold.Confirm != "Hold job "+a1.ID+" (train) of alice?" {
		t.Errorf("hold confirms %q", hold.Confirm)
	}
	if a := b.Do(t, hold.Method, hold.Path, "{}"); a.Status != http.StatusOK {
		t.Fatalf("hold: %d %s", a.Status, a.Body)
	}
	body = checkHTMLPage(t, b.Do(t, "GET", "/jobs", ""), http.StatusOK)
	if got := jobButtons(t, body)[a1.ID]; !slices.Equal(got, []string{"cancel", "release"}) {
		t.Errorf("a held job's buttons %v, want cancel and release", got)
	}
	if !strings.Contains(body, "queued (held)") {
		t.Errorf("the held job is not shown as held")
	}

	// Cancelled, a1 leaves the live list and shows with all=1.
	if a := f.Post(t, servertest.AsAlice, "/api/v1/jobs/"+a1.ID+"/cancel"); a.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", a.Status, a.Body)
	}
	if got := jobIDs(checkHTMLPage(t, f.Get(t, servertest.AsAlice, "/jobs"), http.StatusOK)); !slices.Equal(got, []string{a2.ID}) {
		t.Errorf("live jobs %v, want only a2", got)
	}
	body = checkHTMLPage(t, b.Do(t, "GET", "/jobs?all=1", ""), http.StatusOK)
	if got := jobIDs(body); !slices.Equal(got, []string{a1.ID, a2.ID}) {
		t.Errorf("all jobs %v, want a1 and a2", got)
	}
	if got := jobButtons(t, body)[a1.ID]; len(got) != 0 {
		t.Errorf("a cancelled job has buttons %v", got)
	}
	if got := jobIDs(checkHTMLPage(t, f.Get(t, servertest.AsViewer, "/jobs?state=running"), http.StatusOK)); !slices.Equal(got, []string{a2.ID}) {
		t.Errorf("running jobs %v, want a2", got)
	}
	if got := jobIDs(checkHTMLPage(t, f.Get(t, servertest.AsViewer, "/jobs?state=cancelled"), http.StatusOK)); !slices.Equal(got, []string{a1.ID}) {
		t.Errorf("cancelled jobs %v, want a1", got)
	}
}

func equalButtons(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestJobsPageBadInputAndOff: parameters the page does not know are a
// message naming them; the queue off says so.
func TestJobsPageBadInputAndOff(t *testing.T) {
	f := servertest.NewJobsFixture(t, nil)
	for query, want := range map[string]string{
		"state=bogus":   `state: unknown job state "bogus"`,
		"user=bob":      "user: not a parameter of this endpoint (it takes all, state)",
		"all=maybe":     `all: "maybe" is not 1 or 0`,
		"state=queued,": "state: an empty state",
	} {
		body := checkHTMLPage(t, f.Get(t, servertest.AsViewer, "/jobs?"+query), http.StatusBadRequest)
		if msg := pageMessage(body); !strings.HasPrefix(msg, "the jobs page cannot show that: ") || !strings.Contains(msg, want) {
			t.Errorf("%s: message %q, want one with %q", query, msg, want)
		}
	}
	off := servertest.NewFixture(t, nil)
	body := checkHTMLPage(t, pageAs(t, off, servertest.AsAdmin, true, "/jobs"), http.StatusOK)
	if !strings.Contains(body, "The GPU job queue is off on this agent") || len(buttons(body)) != 0 {
		t.Errorf("the page with the queue off:\n%s", body)
	}
}

// TestAuditPage: the log for admins, newest first, over the window the
// query asks for, saying when it is cut; others are turned away.
func TestAuditPage(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	now := f.Clock.Now()
	for _, e := range []audit.Event{
		{Time: now.Add(-3 * 24 * time.Hour), Kind: "api", Action: "jobs.cancel", Caller: "bob (token bob-laptop)", Target: "job j-000001", Outcome: "ok", Status: 200},
		{Time: now.Add(-2 * time.Hour), Kind: "api", Action: "usage.read", Caller: "alice (token alice-laptop)", Target: "user=alice", Outcome: "ok", Status: 200},
		{Time: now.Add(-30 * time.Minute), Kind: "action", Rule: "idle", Container: scriptName, ContainerID: servertest.AliceTrain, Owner: "alice", Outcome: "stopped", DryRun: true},
	} {
		if err := f.Audit.Act(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(body string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<tr class="event">\s*<td><time datetime="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	iso := func(d time.Duration) string { return now.Add(-d).UTC().Format(time.RFC3339) }
	for query, want := range map[string][]string{
		"":           {iso(30 * time.Minute), iso(2 * time.Hour)},
		"?window=1h": {iso(30 * time.Minute)},
		"?window=7d": {iso(30 * time.Minute), iso(2 * time.Hour), iso(72 * time.Hour)},
		"?from=" + iso(100*time.Hour) + "&to=" + iso(time.Hour): {iso(2 * time.Hour), iso(72 * time.Hour)},
		// The form sends an empty to: now.
		"?from=" + iso(100*time.Hour) + "&to=": {iso(30 * time.Minute), iso(2 * time.Hour), iso(72 * time.Hour)},
	} {
		body := checkHTMLPage(t, pageAs(t, f, servertest.AsAdmin, true, "/audit"+query), http.StatusOK)
		if got := rows(body); !slices.Equal(got, want) {
			t.Errorf("%s: events at %v, want %v", query, got, want)
		}
		if strings.Contains(body, `id="truncated"`) {
			t.Errorf("%s: said to be truncated", query)
		}
	}
	body := checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/audit?window=7d&limit=2"), http.StatusOK)
	if got := rows(body); !slices.Equal(got, []string{iso(30 * time.Minute), iso(2 * time.Hour)}) {
		t.Errorf("limited: events at %v, want the newest two", got)
	}
	if !strings.Contains(body, "The window holds more than 2 events: these are the newest 2.") {
		t.Errorf("a cut list does not say so")
	}
	if !strings.Contains(body, `<a href="/audit?window=7d" aria-current="true">last 7d</a>`) {
		t.Errorf("the 7d preset is not marked")
	}
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the container's name is not shown escaped")
	}

	// Without limit the page shows its 500, below the API's most; the
	// events are recorded oldest first, as the log keeps them.
	g := servertest.NewFixture(t, func(c *server.Config) { c.Limits.MaxAuditEvents = 1000 })
	for i := range 501 {
		if err := g.Audit.Act(context.Background(), audit.Event{Time: now.Add(-time.Duration(501-i) * time.Second), Kind: "api", Action: "usage.read"}); err != nil {
			t.Fatal(err)
		}
	}
	body = checkHTMLPage(t, g.Get(t, servertest.AsAdmin, "/audit"), http.StatusOK)
	if got := rows(body); len(got) != 500 || got[0] != iso(time.Second) {
		t.Errorf("%d rows from %v, want the newest 500", len(got), got[:1])
	}
	if !strings.Contains(body, "more than 500 events") {
		t.Errorf("the page's own limit is not said")
	}
	if got := rows(checkHTMLPage(t, g.Get(t, servertest.AsAdmin, "/audit?limit=1000"), http.StatusOK)); len(got) != 501 {
		t.Errorf("limit=1000: %d rows, want 501", len(got))
	}

	// A minute's total of calls is written when the minute is over,
	// after a call made since: the page is by time all the same, and a
	// row with no target says so.
	h := servertest.NewFixture(t, nil)
	for _, e := range []audit.Event{
		{Time: now.Add(-time.Minute), Kind: "api", Action: "jobs.cancel", Target: "job j-000002", Outcome: "ok", Status: 200},
		{Time: now.Add(-2 * time.Minute), Kind: "api", Action: "gpus.read", Outcome: "ok", Status: 200, Count: 3},
		{Time: now.Add(-90 * time.Second), Kind: "api", Action: "usage.read", Target: "user=alice", Outcome: "ok", Status: 200},
	} {
		if err := h.Audit.Act(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	body = checkHTMLPage(t, h.Get(t, servertest.AsAdmin, "/audit"), http.StatusOK)
	if got, want := rows(body), []string{iso(time.Minute), iso(90 * time.Second), iso(2 * time.Minute)}; !slices.Equal(got, want) {
		t.Errorf("events at %v, want %v, newest first", got, want)
	}
	if !strings.Contains(body, `<td><span class="muted">–</span></td>`) {
		t.Errorf("the minute's total shows an empty target")
	}

	for _, caller := range []string{servertest.AsAlice, servertest.AsViewer} {
		body := checkHTMLPage(t, pageAs(t, f, caller, true, "/audit"), http.StatusForbidden)
		if msg := pageMessage(body); !strings.HasPrefix(msg, "this page is not for you: ") || len(rows(body)) != 0 {
			t.Errorf("%s: message %q, rows %v", caller, msg, rows(body))
		}
	}
	for query, want := range map[string]string{
		"window=3h":                        `the audit page does not know the window "3h": it shows 1h, 24h or 7d`,
		"since=1h":                         "since: not a parameter of this endpoint (it takes window, from, to, limit)",
		"from=never":                       `from: "never" is neither RFC 3339`,
		"window=1h&from=" + iso(time.Hour): "window and from exclude each other",
		"limit=51":                         `limit: "51" is not a number from 1 to 50`,
	} {
		body := checkHTMLPage(t, f.Get(t, servertest.AsAdmin, "/audit?"+query), http.StatusBadRequest)
		if msg := pageMessage(body); !strings.Contains(msg, want) {
			t.Errorf("%s: message %q, want one with %q", query, msg, want)
		}
	}
}

// TestJobsPageEstimates: a queued job shows its place in line and its
// estimated start as the scheduler ranked it, in the reader's zone.
func TestJobsPageEstimates(t *testing.T) {
	est := servertest.Start.Add(4*time.Hour + 20*time.Minute) // 14:20 UTC, 15:20 in Berlin
	f := servertest.NewJobsFixtureServer(t, nil, func(c *server.Config) { c.Ranks = servertest.RankTable{"j-000001": {Prio: 0.5, Pos: 2, Est: est}} })
	ranked := f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	req, err := http.NewRequest(http.MethodGet, f.URL+"/jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", f.Headers[servertest.AsAlice])
	req.AddCookie(&http.Cookie{Name: zoneCookie, Value: "Europe%2FBerlin"})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := io.Copy(&sb, resp.Body); err != nil {
		t.Fatal(err)
	}
	body := checkHTMLPage(t, servertest.Answer{Status: resp.StatusCode, Header: resp.Header, Body: []byte(sb.String())}, http.StatusOK)
	row := regexp.MustCompile(`(?s)<tr id="job-` + ranked.ID + `".*?</tr>`).FindString(body)
	for _, want := range []string{"queued <span class=\"muted\">#2 in line</span>", `<span class="nobreak estimate">starts about 15:20:00</span>`} {
		if !strings.Contains(row, want) {
			t.Errorf("the ranked job's row lacks %s:\n%s", want, row)
		}
	}
	if !strings.Contains(body, `Times in <span id="zone">Europe/Berlin</span>`) {
		t.Errorf("the page does not name the reader's zone")
	}
	if n := strings.Count(body, `<span class="muted">start not known</span>`); n != 1 {
		t.Errorf("%d jobs without an estimate, want the unranked one", n)
	}
}
