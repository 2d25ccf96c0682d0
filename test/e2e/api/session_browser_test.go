package api

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestSignInInBrowser signs in to the page in a real headless Chromium
// with the token in the address, as the demo prints it: the address is
// cleaned, the browser holds an HttpOnly session cookie and no token, a
// reload stays signed in, a cookie-authenticated change without the CSRF
// token is refused, sign-out signs out, an ended session sends the page
// to sign in and back, and a bad token says so.
func TestSignInInBrowser(t *testing.T) {
	a := harness.Serve(t, nil, "--demo", "--interval", "200ms")
	b := harness.NewBrowser(t)
	ctx := b.Ctx

	harness.Step(t, ctx, "open the demo's link", chromedp.Navigate(a.URL+"/#token="+a.Token))
	harness.WaitStatus(t, ctx, "signed in as e2e (admin)")
	if loc := harness.Step(t, ctx, "location", chromedp.Location()); strings.Contains(loc, "token") || strings.Contains(loc, a.Token) {
		t.Errorf("the address still holds the token after sign-in: %s", loc)
	}
	stored := harness.Step(t, ctx, "storage", chromedp.Evaluate[string](`JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie + location.href`))
	if strings.Contains(stored, a.Token) || strings.Contains(stored, "gpumeter_session") {
		t.Errorf("the page can read the token or the session: %s", stored)
	}
	var session *network.Cookie
	for _, c := range harness.Cookies(t, ctx, a.URL) {
		if c.Name == "gpumeter_session" {
			session = c
		}
		if strings.Contains(c.Value, a.Token) {
			t.Errorf("cookie %s holds the token", c.Name)
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict || session.Path != "/" || session.Expires <= 0 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, an expiry", session)
	}

	harness.Step(t, ctx, "reload", chromedp.Reload())
	harness.WaitStatus(t, ctx, "signed in as e2e (admin)")
	if hidden := harness.Step(t, ctx, "sign-out button", chromedp.Evaluate[bool](`document.getElementById("signout").hidden`)); hidden {
		t.Error("a signed-in page shows no sign-out button")
	}

	// The cookie alone does not change anything: a POST without the
	// session's CSRF token is refused.
	status := harness.Step(t, ctx, "POST without CSRF", chromedp.Evaluate[int](
		`fetch("api/v1/containers/alice-llama-finetune/stop", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if status != 403 {
		t.Errorf("a cookie-authenticated POST without the CSRF token: %d, want 403", status)
	}

	// The page's script comes a second late from now on, uncached, so
	// that the reload below comes before it has run: what the sign-in
	// page says must not hang on it.
	slowScript(t, ctx, a.URL+"/static/console.js", 1000)
	harness.WaitScript(t, ctx)
	harness.Step(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	harness.WaitStatus(t, ctx, "signed out")
	harness.Step(t, ctx, "reload", chromedp.Reload())
	harness.WaitStatus(t, ctx, "not signed in")
	slowScript(t, ctx, "", 0)
	if hidden := harness.Step(t, ctx, "sign-in form", chromedp.Evaluate[bool](`document.getElementById("login").hidden`)); hidden {
		t.Error("a signed-out page shows no sign-in form")
	}

	// A session that ended sends the page to sign in, and back where it
	// was sent from. The reload above may have ended at the load event of
	// the page it cut short, before the reloaded page's slow script ran:
	// the form is used once that script has.
	harness.WaitScript(t, ctx)
	harness.Step(t, ctx, "sign in with the form", chromedp.Steps(
		chromedp.SendKeys(chromedp.ID("token"), a.Token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
	))
	harness.WaitStatus(t, ctx, "signed in as e2e (admin)")
	harness.SetSessionCookie(t, ctx, a.URL, "ended")
	harness.Step(t, ctx, "open a page that sends back", chromedp.Navigate(a.URL+"/?next=%2Fusage%3Fwindow%3D7d"))
	harness.WaitStatus(t, ctx, "your session has ended")
	harness.WaitScript(t, ctx)
	harness.Step(t, ctx, "sign in again", chromedp.Steps(
		chromedp.SendKeys(chromedp.ID("token"), a.Token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
	))
	harness.WaitStatus(t, ctx, "signed in as e2e (admin)")
	if loc := harness.Step(t, ctx, "location", chromedp.Location()); loc != a.URL+"/usage?window=7d" {
		t.Errorf("after signing in again the page is at %s, want %s/usage?window=7d", loc, a.URL)
	}

	// A bad token in the address says so. The page the sign-in went on to
	// was opened by the script, not by a step that waits for its load:
	// its status is the agent's, there before its own script has run and
	// taken the sign-out button over.
	harness.WaitScript(t, ctx)
	harness.Step(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	harness.WaitStatus(t, ctx, "signed out")
	harness.Step(t, ctx, "open a bad link", chromedp.Navigate(a.URL+"/#token=gpm_"+strings.Repeat("x", 43)))
	harness.WaitStatus(t, ctx, "bad token")
	if loc := harness.Step(t, ctx, "location", chromedp.Location()); strings.Contains(loc, "token") {
		t.Errorf("the address still holds the refused token: %s", loc)
	}
	for _, e := range b.Errors() {
		t.Errorf("the page: %s", e)
	}
}

// slowScript makes the browser of ctx fetch url, uncached, latencyMS
// milliseconds late; an empty url puts the network back as it was.
func slowScript(t *testing.T, ctx context.Context, url string, latencyMS float64) {
	t.Helper()
	rules := []*network.Conditions{}
	if url != "" {
		rules = []*network.Conditions{{URLPattern: url, Latency: latencyMS, DownloadThroughput: -1, UploadThroughput: -1}}
	}
	harness.Step(t, ctx, "network conditions", func(ctx context.Context, tg *chromedp.Target) (cdp.Empty, error) {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return cdp.Empty{}, err
		}
		if _, err := cdp.Call(ctx, tg, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: url != ""}); err != nil {
			return cdp.Empty{}, err
		}
		_, err := cdp.Call(ctx, tg, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{MatchedNetworkConditions: rules})
		return cdp.Empty{}, err
	})
}
