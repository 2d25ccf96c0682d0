package web_test

import (
	"context"
	"errors"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// What the console's pages show and read, as the tests pin them: a
// holder the reader may not see, and the cookie the page's script keeps
// the browser's time zone in.
const (
	anotherUser = "another user"
	zoneCookie  = "gpumeter_tz"
)

// historyOf answers with the same points for every window: two GPUs with
// a point at each of the window's first three steps.
type historyOf struct{ err error }

func (h historyOf) points(from time.Time, step time.Duration, util, temp float64) []ledger.GPUPoint {
	var ps []ledger.GPUPoint
	for i := range 3 {
		ps = append(ps, ledger.GPUPoint{Start: from.Add(time.Duration(i) * step), Samples: 1, UtilMean: util, UtilMax: util,
			MemoryMean: 8 << 30, MemoryMax: 8 << 30, PowerMean: 300, PowerMax: 310, TempMean: temp, TempMax: temp + 2})
	}
	return ps
}

func (h historyOf) answer(from time.Time, step time.Duration) []ledger.GPUHistory {
	return []ledger.GPUHistory{
		{GPU: ledger.GPU{UUID: "GPU-0", Index: 0, Model: "H100"}, Points: h.points(from, step, 60, 50)},
		{GPU: ledger.GPU{UUID: "GPU-1", Index: 1, Model: "H100"}, Points: h.points(from, step, 40, 70)},
	}
}

func (h historyOf) Recent(from, _ time.Time, step time.Duration) []ledger.GPUHistory {
	return h.answer(from, step)
}

func (h historyOf) Stored(_ context.Context, from, _ time.Time, step time.Duration) ([]ledger.GPUHistory, error) {
	if h.err != nil {
		return nil, h.err
	}
	return h.answer(from, step), nil
}

// page GETs a console page as caller and checks it is HTML.
func page(t *testing.T, f *servertest.Fixture, caller, path string) (int, string) {
	t.Helper()
	a := f.Get(t, caller, path)
	if ct := a.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("GET %s: Content-Type %q, want HTML; %d %s", path, ct, a.Status, a.Body)
	}
	if csp := a.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("GET %s: CSP %q lets inline script or style in", path, csp)
	}
	return a.Status, string(a.Body)
}

var messageRE = regexp.MustCompile(`id="message">([^<]*)<`)

// message is the page's error message, "" when it has none.
func message(body string) string {
	m := messageRE.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestPagesSignIn: a reader who is not signed in gets the sign-in form,
// which goes back to the page; a bad token says so; anyone signed in
// sees the page with their name.
func TestPagesSignIn(t *testing.T) {
	f := servertest.NewFixture(t, func(c *server.Config) { c.History = historyOf{} })
	for _, path := range []string{"/", "/gpus?window=24h"} {
		status, body := page(t, f, servertest.AsNone, path)
		if status != http.StatusUnauthorized || !strings.Contains(body, `id="login"`) || !strings.Contains(body, "not signed in") {
			t.Errorf("GET %s without a token: %d, want 401 and the sign-in form:\n%s", path, status, body)
		}
		if want := `data-next="` + strings.ReplaceAll(path, "&", "&amp;") + `"`; !strings.Contains(body, want) {
			t.Errorf("GET %s: the sign-in form does not come back here (%s)", path, want)
		}
		status, body = page(t, f, servertest.AsBad, path)
		if status != http.StatusUnauthorized || !strings.Contains(body, "bad token") {
			t.Errorf("GET %s with a bad token: %d, want 401 saying bad token", path, status)
		}
		status, body = page(t, f, servertest.AsAlice, path)
		if status != http.StatusOK || !strings.Contains(body, "signed in as alice (user)") {
			t.Errorf("GET %s as alice: %d, want the page signed in as alice:\n%.2000s", path, status, body)
		}
	}
	// A next that leaves the agent is not followed.
	_, body := page(t, f, servertest.AsNone, "/?next=//evil.example/")
	if strings.Contains(body, "evil.example") && strings.Contains(body, `data-next="//evil`) {
		t.Errorf("the sign-in form would go to another site: %s", body)
	}
	status, body := page(t, f, servertest.AsNone, "/signin?next=%2Fgpus")
	if status != http.StatusOK || !strings.Contains(body, `data-next="/gpus"`) {
		t.Errorf("/signin?next=/gpus: %d %s", status, body)
	}
}

// TestOverviewRoles: every role sees every GPU's own figures; a user sees
// their holders by name and everyone else's as another user.
func TestOverviewRoles(t *testing.T) {
	f := servertest.NewFixture(t, nil)
	f.Resample()
	_, admin := page(t, f, servertest.AsAdmin, "/")
	for _, want := range []string{`id="gpu-0"`, `id="gpu-1"`, "alice-train", "bob-train", "carol (host)", "60 %", "300 W", "50 °C", "16 GiB of 80 GiB"} {
		if !strings.Contains(admin, want) {
			t.Errorf("the admin's overview lacks %q", want)
		}
	}
	if strings.Contains(admin, anotherUser) {
		t.Errorf("the admin's overview hides a holder")
	}
	_, alice := page(t, f, servertest.AsAlice, "/")
	for _, want := range []string{"alice-train", "alice (host)", anotherUser, "60 %", "40 %"} {
		if !strings.Contains(alice, want) {
			t.Errorf("alice's overview lacks %q", want)
		}
	}
	for _, other := range []string{"bob-train", "carol"} {
		if strings.Contains(alice, other) {
			t.Errorf("alice's overview shows %q, which is not hers", other)
		}
	}
	_, viewer := page(t, f, servertest.AsViewer, "/")
	if !strings.Contains(viewer, "bob-train") || strings.Contains(viewer, "data-path") {
		t.Errorf("the viewer's overview: want every holder and no buttons")
	}
	status, body := page(t, f, servertest.AsAdmin, "/?window=7d")
	if status != http.StatusBadRequest || !strings.Contains(message(body), "takes no parameters") {
		t.Errorf("/?window=7d: %d %q, want 400 with a message", status, message(body))
	}
}

// TestGPUsPage: each window draws four line charts and the heatmap with
// data; a GPU can be picked; a window or GPU the page does not know, and
// a window whose ledger is off, say so.
func TestGPUsPage(t *testing.T) {
	h := &historyOf{}
	f := servertest.NewFixture(t, func(c *server.Config) { c.History = h })
	f.Resample()
	pathD := regexp.MustCompile(`<path class="line c\d" d="(M[^"]+)"`)
	for _, w := range []string{"", "?window=1h", "?window=24h", "?window=7d"} {
		for _, caller := range []string{servertest.AsAdmin, servertest.AsAlice, servertest.AsViewer} {
			status, body := page(t, f, caller, "/gpus"+w)
			if status != http.StatusOK {
				t.Fatalf("/gpus%s as %s: %d %s", w, caller, status, message(body))
			}
			paths := pathD.FindAllStringSubmatch(body, -1)
			if len(paths) != 8 {
				t.Errorf("/gpus%s as %s: %d lines, want 2 GPUs × 4 charts", w, caller, len(paths))
			}
			for _, p := range paths {
				if strings.Count(p[1], "L") != 2 {
					t.Errorf("/gpus%s: line %q, want three points", w, p[1])
				}
			}
			if n := strings.Count(body, `<rect class="h`); n != 6 {
				t.Errorf("/gpus%s: %d heatmap cells, want 2 GPUs × 3 steps", w, n)
			}
			for _, unit := range []string{"SM utilisation (%)", "memory (GiB)", "power (W)", "temperature (°C)", "time (UTC)"} {
				if !strings.Contains(body, unit) {
					t.Errorf("/gpus%s: no axis says %q", w, unit)
				}
			}
		}
	}
	_, alice := page(t, f, servertest.AsAlice, "/gpus")
	if strings.Contains(alice, "bob-train") || !strings.Contains(alice, anotherUser) {
		t.Errorf("alice's GPUs page shows bob's container, or hides no holder")
	}
	_, one := page(t, f, servertest.AsAdmin, "/gpus?window=24h&gpu=GPU-1")
	if n := len(pathD.FindAllString(one, -1)); n != 4 {
		t.Errorf("/gpus?gpu=GPU-1: %d lines, want 4", n)
	}
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/gpus?window=2h", 400, `the window "2h" is not one this page shows: choose 1h, 24h, 7d`},
		{"/gpus?by=user", 400, `does not know the parameter "by"`},
		{"/gpus?window=1h&window=7d", 400, "window is given 2 times"},
		{"/gpus?gpu=GPU-9", 404, `no GPU "GPU-9" has figures`},
	} {
		status, body := page(t, f, servertest.AsAdmin, tc.path)
		if status != tc.status || !strings.Contains(message(body), tc.want) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.path, status, message(body), tc.status, tc.want)
		}
	}
	h.err = server.ErrNoLedger
	status, body := page(t, f, servertest.AsAdmin, "/gpus?window=7d")
	if status != http.StatusServiceUnavailable || !strings.Contains(message(body), "ledger, which is off") {
		t.Errorf("7d without a ledger: %d %q", status, message(body))
	}
	h.err = errors.New("disk on fire")
	status, body = page(t, f, servertest.AsAdmin, "/gpus?window=7d")
	if status != http.StatusInternalServerError || strings.Contains(body, "disk on fire") || message(body) == "" {
		t.Errorf("a failing ledger: %d %q, want 500 with a message and not the error", status, message(body))
	}
}

// TestEveryPageSaysWho: every page's layout names the reader and has the
// navigation, whatever fields its own view has.
func TestEveryPageSaysWho(t *testing.T) {
	f := servertest.NewFixture(t, func(c *server.Config) { c.History = historyOf{} })
	f.Resample()
	for _, path := range []string{"/", "/gpus", "/usage", "/waste", "/whatif", "/jobs", "/audit"} {
		_, body := page(t, f, servertest.AsAdmin, path)
		if !strings.Contains(body, `<span id="status">signed in as root (admin)</span>`) || !strings.Contains(body, `aria-current="page"`) {
			t.Errorf("%s does not say who is signed in, or which page it is:\n%.3000s", path, body)
		}
	}
}
