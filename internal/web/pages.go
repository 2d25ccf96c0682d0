package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
)

// The console's pages are drawn from the same data, and under the same
// roles, as the API's answers: a page is a GET that pageGuard lets in as
// the API lets in a call, whose handler gathers a view for its template.
// Buttons on the pages call the API with the session's CSRF token.

// pageDef is one console page.
type pageDef struct {
	path, name, title string
	act               auth.Action
	// refresh is how often the page reloads itself, in seconds.
	refresh int
	// view gathers the page's data; f is the layout's, filled in. An
	// error is a *pageError, shown in the layout.
	view func(r *http.Request, c *Visitor, f Frame) (any, error)
}

// pageError is a page that cannot be shown as asked: a parameter it does
// not know, a part of the agent that is off, a read that failed.
type pageError struct {
	status int
	msg    string
}

func (e *pageError) Error() string { return e.msg }

func badPage(format string, args ...any) *pageError {
	return &pageError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// errorView is the layout with a message and nothing else.
type errorView struct{ Frame }

// signInView is the sign-in form.
type signInView struct {
	Frame
	// Reason says why the reader is asked to sign in; Failed marks it as
	// an error.
	Reason string
	Failed bool
	// Next is where the page goes once signed in.
	Next string
}

// zoneCookie is where the console's script keeps the browser's time
// zone, so that the server draws times where the reader is.
const zoneCookie = "gpumeter_tz"

func (s *handler) pageRoutes(console *Console) {
	pages := []pageDef{
		{path: "/{$}", name: PageOverview, title: "Overview", act: auth.ActGPUsRead, refresh: 10, view: s.overviewPage},
	}
	pages = append(pages, s.morePages()...)
	for _, p := range pages {
		s.mux.Handle("GET "+p.path, s.pageGuard(console, p))
	}
	s.mux.HandleFunc("GET /signin", func(w http.ResponseWriter, r *http.Request) {
		setPageHeaders(w)
		next := safeNext(r.URL.Query().Get("next"))
		reason := "not signed in: sign in with an API token"
		if c, err := r.Cookie(SignedOutCookie); err == nil && c.Value != "" {
			reason = "signed out"
			http.SetCookie(w, &http.Cookie{Name: SignedOutCookie, Value: "", Path: "/signin", MaxAge: -1,
				HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		}
		f := Frame{Page: PageSignIn, Title: "Sign in", Node: s.cfg.Node, Now: s.cfg.Now()}
		f.Loc, f.Zone, f.ZoneNote = zoneOf(r)
		s.renderPage(w, console, http.StatusOK, PageSignIn, &signInView{Frame: f, Reason: reason, Next: next})
	})
	s.mux.Handle("GET /static/", console.Static())
}

// morePages are the pages beyond the overview; each has its file.
func (s *handler) morePages() []pageDef {
	var pages []pageDef
	pages = append(pages, s.gpusPages()...)
	pages = append(pages, s.usagePages()...)
	pages = append(pages, s.wastePages()...)
	pages = append(pages, s.whatifPages()...)
	pages = append(pages, s.jobsPages()...)
	pages = append(pages, s.auditPages()...)
	pages = append(pages, s.nodesPages()...)
	return pages
}

// navPath is the navigation's link a page's route is under: a
// drill-down (/nodes/{node}) is under its list (/nodes).
func navPath(route string) string {
	route = strings.TrimSuffix(route, "{$}")
	if i := strings.Index(route, "/{"); i > 0 {
		return route[:i]
	}
	return route
}

// setPageHeaders are the headers of every page: nothing but the agent's
// own script and style, no framing, no referrer, never cached.
func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// safeNext is a path on this agent to go to after signing in, or "".
func safeNext(n string) string {
	if n == "" || !strings.HasPrefix(n, "/") || strings.HasPrefix(n, "//") || strings.HasPrefix(n, "/\\") || strings.ContainsAny(n, "\r\n") {
		return ""
	}
	if u, err := url.Parse(n); err != nil || u.Host != "" || u.Scheme != "" {
		return ""
	}
	return n
}

// zoneOf is the reader's time zone, from the cookie the script sets.
func zoneOf(r *http.Request) (*time.Location, string, string) {
	name := ""
	if ck, err := r.Cookie(zoneCookie); err == nil {
		if v, err := url.QueryUnescape(ck.Value); err == nil {
			name = v
		} else {
			name = ck.Value
		}
	}
	return Zone(name)
}

func (s *handler) renderPage(w http.ResponseWriter, console *Console, status int, name string, v any) {
	var buf strings.Builder
	if err := console.Render(&buf, name, v); err != nil {
		s.cfg.Logger.Error("render a console page", "page", name, "err", err)
		http.Error(w, "the page could not be drawn; the agent's log says why", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// pageGuard lets a reader in to a page as the API server lets a call
// in: the same authentication, rate limits, roles and audit. A reader
// who is not signed in, or whose session ended, gets the sign-in form,
// which comes back here once signed in.
func (s *handler) pageGuard(console *Console, p pageDef) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setPageHeaders(w)
		adm := s.cfg.API.Admit(r)
		id, ses, authErr := adm.ID, adm.Session, adm.AuthErr
		c := &Visitor{ID: id, Session: ses, Source: adm.Source, Act: p.act}
		f := Frame{Page: p.name, Title: p.title, Node: s.cfg.Node, Now: s.cfg.Now()}
		f.Loc, f.Zone, f.ZoneNote = zoneOf(r)
		target := r.Method + " " + r.URL.RequestURI()
		if adm.Limited {
			wait := adm.Wait
			w.Header().Set("Retry-After", fmt.Sprint(max(1, int((wait+time.Second-1)/time.Second))))
			s.cfg.API.Observe(r, c, target, http.StatusTooManyRequests, "rate limited")
			f.Message = fmt.Sprintf("too many requests from %s; try again in a few seconds", adm.Who)
			s.renderPage(w, console, http.StatusTooManyRequests, PageError, &errorView{f})
			return
		}
		next := r.URL.RequestURI()
		if n := safeNext(r.URL.Query().Get("next")); n != "" {
			next = n
		}
		signIn := func(reason string, failed bool) {
			sf := f
			sf.Page, sf.Title = PageSignIn, "Sign in"
			s.renderPage(w, console, http.StatusUnauthorized, PageSignIn, &signInView{Frame: sf, Reason: reason, Failed: failed, Next: next})
		}
		if authErr != nil {
			var ae *auth.Error
			code, msg := "", "authentication failed"
			if errors.As(authErr, &ae) {
				code, msg = ae.Code, ae.Msg
			}
			s.cfg.API.Observe(r, c, target, http.StatusUnauthorized, code)
			switch code {
			case auth.CodeSessionEnded:
				s.cfg.API.ClearSession(w, r)
				signIn("your session has ended: sign in again ("+msg+")", true)
			case auth.CodeNoCredentials:
				signIn("not signed in: sign in with an API token", false)
			default:
				signIn("bad token: "+msg, true)
			}
			return
		}
		ownOnly, err := auth.Authorize(id, p.act)
		if err != nil {
			s.cfg.API.Observe(r, c, target, http.StatusForbidden, err.Error())
			if id.Method == auth.MethodAnonymous {
				signIn("not signed in: sign in with an API token", false)
				return
			}
			f.User, f.Role, f.Method = id.User, string(id.Role), id.Method
			f.Nav = Nav("", f.Role, s.cfg.Nodes != nil)
			f.Message = "this page is not for you: " + err.Error()
			s.renderPage(w, console, http.StatusForbidden, PageError, &errorView{f})
			return
		}
		c.OwnOnly = ownOnly
		f.User, f.Role, f.Method = id.User, string(id.Role), id.Method
		if id.Method == auth.MethodSession {
			f.CSRF = ses.CSRF
		}
		f.Nav = Nav(navPath(p.path), f.Role, s.cfg.Nodes != nil)
		f.Refresh = p.refresh
		name := p.name
		v, err := p.view(r, c, f)
		status := http.StatusOK
		if err != nil {
			var pe *pageError
			if !errors.As(err, &pe) {
				s.cfg.Logger.Error("console page", "page", p.name, "err", err)
				pe = &pageError{http.StatusInternalServerError, "the page could not be made; the agent's log says why"}
			}
			status = pe.status
			f.Message = pe.msg
			f.Refresh = 0
			v = &errorView{f}
			name = PageError
		}
		s.cfg.API.Observe(r, c, target, status, "")
		s.renderPage(w, console, status, name, v)
	})
}
