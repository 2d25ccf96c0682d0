package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// pageErrors collects what the page's script threw or logged as errors.
type pageErrors struct {
	mu   sync.Mutex
	msgs []string
}

func (p *pageErrors) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.msgs
	p.msgs = nil
	return out
}

// newBrowser starts a headless Chromium of its own for the test and
// records the page's errors.
func newBrowser(t *testing.T) (context.Context, *pageErrors) {
	t.Helper()
	path := harness.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-gpu", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	errs := &pageErrors{}
	if err := chromedp.Listen(ctx, func(ev any) {
		errs.mu.Lock()
		defer errs.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := fmt.Sprintf("exception at %d:%d: %s", d.LineNumber+1, d.ColumnNumber+1, d.Text)
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			errs.msgs = append(errs.msgs, msg)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				errs.msgs = append(errs.msgs, "console.error: "+strings.Join(parts, " "))
			}
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, errs
}

// step runs one action within 20 s.
func step[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitStatus waits until the page's status line says want, through
// navigations the page makes itself.
func waitStatus(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	var got string
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err = chromedp.Run(sctx, chromedp.Evaluate[string](`(document.getElementById("status") || {}).textContent || ""`))
		cancel()
		if err == nil && strings.Contains(got, want) {
			return
		}
	}
	t.Fatalf("the status line does not come to say %q: it says %q (%v)", want, got, err)
}

func cookies(t *testing.T, ctx context.Context, url string) []*network.Cookie {
	t.Helper()
	res := step(t, ctx, "read cookies", func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{url}})
	})
	return res.Cookies
}

// TestSignInInBrowser signs in to the page in a real headless Chromium
// with the token in the address, as the demo prints it: the address is
// cleaned, the browser holds an HttpOnly session cookie and no token, a
// reload stays signed in, a cookie-authenticated change without the CSRF
// token is refused, sign-out signs out, an ended session sends the page
// to sign in and back, and a bad token says so.
func TestSignInInBrowser(t *testing.T) {
	a := harness.Serve(t, nil, "--demo", "--interval", "200ms")
	ctx, errs := newBrowser(t)

	step(t, ctx, "open the demo's link", chromedp.Navigate(a.URL+"/#token="+a.Token))
	waitStatus(t, ctx, "signed in as e2e (admin)")
	if loc := step(t, ctx, "location", chromedp.Location()); strings.Contains(loc, "token") || strings.Contains(loc, a.Token) {
		t.Errorf("the address still holds the token after sign-in: %s", loc)
	}
	stored := step(t, ctx, "storage", chromedp.Evaluate[string](`JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie + location.href`))
	if strings.Contains(stored, a.Token) || strings.Contains(stored, "gpumeter_session") {
		t.Errorf("the page can read the token or the session: %s", stored)
	}
	var session *network.Cookie
	for _, c := range cookies(t, ctx, a.URL) {
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

	step(t, ctx, "reload", chromedp.Reload())
	waitStatus(t, ctx, "signed in as e2e (admin)")
	if hidden := step(t, ctx, "sign-out button", chromedp.Evaluate[bool](`document.getElementById("signout").hidden`)); hidden {
		t.Error("a signed-in page shows no sign-out button")
	}

	// The cookie alone does not change anything: a POST without the
	// session's CSRF token is refused.
	status := step(t, ctx, "POST without CSRF", chromedp.Evaluate[int](
		`fetch("api/v1/containers/alice-llama-finetune/stop", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if status != 403 {
		t.Errorf("a cookie-authenticated POST without the CSRF token: %d, want 403", status)
	}

	step(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	waitStatus(t, ctx, "signed out")
	step(t, ctx, "reload", chromedp.Reload())
	waitStatus(t, ctx, "not signed in")
	if hidden := step(t, ctx, "sign-in form", chromedp.Evaluate[bool](`document.getElementById("login").hidden`)); hidden {
		t.Error("a signed-out page shows no sign-in form")
	}

	// A session that ended sends the page to sign in, and back where it
	// was sent from.
	step(t, ctx, "sign in with the form", chromedp.Steps(
		chromedp.SendKeys(chromedp.ID("token"), a.Token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
	))
	waitStatus(t, ctx, "signed in as e2e (admin)")
	step(t, ctx, "end the session", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		httpOnly := true
		_, err := cdp.Call(ctx, tg, network.SetCookie, network.SetCookieParams{Name: "gpumeter_session", Value: "ended", URL: a.URL,
			Path: "/", HTTPOnly: &httpOnly, SameSite: network.CookieSameSiteStrict})
		return chromedp.Void{}, err
	})
	step(t, ctx, "open a page that sends back", chromedp.Navigate(a.URL+"/?next=%2F%3Fwindow%3D7d"))
	waitStatus(t, ctx, "your session has ended")
	step(t, ctx, "sign in again", chromedp.Steps(
		chromedp.SendKeys(chromedp.ID("token"), a.Token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
	))
	waitStatus(t, ctx, "signed in as e2e (admin)")
	if loc := step(t, ctx, "location", chromedp.Location()); loc != a.URL+"/?window=7d" {
		t.Errorf("after signing in again the page is at %s, want %s/?window=7d", loc, a.URL)
	}

	// A bad token in the address says so.
	step(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	waitStatus(t, ctx, "signed out")
	step(t, ctx, "open a bad link", chromedp.Navigate(a.URL+"/#token=gpm_"+strings.Repeat("x", 43)))
	waitStatus(t, ctx, "bad token")
	if loc := step(t, ctx, "location", chromedp.Location()); strings.Contains(loc, "token") {
		t.Errorf("the address still holds the refused token: %s", loc)
	}
	for _, e := range errs.take() {
		t.Errorf("the page: %s", e)
	}
}
