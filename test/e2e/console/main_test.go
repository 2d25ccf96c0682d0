// Package console holds the end-to-end tests of the web console in a
// real headless Chromium, against the real agent: every page at a
// desktop and a phone size in the light and the dark theme, with no
// script errors, no horizontal overflow, charts that have data, text
// contrast (WCAG AA) from computed styles, the keyboard, the roles,
// refused input and escaped names, over the demo and over a 30-day
// ledger; screenshots of each page are kept as test artefacts.
//
// The pages are one table (pages, below): a new page is one row.
package console

import (
	"flag"
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// updateDocs writes one screenshot per page, at the desktop size in the
// light theme over the 30-day ledger (or the demo, for the pages that
// say so), under docs/console for the README.
var updateDocs = flag.Bool("update-docs", false, "write docs/console/NAME.png, one screenshot per page at 1400x900")

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// page is one page of the console.
type page struct {
	// name names its screenshots: docs/console/NAME.png.
	name string
	// path is the page as a link shows it, query string and all.
	path string
	// adminOnly pages tell others that they are not for them.
	adminOnly bool
	// charts is the least number of charts (figure.chart) the page draws.
	charts int
	// demoShows is text the page shows on the demo once it has run a
	// little (the pages test waits for it).
	demoShows string
	// bad is the page with a parameter it does not know, answered with
	// a message (#message) and 400.
	bad string
	// ledger are the page as it reads the 30-day ledger (windows of the
	// last day or week); none for path alone.
	ledger []string
	// ledgerLines is how many lines each line chart of the page draws
	// over the 30-day ledger (one per GPU of its node); 0: not checked.
	ledgerLines int
	// userSees is what alice, a user of the demo, must see on the page:
	// her own rows, and others' as "another user".
	userSees []string
	// othersIn selects what on the page may name others to a user: the
	// check that she sees only her own rows leaves it out.
	othersIn string
	// buttons says that the page shows admins and users buttons on the
	// demo (a viewer must see none anywhere).
	buttons bool
	// stops says whether the page has a Stop for a container that wastes
	// its GPUs (the stop test clicks it).
	stops bool
	// docsFromDemo takes the README's screenshot of the page from the
	// demo, which has findings and jobs, not from the 30-day ledger.
	docsFromDemo bool
	// xss is the page as it shows the name of a container (the escaping
	// test looks for it there as text); "" for a page that shows none.
	xss string
}

// pages are the console's pages. Keep in step with web.Nav and
// internal/api/server's pageRoutes. The nodes pages, which an agent has
// only in a fleet, are visited over a fleet of their own
// (TestConsoleNodes).
var pages = []page{
	{name: "overview", path: "/", bad: "/?window=nonsense", xss: "/",
		userSees: []string{"alice-llama-finetune", "another user"}},
	{name: "gpus", path: "/gpus?window=1h", charts: 5, bad: "/gpus?window=nonsense", xss: "/gpus?window=1h",
		ledger: []string{"/gpus?window=24h", "/gpus?window=7d"}, ledgerLines: 8,
		userSees: []string{"alice-llama-finetune", "another user"}},
	{name: "usage", path: "/usage?window=7d", charts: 1, bad: "/usage?window=nonsense", xss: "/usage?window=24h&by=container",
		ledger:   []string{"/usage?window=24h", "/usage?window=7d", "/usage?window=30d&by=team"},
		userSees: []string{"alice"}},
	{name: "waste", path: "/waste", bad: "/waste?window=nonsense", xss: "/waste", stops: true, demoShows: "erin-dev", docsFromDemo: true},
	{name: "whatif", path: "/whatif?window=24h", charts: 1, bad: "/whatif?window=nonsense", ledger: []string{"/whatif?window=7d"}},
	{name: "jobs", path: "/jobs", bad: "/jobs?state=nonsense", demoShows: "alice-train", buttons: true, docsFromDemo: true,
		userSees: []string{"alice-train"},
		// The queue's reason for a waiting job names who holds each GPU
		// ("GPU 1 is held by dave's container dave-eval"), to a user too,
		// as the API's does: an open question, not settled here.
		othersIn: "#jobs tbody td.why"},
	{name: "audit", path: "/audit?window=24h", adminOnly: true, bad: "/audit?window=nonsense"},
}

// ledgerPaths are the page as it reads the 30-day ledger.
func (p page) ledgerPaths() []string {
	if len(p.ledger) > 0 {
		return p.ledger
	}
	return []string{p.path}
}

// viewport is a size the console must work at.
type viewport struct {
	name          string
	width, height int64
	phone         bool
}

var viewports = []viewport{
	{"desktop", 1400, 900, false},
	{"phone", 390, 844, true},
}

var themes = []string{"light", "dark"}
