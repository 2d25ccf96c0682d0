package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Browser is a headless Chromium of one test's own, with one tab, that
// records what its pages threw or logged as errors (their scripts, or
// the browser itself, as for a blocked inline style), the loads that
// failed, and the JavaScript dialogs they opened (each dismissed, so that
// the page goes on).
type Browser struct {
	// Ctx is the tab's chromedp context; it ends with the test.
	Ctx context.Context

	mu      sync.Mutex
	errs    []string
	loads   []string
	dialogs []string
}

// NewBrowser starts a headless Chromium for the test, or skips the test
// without one (fails it under CI).
func NewBrowser(t *testing.T) *Browser {
	t.Helper()
	path := Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-gpu", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &Browser{Ctx: ctx}
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// record runs in the tab's reader loop: it must not call the browser, so
// a dialog is dismissed from a goroutine of its own.
func (b *Browser) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := fmt.Sprintf("exception at %s:%d:%d: %s", d.URL, d.LineNumber+1, d.ColumnNumber+1, d.Text)
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.errs = append(b.errs, msg)
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			b.errs = append(b.errs, "console.error: "+strings.Join(parts, " "))
		}
	case *cdplog.EventEntryAdded:
		ent := e.Entry
		if ent.Level != cdplog.EntryLevelError {
			return
		}
		msg := fmt.Sprintf("%s: %s (%s)", ent.Source, ent.Text, ent.URL)
		if ent.Source == cdplog.EntrySourceNetwork {
			b.loads = append(b.loads, msg)
		} else {
			b.errs = append(b.errs, msg)
		}
	case *page.EventJavascriptDialogOpening:
		b.dialogs = append(b.dialogs, fmt.Sprintf("%s dialog %q on %s", e.Type, e.Message, e.URL))
		go func() {
			ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
			defer cancel()
			_, _ = chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) (cdp.Empty, error) {
				return cdp.Call(ctx, tg, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{})
			})
		}()
	}
}

// Errors returns the exceptions and console errors since the last call.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.errs
	b.errs = nil
	return out
}

// FailedLoads returns the loads the browser logged as failed (an answer
// of 4xx or 5xx to a fetch or a resource) since the last call: a test
// that makes such answers on purpose ignores them.
func (b *Browser) FailedLoads() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.loads
	b.loads = nil
	return out
}

// Dialogs returns the JavaScript dialogs (alert, confirm, prompt) the
// pages opened since the last call.
func (b *Browser) Dialogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.dialogs
	b.dialogs = nil
	return out
}

// Step runs one action in the tab of ctx within 20 s, and fails the test
// with what if it fails.
func Step[T any](t testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// WaitStatus waits until the page's status line (#status) says want,
// through navigations the page makes itself.
func WaitStatus(t testing.TB, ctx context.Context, want string) {
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

// WaitScript waits until the page of ctx has run its script. The
// console's script is deferred, so it has run once the document is
// complete. A form the script has not taken over yet is sent by the
// browser itself (the sign-in form then puts the token in the address),
// and a step that ends at the load event of an earlier navigation, as a
// reload of a page still loading may, comes before that.
func WaitScript(t testing.TB, ctx context.Context) {
	t.Helper()
	var got string
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err = chromedp.Run(sctx, chromedp.Evaluate[string](`document.readyState`))
		cancel()
		if err == nil && got == "complete" {
			return
		}
	}
	t.Fatalf("the page's script has not run: the document is %q (%v)", got, err)
}

// Cookies are the cookies the browser of ctx holds for url.
func Cookies(t testing.TB, ctx context.Context, url string) []*network.Cookie {
	t.Helper()
	res := Step(t, ctx, "read cookies", func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{url}})
	})
	return res.Cookies
}

// SignIn signs the browser of ctx in to the agent at url with token, by
// the sign-in form, and waits for the page to say who it is signed in as.
func SignIn(t testing.TB, ctx context.Context, url, token, as string) {
	t.Helper()
	Step(t, ctx, "open the sign-in page", chromedp.Navigate(url+"/signin"))
	WaitScript(t, ctx)
	Step(t, ctx, "sign in with the form", chromedp.Steps(
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
	))
	WaitStatus(t, ctx, "signed in as "+as)
}

// SetSessionCookie makes the browser of ctx hold value as its session
// cookie for the agent at url, as the agent sets it: a session that is
// not the agent's, for one that ended.
func SetSessionCookie(t testing.TB, ctx context.Context, url, value string) {
	t.Helper()
	Step(t, ctx, "set the session cookie", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		httpOnly := true
		_, err := cdp.Call(ctx, tg, network.SetCookie, network.SetCookieParams{Name: "gpumeter_session", Value: value, URL: url,
			Path: "/", HTTPOnly: &httpOnly, SameSite: network.CookieSameSiteStrict})
		return err
	}))
}
