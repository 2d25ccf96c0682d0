package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// until evaluates expr until it is true, through the page's own
// navigations.
func until(t *testing.T, b *harness.Browser, what, expr string) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
		var ok bool
		ok, err = chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
	}
	loc, _ := chromedp.Run(b.Ctx, chromedp.Location())
	t.Fatalf("%s: never true at %s (%v): %s", what, loc, err, expr)
}

const usageRowsJS = `[...document.querySelectorAll("#usage-table tbody th[scope=row]")].map(th => th.textContent).join("|")`

// TestUsagePageInBrowser drives /usage of a live agent in a real
// headless Chromium, signed in by the session cookie: the chart has bars,
// the grouping changes from the keyboard, a team drills down to its
// users, the downloads come with the cookie, a custom window is kept in
// the address, an unknown window says so, and no page logs an error.
func TestUsagePageInBrowser(t *testing.T) {
	a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "100ms", "--ledger-flush-interval", "1s")
	harness.WaitFor(t, 15*time.Second, "usage of every team in the ledger", func() bool {
		status, _, body := harness.Fetch(t, a.URL+"/api/v1/usage?by=team&since=1h&format=json")
		return status == http.StatusOK && strings.Contains(string(body), `"nlp"`) && strings.Contains(string(body), `"vision"`)
	})
	b := harness.NewBrowser(t)
	harness.Step(t, b.Ctx, "sign in by the demo's link", chromedp.Navigate(a.URL+"/#token="+a.Token))
	until(t, b, "signed in", `(document.getElementById("status") || {}).textContent.includes("signed in as")`)

	harness.Step(t, b.Ctx, "open the usage by team", chromedp.Navigate(a.URL+"/usage?by=team"))
	until(t, b, "team rows", usageRowsJS+`.split("|").includes("nlp")`)
	if n := harness.Step(t, b.Ctx, "chart bars", chromedp.Evaluate[int](`document.querySelectorAll("#usage-chart svg rect").length`)); n == 0 {
		t.Error("the chart has no bars")
	}
	if got := harness.Step(t, b.Ctx, "label of the grouping", chromedp.Evaluate[string](`document.querySelector("label[for=by]").textContent.trim().split("\n")[0]`)); got != "Group by" {
		t.Errorf("the grouping's label is %q", got)
	}

	// From the keyboard: the next grouping, then Tab to the button and
	// Enter.
	harness.Step(t, b.Ctx, "choose a grouping with the keyboard", chromedp.Steps(
		chromedp.Focus(chromedp.ID("by")), chromedp.KeyEvent(kb.ArrowDown), chromedp.KeyEvent("\t"), chromedp.KeyEvent("\r")))
	until(t, b, "grouped by project", `location.search.includes("by=project") && document.getElementById("table-h").textContent === "By project"`)

	// Drill down: team nlp, then its user.
	harness.Step(t, b.Ctx, "back to teams", chromedp.Navigate(a.URL+"/usage?by=team&window=7d"))
	until(t, b, "team rows", usageRowsJS+`.split("|").includes("nlp")`)
	harness.Step(t, b.Ctx, "open team nlp", chromedp.Evaluate[bool](`[...document.querySelectorAll("#usage-table tbody th a")].find(l => l.textContent === "nlp").click() || true`))
	until(t, b, "team nlp's users", `location.search.includes("team=nlp") && location.search.includes("window=7d") && `+usageRowsJS+` === "alice"`)
	if crumb := harness.Step(t, b.Ctx, "breadcrumb", chromedp.Evaluate[string](`document.querySelector("nav.crumbs [aria-current=page]").textContent`)); crumb != "team nlp" {
		t.Errorf("the breadcrumb ends at %q, want team nlp", crumb)
	}

	// The downloads, with the session cookie alone.
	got := harness.Step(t, b.Ctx, "download the CSV", chromedp.Evaluate[string](`fetch(document.querySelector(".downloads a").href).then(r => r.text().then(x => r.status + " " + r.headers.get("content-type") + " " + x.split("\n").length))`, chromedp.EvalAwaitPromise))
	if !strings.HasPrefix(got, "200 text/csv; charset=utf-8 ") {
		t.Errorf("the CSV download: %s", got)
	}
	keys := harness.Step(t, b.Ctx, "download the JSON", chromedp.Evaluate[string](`fetch([...document.querySelectorAll(".downloads a")].find(l => l.textContent === "JSON").href).then(r => r.json()).then(j => j.rows.map(r => r.key).join("|"))`, chromedp.EvalAwaitPromise))
	if rows := harness.Step(t, b.Ctx, "rows", chromedp.Evaluate[string](usageRowsJS)); keys != rows {
		t.Errorf("the JSON download has rows %q, the page %q", keys, rows)
	}

	// A custom window from the date inputs.
	today := time.Now().UTC().Format(time.DateOnly)
	harness.Step(t, b.Ctx, "a custom window", chromedp.Steps(
		chromedp.SetValue(chromedp.ID("from"), today), chromedp.SetValue(chromedp.ID("to"), today),
		chromedp.Click(chromedp.CSS(`#custom-form button[type="submit"]`))))
	until(t, b, "the custom window in the address", `location.search.includes("window=custom") && location.search.includes("from=`+today+`") && location.search.includes("team=nlp")`)

	harness.Step(t, b.Ctx, "an unknown window", chromedp.Navigate(a.URL+"/usage?window=1y"))
	until(t, b, "the message", `(document.getElementById("message") || {textContent: ""}).textContent.includes("does not know the window")`)

	for _, e := range b.Errors() {
		t.Errorf("the pages: %s", e)
	}
	for _, e := range b.FailedLoads() {
		// Answers that are errors on purpose: the sign-in page before the
		// token is taken (401), the unknown window (400).
		if strings.Contains(e, "/#token=") || strings.Contains(e, "window=1y") {
			continue
		}
		t.Errorf("the pages: %s", e)
	}
}
