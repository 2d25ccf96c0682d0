package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// role is a token the agent accepts, and how the page names its holder.
type role struct {
	secret, as string
	role       config.Role
}

// demoRoles are an admin, a user (alice, whose container is one of the
// two on the demo's GPU 0) and a viewer, and the GPUMETER_AUTH_TOKENS
// that gives them to an agent.
func demoRoles(t *testing.T) ([]role, string) {
	t.Helper()
	var roles []role
	var entries []string
	for _, r := range []struct {
		id, user string
		role     config.Role
	}{{"ops", "olga", config.RoleAdmin}, {"alice", "alice", config.RoleUser}, {"vera", "vera", config.RoleViewer}} {
		secret, tok, err := auth.NewToken(r.id, r.user, r.role, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		roles = append(roles, role{secret: secret, as: fmt.Sprintf("%s (%s)", r.user, r.role), role: r.role})
		entries = append(entries, tok.ID+"="+tok.Entry())
	}
	return roles, "GPUMETER_AUTH_TOKENS=" + strings.Join(entries, ",")
}

// othersRE matches what only others' rows show on the demo: the other
// users' containers and names.
var othersRE = regexp.MustCompile(`carol-notebook|dave-eval|frank-pretrain|erin-dev|grace-bench|\b(carol|dave|frank|erin|bob)\b`)

// TestConsoleDemo visits every page of `serve --demo` in one headless
// Chromium: at both sizes in both themes without errors, overflow, empty
// charts or text below WCAG AA contrast, with screenshots; by keyboard;
// with parameters it does not know; and signed in as each role.
func TestConsoleDemo(t *testing.T) {
	roles, tokens := demoRoles(t)
	admin, alice := roles[0], roles[1]
	// bob is another user with a job in the queue.
	bobSecret, bob, err := auth.NewToken("bob", "bob", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tokens += ",bob=" + bob.Entry()
	// The queue holds a job of alice's and one of bob's, waiting: the
	// demo's scenario holds every GPU.
	dir := t.TempDir()
	passwd := harness.WriteText(t, filepath.Join(dir, "passwd"), "root:x:0:0::/root:/bin/sh\nalice:x:2001:2001::/home/alice:/bin/sh\nbob:x:2002:2002::/home/bob:/bin/sh\n")
	group := harness.WriteText(t, filepath.Join(dir, "group"), "root:x:0:\nalice:x:2001:\nbob:x:2002:\n")
	// The queue's Docker is a socket nobody listens on: the real engine's
	// containers, of other tests too, stay out of the demo, and no job
	// can start.
	queue := []string{"GPUMETER_QUEUE_ENABLED=true", "GPUMETER_QUEUE_IMAGES=pytorch/*", "GPUMETER_QUEUE_DEFAULT_TIME_LIMIT=1h",
		"GPUMETER_HOST_PASSWD_FILE=" + passwd, "GPUMETER_HOST_GROUP_FILE=" + group,
		"GPUMETER_DOCKER_HOST=unix://" + filepath.Join(dir, "no-docker.sock")}
	// The demo's idle container is found within seconds, not the rule's
	// default window, so that the waste page has findings.
	a := harness.Serve(t, append(queue, tokens, "GPUMETER_LEDGER_FLUSH_INTERVAL=1s", "GPUMETER_WASTE_IDLE_WINDOW=2s"), "--demo", "--interval", "200ms")
	for _, j := range []struct{ secret, name string }{{alice.secret, "alice-train"}, {bobSecret, "bob-train"}} {
		submitJob(t, a.URL, j.secret, apitype.JobRequest{GPUs: 1, Image: "pytorch/pytorch:2.4.0", Name: j.name, Command: []string{"python", "train.py"}})
	}
	b := harness.NewBrowser(t)
	ctx := b.Ctx
	harness.SignIn(t, ctx, a.URL, admin.secret, admin.as)
	noErrors(t, b, "sign-in")
	shots := artefactDir(t)
	t.Logf("screenshots in %s", shots)

	t.Run("pages", func(t *testing.T) {
		for _, p := range pages {
			t.Run(p.name, func(t *testing.T) {
				if p.demoShows != "" {
					emulate(t, ctx, viewports[0], "light")
					harness.WaitFor(t, 30*time.Second, p.path+" to show "+p.demoShows, func() bool {
						open(t, ctx, a.URL+p.path)
						return strings.Contains(state(t, ctx).Text, p.demoShows)
					})
				}
				if p.charts > 0 {
					// The demo's ledger fills as it runs, and the last
					// hour comes from memory: give it a moment.
					emulate(t, ctx, viewports[0], "light")
					var problems []string
					harness.WaitFor(t, 30*time.Second, p.path+"'s charts to have data", func() bool {
						open(t, ctx, a.URL+p.path)
						problems = chartProblems(evaluate[[]chart](t, ctx, "charts", chartsJS), p.charts)
						return len(problems) == 0
					})
				}
				for _, vp := range viewports {
					for _, theme := range themes {
						where := fmt.Sprintf("%s at %dx%d, %s", p.path, vp.width, vp.height, theme)
						emulate(t, ctx, vp, theme)
						if status := open(t, ctx, a.URL+p.path); status != 200 {
							t.Errorf("%s: status %d, want 200", where, status)
						}
						st := state(t, ctx)
						if !strings.Contains(st.Status, "signed in as "+admin.as) || st.Message != "" {
							t.Errorf("%s: status %q, message %q: want signed in as %s and no message", where, st.Status, st.Message, admin.as)
						}
						if over := overflow(t, ctx, vp); len(over) > 0 {
							t.Errorf("%s: wider than the viewport: %s", where, strings.Join(over, "; "))
						}
						for _, pr := range chartProblems(evaluate[[]chart](t, ctx, "charts", chartsJS), p.charts) {
							t.Errorf("%s: %s", where, pr)
						}
						screenshot(t, ctx, shots, fmt.Sprintf("%s-%dx%d-%s", p.name, vp.width, vp.height, theme))
						if *updateDocs && p.docsFromDemo && !vp.phone && theme == "light" {
							t.Logf("wrote %s", screenshot(t, ctx, docsDir(t), p.name))
						}
						// What opens (a finding's evidence) is read open.
						evaluate[bool](t, ctx, "open the details", `(document.querySelectorAll("details").forEach(d => d.open = true), true)`)
						c := evaluate[contrast](t, ctx, "contrast", contrastJS)
						if c.Checked == 0 {
							t.Errorf("%s: no text to check the contrast of", where)
						}
						for _, l := range c.Low {
							t.Errorf("%s: low contrast: %s", where, l)
						}
						noErrors(t, b, where)
					}
				}
			})
		}
	})

	t.Run("keyboard", func(t *testing.T) {
		emulate(t, ctx, viewports[0], "light")
		for _, p := range pages {
			t.Run(p.name, func(t *testing.T) {
				for try := 0; ; try++ {
					problems, reloaded := walkKeyboard(t, ctx, a.URL+p.path, "")
					if reloaded && try < 2 {
						continue // the page drew itself again mid-walk
					}
					for _, pr := range problems {
						t.Errorf("%s: %s", p.path, pr)
					}
					break
				}
				noErrors(t, b, p.path)
			})
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, p := range pages {
			if p.bad == "" {
				continue
			}
			t.Run(p.name, func(t *testing.T) {
				resp := harness.Step(t, ctx, "open "+p.bad, chromedp.NavigateResponse(a.URL+p.bad))
				if resp.Status != 400 {
					t.Errorf("%s: status %d, want 400", p.bad, resp.Status)
				}
				st := state(t, ctx)
				if strings.TrimSpace(st.Message) == "" {
					t.Errorf("%s shows no message; the page says:\n%s", p.bad, st.Text)
				}
				if !strings.Contains(st.Status, "signed in as "+admin.as) {
					t.Errorf("%s: the layout's status line says %q, want the reader", p.bad, st.Status)
				}
				b.FailedLoads() // the 400 itself
				noErrors(t, b, p.bad)
			})
		}
	})

	t.Run("roles", func(t *testing.T) {
		for _, r := range roles {
			t.Run(string(r.role), func(t *testing.T) {
				harness.SignIn(t, ctx, a.URL, r.secret, r.as)
				for _, p := range pages {
					status := open(t, ctx, a.URL+p.path)
					st := state(t, ctx)
					if p.adminOnly && r.role != config.RoleAdmin {
						if status != 403 || !strings.Contains(st.Message, "this page is not for you") {
							t.Errorf("%s as %s: status %d, message %q, want 403 and that it is not for them", p.path, r.as, status, st.Message)
						}
						b.FailedLoads() // the 403
						continue
					}
					if status != 200 {
						t.Errorf("%s as %s: status %d, want 200", p.path, r.as, status)
					}
					if !strings.Contains(st.Status, "signed in as "+r.as) || st.Message != "" {
						t.Errorf("%s as %s: status %q, message %q", p.path, r.as, st.Status, st.Message)
					}
					if r.role == config.RoleViewer && len(st.Buttons) > 0 {
						t.Errorf("%s shows a viewer buttons: %v", p.path, st.Buttons)
					}
					if r.role != config.RoleViewer && p.buttons && len(st.Buttons) == 0 {
						t.Errorf("%s shows %s no buttons", p.path, r.as)
					}
					if r.role == config.RoleUser {
						text := st.Text
						if p.othersIn != "" {
							text = evaluate[string](t, ctx, "the page without "+p.othersIn, fmt.Sprintf(`(() => {
								for (const e of document.querySelectorAll(%q)) e.textContent = "";
								return document.body.innerText;
							})()`, p.othersIn))
						}
						if m := othersRE.FindAllString(text, 5); len(m) > 0 {
							t.Errorf("%s shows alice others' rows (%q):\n%s", p.path, m, st.Text)
						}
						for _, w := range p.userSees {
							if !strings.Contains(st.Text, w) {
								t.Errorf("%s does not show alice %q:\n%s", p.path, w, st.Text)
							}
						}
					}
				}
				// The cookie alone changes nothing, whatever the role.
				res := evaluate[map[string]any](t, ctx, "POST without CSRF",
					`fetch("/api/v1/containers/alice-llama-finetune/stop", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(async r => ({status: r.status, code: (await r.json()).code}))`,
					chromedp.EvalAwaitPromise)
				if res["status"] != 403.0 || res["code"] != "csrf" {
					t.Errorf("a cookie-authenticated POST without the CSRF token as %s: %v, want 403 csrf", r.as, res)
				}
				b.FailedLoads() // the 403
				noErrors(t, b, "as "+r.as)
			})
		}
	})

	t.Run("session ended", func(t *testing.T) {
		// Each page sends a reader whose session ended to sign in, and
		// back to the page as it was asked for.
		emulate(t, ctx, viewports[0], "light")
		for _, p := range pages {
			harness.SetSessionCookie(t, ctx, a.URL, "ended")
			open(t, ctx, a.URL+p.path)
			harness.WaitStatus(t, ctx, "your session has ended")
			harness.WaitScript(t, ctx)
			harness.Step(t, ctx, "sign in again", chromedp.Steps(
				chromedp.SendKeys(chromedp.ID("token"), admin.secret),
				chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
			))
			harness.WaitStatus(t, ctx, "signed in as "+admin.as)
			if loc := harness.Step(t, ctx, "location", chromedp.Location()); loc != a.URL+p.path {
				t.Errorf("signed in again from %s, the browser is at %s", p.path, loc)
			}
			b.FailedLoads() // the 401 of the page that asked to sign in
			noErrors(t, b, p.path+" after the session ended")
		}
	})

	t.Run("checks fail on a bad page", func(t *testing.T) {
		// The checks above find what they look for: text too faint,
		// and a box wider than the phone, put on the page here.
		emulate(t, ctx, viewports[1], "light")
		open(t, ctx, a.URL+"/")
		evaluate[bool](t, ctx, "spoil the page", `(() => {
			const p = document.createElement("p");
			p.id = "faint";
			p.textContent = "faint";
			p.style.color = "#aaaaaa";
			p.style.background = "#ffffff";
			const wide = document.createElement("div");
			wide.id = "wide";
			wide.textContent = "wide";
			wide.style.width = "600px";
			document.querySelector("main").append(p, wide);
			return true;
		})()`)
		c := evaluate[contrast](t, ctx, "contrast", contrastJS)
		if len(c.Low) != 1 || !strings.Contains(c.Low[0].Sel, "p#faint") || c.Low[0].FG != "#aaaaaa" || c.Low[0].BG != "#ffffff" || c.Low[0].Ratio != 2.32 {
			t.Errorf("the contrast check finds %v, want p#faint, #aaaaaa on #ffffff at 2.32:1", c.Low)
		}
		if over := overflow(t, ctx, viewports[1]); !slices.ContainsFunc(over, func(s string) bool { return strings.HasPrefix(s, "main#main > div#wide") }) {
			t.Errorf("the overflow check finds %q, want div#wide", over)
		}
		// An element that shows no focus, and a link out of reach.
		problems, _ := walkKeyboard(t, ctx, a.URL+"/", `(() => {
			const s = document.createElement("span");
			s.id = "nofocus";
			s.tabIndex = 0;
			s.textContent = "no focus";
			s.style.outline = "none";
			const a = document.createElement("a");
			a.id = "unreachable";
			a.href = "/";
			a.textContent = "unreachable";
			a.tabIndex = 0;
			a.addEventListener("focus", () => a.blur());
			document.querySelector("main").append(s, a);
			return true;
		})()`)
		for _, w := range []string{"span#nofocus has no visible focus outline", "a#unreachable[href=/] is never reached by Tab"} {
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, w) }) {
				t.Errorf("the keyboard walk finds %q, want %q among them", problems, w)
			}
		}
		if got := chartProblems([]chart{{ID: "empty", Note: "no readings in this window"}, {ID: "dot", Points: []int{1}}, {ID: "bare"}}, 4); len(got) != 4 {
			t.Errorf("the chart check finds %q, want 4 problems", got)
		}
		noErrors(t, b, "the spoilt page")
	})

	t.Run("user sees own", func(t *testing.T) {
		// On the overview, GPU 0's other holder is another user's.
		harness.SignIn(t, ctx, a.URL, alice.secret, alice.as)
		open(t, ctx, a.URL+"/")
		holders := evaluate[[]string](t, ctx, "GPU 0's holders", `[...document.querySelectorAll("#gpu-0 .holder")].map(e => e.textContent)`)
		slices.Sort(holders)
		if !slices.Equal(holders, []string{"alice-llama-finetune", "another user"}) {
			t.Errorf("GPU 0's holders for alice: %q, want alice-llama-finetune and another user", holders)
		}
	})
}

// walkKeyboard opens url and presses Tab from the top until the focus
// has been round the page: the skip link must come first, then the nav
// links in order, and every interactive element must be reached with a
// visible outline. reloaded says the page drew itself again meanwhile.
func walkKeyboard(t *testing.T, ctx context.Context, url, spoil string) (problems []string, reloaded bool) {
	t.Helper()
	open(t, ctx, url)
	if spoil != "" {
		evaluate[bool](t, ctx, "spoil the page", spoil)
	}
	type elem struct {
		Sel  string `json:"sel"`
		Skip bool   `json:"skip"`
		Nav  bool   `json:"nav"`
	}
	els := evaluate[[]elem](t, ctx, "the interactive elements", `(() => {
		window.kbWalk = true;
		const sel = 'a[href], button, input:not([type="hidden"]), select, textarea, summary, [tabindex]:not([tabindex="-1"])';
		const els = [...document.querySelectorAll(sel)].filter(e => !e.disabled && e.getClientRects().length > 0 && !e.closest("[hidden], dialog:not([open])"));
		return els.map((e, i) => {
			e.dataset.kb = i;
			let s = e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + [...e.classList].map(c => "." + c).join("");
			if (e.getAttribute("href")) s += "[href=" + e.getAttribute("href") + "]";
			return { sel: s, skip: e.classList.contains("skip"), nav: !!e.closest("header nav") };
		});
	})()`)
	type focus struct {
		KB      int     `json:"kb"`
		Outline string  `json:"outline"`
		Width   float64 `json:"width"`
		Walk    bool    `json:"walk"`
	}
	var order []int
	seen := map[int]bool{}
	last := -3
	// A date or time field takes a Tab per part of it: three for each
	// element is room enough.
	for range 3*len(els) + 2 {
		harness.Step(t, ctx, "Tab", chromedp.KeyEvent("\t"))
		f := evaluate[focus](t, ctx, "the focus", `(() => {
			const e = document.activeElement;
			const cs = e ? getComputedStyle(e) : null;
			return { kb: !e || e === document.body ? -2 : e.dataset.kb === undefined ? -1 : +e.dataset.kb,
				outline: cs ? cs.outlineStyle : "", width: cs ? parseFloat(cs.outlineWidth) : 0, walk: !!window.kbWalk };
		})()`)
		if !f.Walk {
			return nil, true
		}
		if f.KB >= 0 && f.KB == last {
			continue // the next part of the same field
		}
		last = f.KB
		if f.KB == -2 || seen[f.KB] {
			break // round the page
		}
		if f.KB == -1 {
			problems = append(problems, "Tab reaches an element that is not interactive")
			continue
		}
		seen[f.KB] = true
		order = append(order, f.KB)
		if f.Outline == "none" || f.Width <= 0 {
			problems = append(problems, fmt.Sprintf("%s has no visible focus outline (outline %s %gpx)", els[f.KB].Sel, f.Outline, f.Width))
		}
	}
	var nav []int
	for i, e := range els {
		if e.Nav {
			nav = append(nav, i)
		}
		if !seen[i] {
			problems = append(problems, e.Sel+" is never reached by Tab")
		}
	}
	if len(order) == 0 || !els[order[0]].Skip {
		problems = append(problems, "the first Tab does not reach the skip link")
	} else if len(order) < 1+len(nav) || !slices.Equal(order[1:1+len(nav)], nav) {
		problems = append(problems, fmt.Sprintf("after the skip link Tab reaches %v, want the nav links %v first", order[1:], nav))
	}
	// The skip link skips.
	evaluate[bool](t, ctx, "focus the skip link", `(document.querySelector("a.skip").focus(), true)`)
	harness.Step(t, ctx, "Enter", chromedp.KeyEvent("\r"))
	if id := evaluate[string](t, ctx, "the focus", `document.activeElement.id`); id != "main" {
		problems = append(problems, fmt.Sprintf("Enter on the skip link focuses %q, want main", id))
	}
	return problems, false
}

// submitJob submits req to the agent at url with the bearer token secret.
func submitJob(t *testing.T, url, secret string, req apitype.JobRequest) {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequest(http.MethodPost, url+"/api/v1/jobs", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+secret)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("submit %s: %d %s", req.Name, resp.StatusCode, out)
	}
}
