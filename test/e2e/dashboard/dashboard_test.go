// Package dashboard checks the shipped Grafana dashboard and Prometheus
// rules against a real Prometheus scraping `gpumeter serve --demo`: every
// panel query, with Grafana's macros and the variables substituted as
// Grafana would, and every rule evaluates and answers.
package dashboard

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// emptyOnDemo are the panels meant to show no data on the demo: those of
// a fleet's series alone, once the outside-use rule's window is cut to
// seconds and a job waits in the queue. The test checks a panel listed
// here is indeed empty, so the list stays true; TestDashboardFleet checks
// them on a fleet.
var emptyOnDemo = map[string]string{
	"Nodes up":       "a fleet's",
	"Nodes draining": "a fleet's",
	"Nodes lost":     "a fleet's",
	"Schedulers":     "a fleet's",
}

// The recording rules meant to be empty on the demo: none.
var emptyRulesOnDemo = map[string]string{}

// The substitutions Grafana makes: with a 1 s scrape interval,
// $__rate_interval is four of them; the range is the test's own minute.
const (
	rateInterval = "4s"
	rangeWindow  = "1m"
)

var variables = []string{"Hostname", "gpu", "user", "team", "container"}

type target struct {
	Expr    string `json:"expr"`
	Instant bool   `json:"instant"`
	Range   bool   `json:"range"`
}

// panel is a panel of the dashboard, or a row (Type "row").
type panel struct {
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
}

type dash struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// subst replaces Grafana's macros and the variables in expr; values maps
// each variable to the regular expression Grafana would put there.
func subst(t *testing.T, expr string, values map[string]string) string {
	t.Helper()
	pairs := []string{"$__rate_interval", rateInterval, "$__range", rangeWindow}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		pairs = append(pairs, "${"+name+"}", values[name], "$"+name, values[name])
	}
	out := strings.NewReplacer(pairs...).Replace(expr)
	// What is left is label_replace's $1, never a variable Grafana would
	// leave unreplaced.
	if left := regexp.MustCompile(`\$[A-Za-z_{][A-Za-z_0-9]*`).FindString(out); left != "" {
		t.Errorf("%s: %s is not a variable of the dashboard", expr, left)
	}
	return out
}

func allValues() map[string]string {
	v := map[string]string{}
	for _, name := range variables {
		v[name] = ".*" // the variables' allValue
	}
	return v
}

func loadDashboard(t *testing.T) dash {
	t.Helper()
	raw, err := os.ReadFile(harness.RepoFile("deploy/grafana/gpumeter.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dash
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// demoWithQueue runs `serve --demo` with the GPU queue on and one job
// queued in it (the demo's containers hold every GPU, so the job waits),
// and the outside-use waste rule reporting the demo's processes outside
// containers within seconds rather than minutes.
func demoWithQueue(t *testing.T) *harness.Agent {
	t.Helper()
	cli := dockertest.Client(t)
	image := dockertest.SleeperImage(t, cli)
	// A short directory: a socket's path has at most 107 bytes.
	dataDir, err := os.MkdirTemp("", "gd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	if err := os.Chmod(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := harness.WriteFile(t, filepath.Join(t.TempDir(), "gpumeter.yaml"), `docker:
  enabled: true
queue:
  enabled: true
  images: ["gpumeter-test-sleeper:*"]
  run_as_root_images: ["gpumeter-test-sleeper:*"]
  gpu_passing: env
waste:
  outside:
    window: 2s
    grace: 1s
`, 0o600)
	// The demo serves its socket from a directory of its own unless told.
	sock := filepath.Join(dataDir, "api.sock")
	a := harness.Launch(t, dataDir, "--demo", "--config", cfg, "--interval", "200ms", "--api-socket", sock)
	env := []string{"GPUMETER_URL=unix://" + sock, "GPUMETER_DATA_DIR=" + dataDir}
	out, errOut, code := harness.RunCLI(t, env, "submit", "--gpus", "1", "--time-limit", "1h", "--image", image, "--", "sleep", "600")
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "j-") {
		t.Fatalf("submit: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	return a
}

func TestDashboardAndRulesOnDemo(t *testing.T) {
	d := loadDashboard(t)
	a := demoWithQueue(t)
	p := startProm(t, strings.TrimPrefix(a.URL, "http://"))

	// Rates need a few scrapes, and the range a few more.
	p.waitFor(t, `rate(gpumeter_ticks_total{job="gpumeter"}[4s]) > 0`, 60*time.Second)
	p.waitFor(t, `user:gpumeter_gpu_held_seconds:rate5m`, 30*time.Second)
	p.waitFor(t, `gpumeter_queue_jobs{state="queued"} == 1`, 30*time.Second)
	p.waitFor(t, `gpumeter_waste_findings > 0`, 30*time.Second)
	p.waitFor(t, `increase(gpumeter_waste_gpu_hours_total[1m]) > 0`, 30*time.Second)
	time.Sleep(5 * time.Second)

	t.Run("variables", func(t *testing.T) {
		re := regexp.MustCompile(`^label_values\((.+), (\w+)\)$`)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			m := re.FindStringSubmatch(v.Definition)
			if m == nil || m[2] != v.Name {
				t.Errorf("variable %s: definition %q is not label_values(selector, %s)", v.Name, v.Definition, v.Name)
				continue
			}
			got, err := p.instant("count by (" + m[2] + ") (" + subst(t, m[1], allValues()) + ")")
			if err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
				continue
			}
			if !slices.ContainsFunc(got, func(s series) bool { return s.Metric[m[2]] != "" }) {
				t.Errorf("variable %s: %s has no values on the demo", v.Name, v.Definition)
			}
		}
	})

	t.Run("panels", func(t *testing.T) {
		seen, queries := map[string]bool{}, 0
		for _, pn := range d.Panels {
			for _, tg := range pn.Targets {
				seen[pn.Title] = true
				queries++
				q := subst(t, tg.Expr, allValues())
				got, err := p.instant(q)
				if err != nil {
					t.Errorf("panel %q: %v", pn.Title, err)
					continue
				}
				if tg.Range {
					if got, err = p.rangeQuery(q, time.Minute, time.Second); err != nil {
						t.Errorf("panel %q over a range: %v", pn.Title, err)
						continue
					}
				}
				_, meantEmpty := emptyOnDemo[pn.Title]
				switch {
				case meantEmpty && len(got) > 0:
					t.Errorf("panel %q is listed as empty on the demo but answers %v: take it off the list", pn.Title, got)
				case !meantEmpty && len(got) == 0:
					t.Errorf("panel %q: %s answers nothing on the demo", pn.Title, q)
				}
			}
		}
		if queries < 29 {
			t.Errorf("%d panel queries, want every panel's", queries)
		}
		t.Logf("%d panel queries of %d panels evaluated", queries, len(seen))
		for title := range emptyOnDemo {
			if !seen[title] {
				t.Errorf("%q is listed as empty on the demo but no panel has that title", title)
			}
		}
	})

	// A variable value that matches nothing empties the panels that use
	// it; none of them turns into a query error.
	t.Run("nothing matches", func(t *testing.T) {
		for _, name := range variables {
			values := allValues()
			values[name] = "no-such-" + name
			for _, pn := range d.Panels {
				for _, tg := range pn.Targets {
					if !strings.Contains(tg.Expr, "$"+name) {
						continue
					}
					q := subst(t, tg.Expr, values)
					got, err := p.instant(q)
					if err != nil {
						t.Errorf("panel %q with %s matching nothing: %v", pn.Title, name, err)
					} else if len(got) > 0 {
						t.Errorf("panel %q with %s matching nothing answers %v, want nothing", pn.Title, name, got)
					}
				}
			}
		}
	})

	t.Run("rules", func(t *testing.T) { checkRules(t, p) })
}

// checkRules waits until Prometheus has evaluated every shipped rule, and
// checks each evaluated without error, each alert says what to do and
// each recording rule recorded series.
func checkRules(t *testing.T, p *prom) {
	type rule struct {
		Name        string            `json:"name"`
		Query       string            `json:"query"`
		Type        string            `json:"type"`
		Health      string            `json:"health"`
		LastError   string            `json:"lastError"`
		Annotations map[string]string `json:"annotations"`
	}
	var rules []rule
	deadline := time.Now().Add(30 * time.Second)
	for {
		var data struct {
			Groups []struct {
				Rules []rule `json:"rules"`
			} `json:"groups"`
		}
		if err := p.get("/api/v1/rules", nil, &data); err != nil {
			t.Fatal(err)
		}
		rules = rules[:0]
		pending := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				rules = append(rules, r)
				if r.Health == "unknown" {
					pending++
				}
			}
		}
		if len(rules) > 0 && pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(rules) < 20 {
		t.Fatalf("Prometheus loaded %d rules, want those of deploy/prometheus/gpumeter-rules.yml", len(rules))
	}
	t.Logf("%d rules evaluated", len(rules))
	for _, r := range rules {
		if r.Health != "ok" || r.LastError != "" {
			t.Errorf("rule %s: health %s, error %q", r.Name, r.Health, r.LastError)
		}
		if r.Type == "alerting" && (r.Annotations["summary"] == "" || r.Annotations["description"] == "") {
			t.Errorf("alert %s needs both a summary and a description", r.Name)
		}
		if r.Type != "recording" {
			continue
		}
		got, err := p.instant(r.Name)
		_, meantEmpty := emptyRulesOnDemo[r.Name]
		switch {
		case err != nil:
			t.Errorf("rule %s: %v", r.Name, err)
		case !meantEmpty && len(got) == 0:
			t.Errorf("recording rule %s recorded nothing on the demo: %s", r.Name, r.Query)
		case meantEmpty && len(got) > 0:
			t.Errorf("recording rule %s is listed as empty on the demo but recorded %v", r.Name, got)
		}
	}
}
