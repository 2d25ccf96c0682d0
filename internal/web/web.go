// Package web is the console: the page handlers, one html/template page
// per view over a shared layout, SVG charts drawn from numbers computed in
// Go, and the small script and style sheet they share, all embedded. A
// handler gathers its view and renders it; who may see what is the API
// server's to decide, through the API it hands in when it mounts the
// console (Handler).
package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	// Browsers name their zone (Europe/Berlin); the binary carries the
	// zone database so that a host or an image without one still draws
	// times where the reader is.
	_ "time/tzdata"
)

//go:embed templates static
var files embed.FS

// Page names, each one template under templates/.
const (
	PageOverview = "overview"
	PageGPUs     = "gpus"
	PageUsage    = "usage"
	PageWaste    = "waste"
	PageJobs     = "jobs"
	PageAudit    = "audit"
	PageNodes    = "nodes"
	PageNode     = "node"
	PageSignIn   = "signin"
	PageError    = "error"
)

// Console holds the pages, each parsed on its first view: an agent whose
// console nobody opens does not keep the parsed templates (half a
// megabyte, which the GC's heap goal doubles).
type Console struct {
	names  map[string]bool // the pages there are
	mu     sync.Mutex      // pages
	pages  map[string]*template.Template
	static http.Handler
}

// New checks that every embedded page parses; it keeps none of them.
func New() (*Console, error) {
	c := &Console{names: map[string]bool{}, pages: map[string]*template.Template{}}
	entries, err := fs.ReadDir(files, "templates")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".html")
		if !ok || name == "layout" || name == "charts" {
			continue
		}
		if _, err := parsePage(name); err != nil {
			return nil, err
		}
		c.names[name] = true
	}
	sub, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err
	}
	c.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	return c, nil
}

// parsePage parses one page over the layout and the charts.
func parsePage(name string) (*template.Template, error) {
	t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/charts.html", "templates/"+name+".html")
	if err != nil {
		return nil, fmt.Errorf("console page %s: %w", name, err)
	}
	return t, nil
}

// page returns a page's template, parsing it on its first use.
func (c *Console) page(name string) (*template.Template, error) {
	if !c.names[name] {
		return nil, fmt.Errorf("no console page %q", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.pages[name]; t != nil {
		return t, nil
	}
	t, err := parsePage(name) // New parsed it once already
	if err != nil {
		return nil, err
	}
	c.pages[name] = t
	return t, nil
}

// Render writes page with v, which embeds a Frame. Nothing is written
// when the template fails, so that the caller can still answer with an
// error.
func (c *Console) Render(w io.Writer, page string, v any) error {
	t, err := c.page(page)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		return fmt.Errorf("render %s: %w", page, err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// Static serves the style sheet and the script under /static/.
func (c *Console) Static() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The files change only with the binary.
		w.Header().Set("Cache-Control", "public, max-age=3600")
		c.static.ServeHTTP(w, r)
	})
}

// NavItem is one link of the navigation.
type NavItem struct {
	Path, Label string
	Current     bool
}

// Frame is what the layout needs: who is looking, where, and in which
// time zone. Every page's data embeds one.
type Frame struct {
	Page  string // one of the Page names
	Title string
	Node  string
	// User and Role are the reader's; Method how they signed in
	// (session, token, anonymous, ...).
	User, Role, Method string
	// CSRF is the session's token for the calls the page makes; "" when
	// no session signed the reader in, and then the page has no buttons
	// that change anything.
	CSRF string
	// Loc is the reader's time zone (from the browser), Zone its name.
	Loc  *time.Location
	Zone string
	// ZoneNote says why the zone is not the browser's, when it is not.
	ZoneNote string
	Now      time.Time
	Nav      []NavItem
	// Refresh is how often the page reloads itself, in seconds; 0 never.
	Refresh int
	// Message is shown above the page: what went wrong with the request.
	Message string
}

// CanAct says whether the page may show buttons that change something:
// the reader signed in with a session, whose CSRF token the script sends.
func (f *Frame) CanAct() bool { return f.CSRF != "" }

// Time writes t in the reader's zone, with the date when it is not today.
func (f *Frame) Time(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	lt, now := t.In(f.loc()), f.Now.In(f.loc())
	if lt.Year() == now.Year() && lt.YearDay() == now.YearDay() {
		return lt.Format("15:04:05")
	}
	return lt.Format("2006-01-02 15:04")
}

// TimePtr is Time of a time that may be missing.
func (f *Frame) TimePtr(t *time.Time) string {
	if t == nil {
		return "–"
	}
	return f.Time(*t)
}

// Stamp writes t to the minute with its date, in the reader's zone: a
// window's end, which the page writes the same way on every page.
func (f *Frame) Stamp(t time.Time) string { return t.In(f.loc()).Format("2006-01-02 15:04") }

// ZoneAbbr is the reader's zone as a window's end names it: UTC, CET.
func (f *Frame) ZoneAbbr(t time.Time) string { return t.In(f.loc()).Format("MST") }

// ISO writes t for a datetime attribute.
func (f *Frame) ISO(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (f *Frame) loc() *time.Location {
	if f.Loc == nil {
		return time.UTC
	}
	return f.Loc
}

// Nav is the console's navigation for a role: the audit log is for
// admins, and the nodes are there only on an agent in a fleet.
func Nav(current, role string, fleet bool) []NavItem {
	items := []NavItem{{"/", "Overview", false}, {"/gpus", "GPUs", false}, {"/usage", "Usage", false},
		{"/waste", "Waste", false}, {"/whatif", "What-if", false}, {"/jobs", "Jobs", false}}
	if fleet {
		items = append(items, NavItem{"/nodes", "Nodes", false})
	}
	if role == "admin" {
		items = append(items, NavItem{"/audit", "Audit", false})
	}
	for i := range items {
		items[i].Current = items[i].Path == current
	}
	return items
}

// Zone resolves the zone a browser named (its gpumeter_tz cookie):
// the location, and a note when it cannot be used.
func Zone(name string) (*time.Location, string, string) {
	if name == "" {
		return time.UTC, "UTC", ""
	}
	loc, err := time.LoadLocation(name)
	if err != nil || len(name) > 64 {
		return time.UTC, "UTC", fmt.Sprintf("the browser's time zone %q is unknown here: times are in UTC", truncate(name, 64))
	}
	return loc, name, ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
