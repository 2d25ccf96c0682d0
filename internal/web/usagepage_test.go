package web_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/report"
)

// evilName is a user and a container name that must come out as text.
const evilName = "<script>alert(1)</script>"

// ledgerReports builds reports from a real ledger, as the agent does.
type ledgerReports struct {
	store *sqlite.Store
	model cost.Model
}

func (l ledgerReports) Report(ctx context.Context, r report.Request) (*report.Report, error) {
	return report.Run(ctx, l.store, l.store, r, l.model)
}

// usageLedger is a SQLite ledger of the fixture's node before its clock
// (fixtureStart + 1 h, 11:00 UTC): alice (team ml) used GPU 0 from 08:00
// to 11:00, half of what she held; bob (team vision) GPU 1 from 09:00;
// a container of the user evilName (team ml) held GPU 1 at 08:00 and used
// a quarter of it; and alice used GPU 0 for an hour four days before.
func usageLedger(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	day := servertest.Start.Truncate(24 * time.Hour)
	at := func(h int) time.Time { return day.Add(time.Duration(h) * time.Hour) }
	gpus := []ledger.GPU{{Node: "n1", UUID: "GPU-0", Index: 0, Model: "H100", MemoryTotal: 80 << 30},
		{Node: "n1", UUID: "GPU-1", Index: 1, Model: "H100", MemoryTotal: 80 << 30}}
	ctrs := []ledger.Container{
		{Node: "n1", ID: servertest.AliceTrain, Name: "alice-train", Image: "train:1", User: "alice", Team: "ml", FirstSeen: at(-96), LastSeen: at(11)},
		{Node: "n1", ID: servertest.BobTrain, Name: "bob-train", Image: "train:1", User: "bob", Team: "vision", FirstSeen: at(9), LastSeen: at(11)},
		{Node: "n1", ID: servertest.Ghost, Name: evilName, Image: "evil:1", User: evilName, Team: "ml", FirstSeen: at(8), LastSeen: at(9)},
	}
	b := ledger.Batch{Nodes: []ledger.Node{{Name: "n1", FirstSeen: at(-96), LastSeen: at(11)}}, GPUs: gpus, Containers: ctrs}
	use := func(h int, id, gpu string, used float64) {
		b.Usage = append(b.Usage, ledger.Usage{Node: "n1", Start: at(h), OwnerKind: ledger.KindContainer, OwnerID: id, GPU: gpu,
			Sums: ledger.Sums{AllocatedSeconds: 3600, HeldSeconds: 3600, PresentSeconds: 3600, UsedSeconds: used, EnergyJoules: 3.6e5, PeakMemoryBytes: 8 << 30}})
	}
	gpuHour := func(h int, gpu string, alloc float64) {
		b.GPUUsage = append(b.GPUUsage, ledger.GPUUsage{Node: "n1", Start: at(h), GPU: gpu,
			GPUSums: ledger.GPUSums{Seconds: 3600, AllocatedSeconds: alloc, IdleSeconds: 3600 - alloc, EnergyJoules: 7.2e5, IdleEnergyJoules: 3.6e5 * (1 - alloc/3600)}})
	}
	for h := 8; h < 11; h++ {
		use(h, servertest.AliceTrain, "GPU-0", 1800)
		gpuHour(h, "GPU-0", 3600)
	}
	use(8, servertest.Ghost, "GPU-1", 900)
	gpuHour(8, "GPU-1", 3600)
	for h := 9; h < 11; h++ {
		use(h, servertest.BobTrain, "GPU-1", 3600)
		gpuHour(h, "GPU-1", 3600)
	}
	use(-84, servertest.AliceTrain, "GPU-0", 3600)
	gpuHour(-84, "GPU-0", 3600)
	gpuHour(-84, "GPU-1", 0)
	if err := store.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	return store
}

// newUsageFixture is the fixture with its reports and hourly sums read
// from usageLedger.
func newUsageFixture(t *testing.T, edit func(*server.Config)) *servertest.Fixture {
	t.Helper()
	store := usageLedger(t)
	return servertest.NewFixture(t, func(c *server.Config) {
		c.Reports = ledgerReports{store: store, model: cost.Model{Currency: "EUR", GPUHour: map[string]float64{"default": 2}}}
		c.Usage = store
		if edit != nil {
			edit(c)
		}
	})
}

// pageIn gets path as caller with the browser's zone cookie set to zone
// ("" for none).
func pageIn(t *testing.T, f *servertest.Fixture, caller, path, zone string) servertest.Answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := f.Headers[caller]; h != "" {
		req.Header.Set("Authorization", h)
	}
	if zone != "" {
		req.AddCookie(&http.Cookie{Name: zoneCookie, Value: url.QueryEscape(zone)})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

var (
	rowKeyRE = regexp.MustCompile(`<th scope="row" class="key">(?:<a href="([^"]*)">)?([^<]*)`)
	hrefRE   = regexp.MustCompile(`<a class="button" href="([^"]*)" download="[^"]+">([^<]*)</a>`)
	rectRE   = regexp.MustCompile(`<rect class="c(\d)"[^>]*><title>([^<]*)</title>`)
)

// rowKeys are the keys of the table's rows, unescaped, with their links.
func rowKeys(body []byte) (keys []string, links map[string]string) {
	links = map[string]string{}
	for _, m := range rowKeyRE.FindAllSubmatch(body, -1) {
		k := html.UnescapeString(string(m[2]))
		keys = append(keys, k)
		if len(m[1]) > 0 {
			links[k] = html.UnescapeString(string(m[1]))
		}
	}
	return keys, links
}

func downloads(body []byte) map[string]string {
	out := map[string]string{}
	for _, m := range hrefRE.FindAllSubmatch(body, -1) {
		out[string(m[2])] = html.UnescapeString(string(m[1]))
	}
	return out
}

func TestUsagePageAdmin(t *testing.T) {
	f := newUsageFixture(t, nil)
	a := pageIn(t, f, servertest.AsAdmin, "/usage?window=24h&by=user", "")
	if a.Status != http.StatusOK {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	body := string(a.Body)
	keys, links := rowKeys(a.Body)
	// Ordered by cost: alice held 3 GPU-hours, bob 2, the other 1.
	if want := []string{"alice", "bob", evilName}; strings.Join(keys, "|") != strings.Join(want, "|") {
		t.Errorf("rows %q, want %q", keys, want)
	}
	if got := links["alice"]; got != "/usage?by=container&user=alice&window=24h" {
		t.Errorf("alice's row leads to %q, want her containers in the same window", got)
	}
	if strings.Contains(body, evilName) || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the user %s is not escaped as text", evilName)
	}
	for _, want := range []string{`id="idle-row"`, `<label for="by">Group by`, `<select id="by" name="by">`,
		`<option value="job">job</option>`, `<label for="from">From`, `method="get"`, `<td class="num">6.00 EUR</td>`, `<td class="num">12.00 EUR</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// The chart: one bar an hour; at 08:00 alice used 0.5 h and the other
	// container 0.25 h of the 2 h they held.
	rects := rectRE.FindAllStringSubmatch(body, -1)
	if len(rects) == 0 {
		t.Fatal("the chart has no bars")
	}
	var at8 []string
	for _, r := range rects {
		if strings.HasPrefix(r[2], "2026-11-02 08:00 ") {
			at8 = append(at8, r[1]+" "+r[2])
		}
	}
	if want := []string{"0 2026-11-02 08:00 used: 0.75 h", "1 2026-11-02 08:00 held, not used: 1.25 h"}; strings.Join(at8, "|") != strings.Join(want, "|") {
		t.Errorf("bars at 08:00 %q, want %q", at8, want)
	}

	// The downloads are the API's report of the same window: the same
	// rows, as the session cookie or a token gets them.
	if !strings.Contains(body, `download="usage-by-user-20261101T1100Z-20261102T1100Z.csv"`) {
		t.Error("the CSV download has no file name naming its grouping and window")
	}
	dl := downloads(a.Body)
	if len(dl) != 3 || !strings.HasPrefix(dl["CSV"], "/api/v1/usage.csv?") || !strings.Contains(dl["FOCUS CSV"], "format=focus") {
		t.Fatalf("downloads %v", dl)
	}
	var rep report.Report
	f.Get(t, servertest.AsAdmin, dl["JSON"]).Decode(t, &rep)
	var apiKeys []string
	for _, r := range rep.Rows {
		apiKeys = append(apiKeys, r.Key)
	}
	if strings.Join(apiKeys, "|") != strings.Join(keys, "|") || rep.By != "user" {
		t.Errorf("the JSON download has rows %q by %s, the page %q", apiKeys, rep.By, keys)
	}
	if got, want := rep.To.Sub(rep.From), 24*time.Hour; got != want {
		t.Errorf("the JSON download covers %s, want %s", got, want)
	}
	for _, name := range []string{"CSV", "FOCUS CSV"} {
		if a := f.Get(t, servertest.AsAdmin, dl[name]); a.Status != http.StatusOK || a.Header.Get("Content-Type") != "text/csv; charset=utf-8" {
			t.Errorf("%s download: %d %s %.200s", name, a.Status, a.Header.Get("Content-Type"), a.Body)
		}
	}
}

func TestUsagePageDrillDown(t *testing.T) {
	f := newUsageFixture(t, nil)
	a := pageIn(t, f, servertest.AsViewer, "/usage?by=team", "")
	keys, links := rowKeys(a.Body)
	if a.Status != http.StatusOK || strings.Join(keys, "|") != "ml|vision" {
		t.Fatalf("%d, rows %q, want ml and vision", a.Status, keys)
	}
	a = pageIn(t, f, servertest.AsViewer, links["ml"], "")
	keys, links = rowKeys(a.Body)
	if a.Status != http.StatusOK || strings.Join(keys, "|") != "alice|"+evilName {
		t.Fatalf("team ml: %d, rows %q, want alice and %s", a.Status, keys, evilName)
	}
	if !strings.Contains(string(a.Body), `<span aria-current="page">team ml</span>`) {
		t.Error("team ml's page has no breadcrumb naming it")
	}
	a = pageIn(t, f, servertest.AsViewer, links["alice"], "")
	keys, _ = rowKeys(a.Body)
	if a.Status != http.StatusOK || strings.Join(keys, "|") != "alice-train" {
		t.Fatalf("alice: %d, rows %q, want alice-train", a.Status, keys)
	}
	body := string(a.Body)
	for _, want := range []string{`href="/usage?by=team&amp;window=24h">all teams</a>`, `href="/usage?by=user&amp;team=ml&amp;window=24h">team ml</a>`,
		`<span aria-current="page">user alice</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("alice's containers: the breadcrumb lacks %s", want)
		}
	}
	// The window is kept down the drill.
	a = pageIn(t, f, servertest.AsViewer, "/usage?by=team&window=7d", "")
	if _, links := rowKeys(a.Body); links["ml"] != "/usage?by=user&team=ml&window=7d" {
		t.Errorf("7 days by team: ml leads to %q", links["ml"])
	}
	if !strings.Contains(string(a.Body), "GPU-hours used and held per day") {
		t.Error("a 7-day window is not drawn per day")
	}
}

func TestUsagePageRoles(t *testing.T) {
	f := newUsageFixture(t, nil)
	// A user sees their own rows, whatever the grouping, and not the
	// node's idle pool.
	for _, by := range []string{"user", "team", "container"} {
		a := pageIn(t, f, servertest.AsAlice, "/usage?by="+by, "")
		keys, _ := rowKeys(a.Body)
		want := map[string]string{"user": "alice", "team": "ml", "container": "alice-train"}[by]
		if a.Status != http.StatusOK || strings.Join(keys, "|") != want {
			t.Errorf("alice by %s: %d, rows %q, want %q", by, a.Status, keys, want)
		}
		if strings.Contains(string(a.Body), "bob") || strings.Contains(string(a.Body), `id="idle-row"`) {
			t.Errorf("alice by %s sees bob or the idle pool", by)
		}
	}
	// Her chart is hers: 0.5 h used at 08:00, not the other user's.
	a := pageIn(t, f, servertest.AsAlice, "/usage", "")
	if !strings.Contains(string(a.Body), "2026-11-02 08:00 used: 0.5 h") {
		t.Error("alice's chart does not show her own 0.5 h at 08:00")
	}
	a = pageIn(t, f, servertest.AsAlice, "/usage?by=container&user=bob", "")
	if a.Status != http.StatusForbidden || !strings.Contains(string(a.Body), `id="message"`) || strings.Contains(string(a.Body), "bob-train") {
		t.Errorf("alice asking for bob's usage: %d %.300s", a.Status, a.Body)
	}
	// A viewer sees every row and the idle pool, and has no buttons.
	a = pageIn(t, f, servertest.AsViewer, "/usage", "")
	if keys, _ := rowKeys(a.Body); a.Status != http.StatusOK || len(keys) != 3 || !strings.Contains(string(a.Body), `id="idle-row"`) {
		t.Errorf("viewer: %d, rows %q", a.Status, keys)
	}
	if strings.Contains(string(a.Body), "data-method") {
		t.Error("the viewer's usage page has buttons")
	}
	// Signed in by a session, the downloads work with the cookie alone
	// and are the user's own.
	br, _ := f.SignIn(t, servertest.AsAlice)
	a = br.Do(t, http.MethodGet, "/usage?by=container", "")
	if a.Status != http.StatusOK {
		t.Fatalf("alice's session: %d %.300s", a.Status, a.Body)
	}
	dl := downloads(a.Body)
	csv := br.Do(t, http.MethodGet, dl["CSV"], "")
	if csv.Status != http.StatusOK || !strings.Contains(string(csv.Body), "alice-train") || strings.Contains(string(csv.Body), "bob-train") {
		t.Errorf("alice's CSV download by cookie: %d %.300s", csv.Status, csv.Body)
	}
	var rep report.Report
	if js := br.Do(t, http.MethodGet, dl["JSON"], ""); js.Status != http.StatusOK || json.Unmarshal(js.Body, &rep) != nil || len(rep.Rows) != 1 {
		t.Errorf("alice's JSON download by cookie: %d %.300s", js.Status, js.Body)
	}
	if a := pageIn(t, f, servertest.AsNone, "/usage", ""); a.Status != http.StatusUnauthorized || !strings.Contains(string(a.Body), `id="login"`) {
		t.Errorf("no token: %d, want the sign-in form", a.Status)
	}
}

func TestUsagePageWindows(t *testing.T) {
	f := newUsageFixture(t, func(c *server.Config) { c.Limits.MaxReportWindow = 400 * 24 * time.Hour })
	// The fixture's now is 2026-11-02 11:00 UTC, 20:00 in Tokyo.
	for _, c := range []struct {
		path, zone, from, to string
	}{
		{"/usage?window=24h", "", "2026-11-01T11:00:00Z", "2026-11-02T11:00:00Z"},
		{"/usage?window=30d", "", "2026-10-03T11:00:00Z", "2026-11-02T11:00:00Z"},
		{"/usage?window=month", "Asia/Tokyo", "2026-10-31T15:00:00Z", "2026-11-02T11:00:00Z"},
		{"/usage?window=last-month", "Asia/Tokyo", "2026-09-30T15:00:00Z", "2026-10-31T15:00:00Z"},
		{"/usage?window=last-month", "", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"},
		// A window that would end after now ends now.
		{"/usage?window=custom&from=2026-10-29&to=2026-11-02", "", "2026-10-29T00:00:00Z", "2026-11-02T11:00:00Z"},
		{"/usage?from=2026-11-02&to=2026-11-02&by=gpu", "Asia/Tokyo", "2026-11-01T15:00:00Z", "2026-11-02T11:00:00Z"},
	} {
		a := pageIn(t, f, servertest.AsAdmin, c.path, c.zone)
		body := string(a.Body)
		if a.Status != http.StatusOK || !strings.Contains(body, `id="window"><time datetime="`+c.from+`"`) || !strings.Contains(body, `</time> – <time datetime="`+c.to+`"`) {
			m := regexp.MustCompile(`id="window">[^\n]*`).FindString(body)
			t.Errorf("%s in %q: %d %s, want from %s to %s", c.path, c.zone, a.Status, m, c.from, c.to)
		}
	}
	// Every grouping the report offers, the page shows.
	for _, by := range report.Groupings() {
		a := pageIn(t, f, servertest.AsAdmin, "/usage?window=7d&by="+by, "")
		keys, _ := rowKeys(a.Body)
		if a.Status != http.StatusOK || len(keys) == 0 || !strings.Contains(string(a.Body), `<option value="`+by+`" selected>`) {
			t.Errorf("by %s: %d, rows %q", by, a.Status, keys)
		}
	}
	// The custom window's inputs show its days, the last one included.
	a := pageIn(t, f, servertest.AsAdmin, "/usage?window=7d", "")
	for _, want := range []string{`id="from" name="from" type="date" value="2026-10-26"`, `id="to" name="to" type="date" value="2026-11-02"`,
		`href="/usage?by=user&amp;window=month">this month</a>`, `href="/usage?by=user&amp;window=7d" aria-current="true">7 days</a>`} {
		if !strings.Contains(string(a.Body), want) {
			t.Errorf("7 days: the page lacks %s", want)
		}
	}
	// Alice's hour four days ago is in the 7-day chart, on its day.
	if !strings.Contains(string(a.Body), "2026-10-29 00:00 used: 1 h") {
		t.Error("the 7-day chart lacks alice's hour of 29 October")
	}
}

func TestUsagePageBadInput(t *testing.T) {
	f := newUsageFixture(t, nil)
	for _, c := range []struct{ path, want string }{
		{"/usage?window=1y", `the window "1y"`},
		{"/usage?by=colour", `cannot group by "colour"`},
		{"/usage?bogus=1", `does not know the parameter "bogus"`},
		{"/usage?by=user&by=team", "by is given 2 times"},
		{"/usage?window=custom&from=2026-11-02&to=2026-11-01", "ends (to 2026-11-01) before it starts (from 2026-11-02)"},
		{"/usage?window=custom&from=2026-11-02", "needs both from and to"},
		{"/usage?window=custom&from=2-11-2026&to=2026-11-02", `from: "2-11-2026" is not a day`},
		{"/usage?window=7d&from=2026-11-01", "from and to go with window=custom"},
		// The fixture reports at most 30 days; October has 31.
		{"/usage?window=last-month", "api.max_report_window"},
		{"/usage?window=custom&from=2026-01-01&to=2026-11-01", "api.max_report_window"},
		{"/usage?user=%zz", "not valid in a URL"},
		{"/usage?window=" + url.QueryEscape(evilName), "&lt;script&gt;"},
	} {
		a := pageIn(t, f, servertest.AsAdmin, c.path, "")
		body := strings.ReplaceAll(string(a.Body), "&#34;", `"`)
		if a.Status != http.StatusBadRequest || !strings.Contains(body, `id="message"`) || !strings.Contains(body, c.want) || strings.Contains(body, evilName) {
			t.Errorf("%s: %d %s, want 400 with a message saying %s", c.path, a.Status, regexp.MustCompile(`id="message">[^<]*`).FindString(body), c.want)
		}
	}
	few := newUsageFixture(t, func(c *server.Config) { c.Limits.MaxReportRows = 2 })
	if a := pageIn(t, few, servertest.AsAdmin, "/usage?by=user", ""); a.Status != http.StatusBadRequest || !strings.Contains(string(a.Body), "api.max_report_rows") {
		t.Errorf("3 rows over a limit of 2: %d %.300s", a.Status, a.Body)
	}
	off := servertest.NewFixture(t, func(c *server.Config) { c.Reports = nil })
	if a := pageIn(t, off, servertest.AsAdmin, "/usage", ""); a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "the ledger is off") {
		t.Errorf("ledger off: %d %.300s", a.Status, a.Body)
	}
	// Without the hourly sums the table still stands, and the chart says
	// why it is empty.
	noSeries := newUsageFixture(t, func(c *server.Config) { c.Usage = nil })
	a := pageIn(t, noSeries, servertest.AsAdmin, "/usage", "")
	if keys, _ := rowKeys(a.Body); a.Status != http.StatusOK || len(keys) != 3 || !strings.Contains(string(a.Body), "hourly sums are not read") {
		t.Errorf("no hourly sums: %d, rows %q", a.Status, keys)
	}
}

// TestUsagePageAudited: a page view is observed in the audit log as a
// read of usage, as the API's report is.
func TestUsagePageAudited(t *testing.T) {
	f := newUsageFixture(t, nil)
	f.Audit.Take()
	pageIn(t, f, servertest.AsAlice, "/usage?by=team", "")
	ev := f.Audit.Take()
	if len(ev) != 1 || ev[0].Action != string(auth.ActUsageRead) || ev[0].Caller == "" || !strings.Contains(ev[0].Target, "/usage?by=team") {
		t.Errorf("audit %+v, want one usage read by alice", ev)
	}
}
