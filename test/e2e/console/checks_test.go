package console

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// evaluate runs expr in the page and returns its value. The console's
// pages reload themselves (the overview every 10 s, and once when they
// learn the browser's zone): an evaluation the reload cut off runs again
// in the new page.
func evaluate[T any](t testing.TB, ctx context.Context, what, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	var err error
	for range 3 {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		var v T
		v, err = chromedp.Run(sctx, chromedp.Evaluate[T](expr, opts...))
		cancel()
		if err == nil {
			return v
		}
		if !strings.Contains(err.Error(), "context") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
	var zero T
	return zero
}

// emulate sets the tab's viewport and colour scheme.
func emulate(t testing.TB, ctx context.Context, vp viewport, theme string) {
	t.Helper()
	harness.Step(t, ctx, "viewport "+vp.name, chromedp.EmulateViewport(vp.width, vp.height, func(p *emulation.SetDeviceMetricsOverrideParams, _ *emulation.SetTouchEmulationEnabledParams) {
		p.Mobile = vp.phone
	}))
	harness.Step(t, ctx, "theme "+theme, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: theme}}})
		return err
	}))
	if got := evaluate[bool](t, ctx, "theme", `matchMedia("(prefers-color-scheme: dark)").matches`); got != (theme == "dark") {
		t.Fatalf("the page does not see the %s theme", theme)
	}
}

// open loads url, waits until the page is drawn to its footer, and
// returns the HTTP status of its answer.
func open(t testing.TB, ctx context.Context, url string) int64 {
	t.Helper()
	resp := harness.Step(t, ctx, "open "+url, chromedp.NavigateResponse(url))
	harness.Step(t, ctx, "wait for "+url, chromedp.WaitReady(chromedp.CSS("footer")))
	if resp == nil {
		t.Fatalf("open %s: no answer", url)
	}
	return resp.Status
}

// pageState is what the checks read of a page in one evaluation.
type pageState struct {
	Status  string   `json:"status"`  // #status, who is signed in
	Message string   `json:"message"` // #message, the layout's error
	Text    string   `json:"text"`    // the body's text
	Buttons []string `json:"buttons"` // button[data-path]'s paths
}

const stateJS = `(() => ({
	status: (document.getElementById("status") || {}).textContent || "",
	message: (document.getElementById("message") || {}).textContent || "",
	text: document.body.innerText,
	buttons: [...document.querySelectorAll("button[data-path]")].map(b => b.dataset.method + " " + b.dataset.path),
}))()`

func state(t testing.TB, ctx context.Context) pageState {
	t.Helper()
	return evaluate[pageState](t, ctx, "read the page", stateJS)
}

// overflowJS lists what sticks out of a viewport w px wide to the
// right, outside the scrolling .table-wrap, when the document is wider.
// The width is the device's: on a phone the layout viewport (innerWidth)
// grows to what overflows it.
const overflowJS = `((w) => {
	if (document.documentElement.scrollWidth <= w) return [];
	// The deepest elements that reach past the right edge, by their box
	// or by content that overflows them (a long word, a wide child).
	const wide = [];
	for (const el of document.body.querySelectorAll("*")) {
		// What is inside a .table-wrap scrolls there, but for a box
		// positioned against an ancestor outside it, which the wrapper
		// does not clip (a visually hidden label, say).
		const wrap = el.parentElement && el.parentElement.closest(".table-wrap");
		if (wrap) {
			const pos = getComputedStyle(el).position;
			if (!((pos === "absolute" || pos === "fixed") && !(el.offsetParent && wrap.contains(el.offsetParent)))) continue;
		}
		const r = el.getBoundingClientRect();
		if (r.width === 0 && r.height === 0) continue;
		const cs = getComputedStyle(el);
		const content = cs.overflowX === "visible" ? r.left + el.scrollWidth : r.right;
		if (Math.max(r.right, content) > w + 0.5) wide.push([el, Math.round(Math.max(r.right, content))]);
	}
	const deepest = wide.filter(([el]) => !wide.some(([o]) => o !== el && el.contains(o)));
	const out = deepest.slice(0, 10).map(([el, right]) => describe(el) + " reaches " + right + "px");
	return out.length ? out : ["the document is " + document.documentElement.scrollWidth + "px wide in " + w + "px"];
	function describe(el) {
		const parts = [];
		for (let e = el; e && e !== document.body && parts.length < 3; e = e.parentElement) {
			let s = e.tagName.toLowerCase();
			if (e.id) s += "#" + e.id;
			for (const c of e.classList) s += "." + c;
			parts.unshift(s);
		}
		const named = el.parentElement && el.parentElement.closest("[id]");
		return parts.join(" > ") + (named && named !== document.body ? " in #" + named.id : "");
	}
})(%d)`

// overflow lists what sticks out of the viewport vp to the right.
func overflow(t testing.TB, ctx context.Context, vp viewport) []string {
	t.Helper()
	return evaluate[[]string](t, ctx, "overflow", fmt.Sprintf(overflowJS, vp.width))
}

// chart is what a figure.chart draws.
type chart struct {
	ID     string `json:"id"`
	Points []int  `json:"points"` // per path.line, its points
	Rects  int    `json:"rects"`  // rects in the cells group
	Note   string `json:"note"`   // the "no readings" note, when shown
}

const chartsJS = `[...document.querySelectorAll("figure.chart")].map(f => ({
	id: f.id,
	points: [...f.querySelectorAll("svg path.line")].map(p => ((p.getAttribute("d") || "").match(/[ML]/g) || []).length),
	rects: f.querySelectorAll("svg g.cells rect").length,
	note: (f.querySelector(".empty") || {}).textContent || "",
}))`

// chartProblems says what is wrong with the charts: fewer than want, or
// one without data.
func chartProblems(charts []chart, want int) []string {
	var out []string
	if len(charts) < want {
		out = append(out, fmt.Sprintf("%d charts, want at least %d", len(charts), want))
	}
	for _, c := range charts {
		switch {
		case c.Note != "":
			out = append(out, fmt.Sprintf("chart %s says %q", c.ID, c.Note))
		case len(c.Points) == 0 && c.Rects == 0:
			out = append(out, fmt.Sprintf("chart %s draws no line and no cell", c.ID))
		}
		for i, n := range c.Points {
			if n < 2 {
				out = append(out, fmt.Sprintf("chart %s: line %d has %d points", c.ID, i, n))
			}
		}
	}
	return out
}

// contrastJS finds the visible text whose colour has less contrast with
// its background than WCAG AA asks: 4.5:1, or 3:1 for large text (24px,
// or 18.66px bold). The background is the first one not transparent
// among the element and its ancestors, with those half transparent laid
// over it; the text's colour is laid over that with the element's
// opacity. SVG text is drawn in its fill.
const contrastJS = `(() => {
	const parse = s => {
		const m = s.match(/^rgba?\(\s*([\d.]+)[,\s]+([\d.]+)[,\s]+([\d.]+)(?:\s*[,/]\s*([\d.]+%?))?\s*\)$/);
		if (!m) return null;
		let a = m[4] === undefined ? 1 : m[4].endsWith("%") ? parseFloat(m[4]) / 100 : parseFloat(m[4]);
		return [+m[1], +m[2], +m[3], a];
	};
	const over = (top, bottom) => {
		const a = top[3];
		return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat(1);
	};
	const lum = c => {
		const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
		return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
	};
	const hex = c => "#" + c.slice(0, 3).map(v => Math.round(v).toString(16).padStart(2, "0")).join("");
	const canvas = matchMedia("(prefers-color-scheme: dark)").matches ? [18, 18, 18, 1] : [255, 255, 255, 1];
	const background = el => {
		const layers = [];
		for (let e = el; e; e = e.parentElement) {
			const c = parse(getComputedStyle(e).backgroundColor);
			if (!c) return { err: "background " + getComputedStyle(e).backgroundColor };
			if (c[3] > 0) layers.push(c);
			if (c[3] >= 1) break;
		}
		let bg = canvas;
		for (const l of layers.reverse()) bg = over(l, bg);
		return { bg };
	};
	const opacity = el => {
		let o = 1;
		for (let e = el; e; e = e.parentElement) o *= parseFloat(getComputedStyle(e).opacity);
		return o;
	};
	const describe = el => {
		const parts = [];
		for (let e = el; e && e !== document.body && parts.length < 4; e = e.parentElement) {
			let s = e.tagName.toLowerCase();
			if (e.id) s += "#" + e.id;
			for (const c of e.classList) s += "." + c;
			parts.unshift(s);
		}
		return parts.join(" > ");
	};
	const out = [];
	let checked = 0;
	for (const el of document.querySelectorAll("body *")) {
		const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim() !== "");
		if (!own || el.closest("title, script, style, [hidden]") || el.getClientRects().length === 0) continue;
		const cs = getComputedStyle(el);
		if (cs.visibility !== "visible" || parseFloat(cs.fontSize) === 0) continue;
		checked++;
		const svg = el instanceof SVGElement;
		const fgText = svg ? cs.fill : cs.color;
		const fg0 = parse(fgText);
		const b = background(el);
		if (!fg0 || b.err) { out.push({ sel: describe(el), fg: fgText, bg: b.err || "", ratio: 0, want: 0, text: el.textContent.trim().slice(0, 40) }); continue; }
		const o = opacity(el);
		const fg = over([fg0[0], fg0[1], fg0[2], fg0[3] * o], b.bg);
		const l1 = lum(fg), l2 = lum(b.bg);
		const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
		const size = parseFloat(cs.fontSize), bold = parseInt(cs.fontWeight, 10) >= 700;
		const want = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
		if (ratio < want) out.push({ sel: describe(el), fg: hex(fg), bg: hex(b.bg), ratio: Math.round(ratio * 100) / 100, want, text: el.textContent.trim().slice(0, 40) });
	}
	return { checked, low: out };
})()`

// contrast is what contrastJS found: how many text elements it checked,
// and those below AA.
type contrast struct {
	Checked int           `json:"checked"`
	Low     []lowContrast `json:"low"`
}

// lowContrast is a text element contrastJS found.
type lowContrast struct {
	Sel   string  `json:"sel"`
	FG    string  `json:"fg"`
	BG    string  `json:"bg"`
	Ratio float64 `json:"ratio"`
	Want  float64 `json:"want"`
	Text  string  `json:"text"`
}

func (l lowContrast) String() string {
	if l.Want == 0 {
		return fmt.Sprintf("%s (%q): cannot read its colours: %s %s", l.Sel, l.Text, l.FG, l.BG)
	}
	return fmt.Sprintf("%s (%q): %s on %s is %.2f:1, want %.1f:1", l.Sel, l.Text, l.FG, l.BG, l.Ratio, l.Want)
}

// artefacts is where the screenshots go: $GPUMETER_TEST_ARTIFACTS, or a
// directory of the run's under os.TempDir(), made once.
var artefacts struct {
	once sync.Once
	dir  string
	err  error
}

func artefactDir(t testing.TB) string {
	t.Helper()
	artefacts.once.Do(func() {
		if d := os.Getenv("GPUMETER_TEST_ARTIFACTS"); d != "" {
			artefacts.dir = filepath.Join(d, "console")
			artefacts.err = os.MkdirAll(artefacts.dir, 0o755)
			return
		}
		artefacts.dir, artefacts.err = os.MkdirTemp("", "gpumeter-console-")
	})
	if artefacts.err != nil {
		t.Fatalf("the screenshots' directory: %v", artefacts.err)
	}
	return artefacts.dir
}

// docsDir is docs/console, where -update-docs writes the README's
// screenshots.
func docsDir(t testing.TB) string {
	t.Helper()
	dir := harness.RepoFile("docs/console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the viewport as dir/name.png and returns the path.
func screenshot(t testing.TB, ctx context.Context, dir, name string) string {
	t.Helper()
	png := harness.Step(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// noErrors fails the test for every script error, error logged by the
// browser and load that failed since the last check.
func noErrors(t testing.TB, b *harness.Browser, where string) {
	t.Helper()
	for _, e := range b.Errors() {
		t.Errorf("%s: %s", where, e)
	}
	for _, e := range b.FailedLoads() {
		if !strings.Contains(e, "/favicon.ico") {
			t.Errorf("%s: %s", where, e)
		}
	}
	for _, d := range b.Dialogs() {
		t.Errorf("%s: a %s opened", where, d)
	}
}
