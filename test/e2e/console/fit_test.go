package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// fitScenario has a container on GPU 0 that ends after a minute beside
// one that stays, and a host process of bob's on GPU 1.
const fitScenario = `version: 1
node: e2e-fit
duration: 1h
interval: 1s
gpus:
  - count: 2
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 70W
    max_power: 700W
containers:
  - name: stays
    labels: {gpumeter.user: alice, gpumeter.team: nlp}
    gpus: [0]
    phases: [{at: 0s, util: 50, memory: 10GiB}]
  - name: ends-soon
    labels: {gpumeter.user: carol, gpumeter.team: vision}
    gpus: [0]
    end: 10s
    phases: [{at: 0s, util: 20, memory: 4GiB}]
host_processes:
  - user: bob
    gpu: 1
    start: 0s
    end: 1h
    util: 40
    memory: 6GiB
`

// fitJS says what of the page does not fit a viewport: every table whose
// content is wider than its box, and every action button that lies
// outside the viewport, even in part.
const fitJS = `(() => {
	const out = [];
	for (const t of document.querySelectorAll("table")) {
		if (t.scrollWidth > t.clientWidth) out.push("table#" + t.id + " is " + t.scrollWidth + "px wide in " + t.clientWidth + "px");
		const w = t.closest(".table-wrap");
		if (w && w.scrollWidth > w.clientWidth) out.push("the wrapper of table#" + t.id + " scrolls: " + w.scrollWidth + "px in " + w.clientWidth + "px");
	}
	for (const b of document.querySelectorAll("button[data-path]")) {
		const r = b.getBoundingClientRect();
		if (r.left < 0 || r.right > innerWidth + 0.5 || r.width === 0) out.push("button " + b.dataset.path + " spans " + Math.round(r.left) + "-" + Math.round(r.right) + "px of " + innerWidth + "px");
	}
	return out;
})()`

// holdersJS is what each GPU tile of the overview says holds it.
const holdersJS = `Object.fromEntries([...document.querySelectorAll("li.tile")].map(t => [t.id, [...t.querySelectorAll(".holder")].map(h => h.textContent)]))`

// TestConsoleFits holds the jobs page to its viewport with many jobs
// with long values, at a desktop and a phone width: no table wider than
// its box and every action button on screen. It holds the overview's
// holders to the last tick's, the API's: a container that ended holds
// nothing, and a host user is named as everywhere else.
func TestConsoleFits(t *testing.T) {
	roles, tokens := demoRoles(t)
	admin, alice := roles[0], roles[1]
	bobSecret, bob, err := auth.NewToken("bob", "bob", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tokens += ",bob=" + bob.Entry()
	dir := t.TempDir()
	passwd := harness.WriteText(t, filepath.Join(dir, "passwd"), "root:x:0:0::/root:/bin/sh\nalice:x:2001:2001::/home/alice:/bin/sh\nbob:x:2002:2002::/home/bob:/bin/sh\n")
	group := harness.WriteText(t, filepath.Join(dir, "group"), "root:x:0:\nalice:x:2001:\nbob:x:2002:\n")
	scenario := filepath.Join(dir, "fit.yaml")
	if err := os.WriteFile(scenario, []byte(fitScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	a := harness.Serve(t, []string{tokens, "GPUMETER_QUEUE_ENABLED=true", "GPUMETER_QUEUE_IMAGES=pytorch/*", "GPUMETER_QUEUE_DEFAULT_TIME_LIMIT=1h",
		"GPUMETER_HOST_PASSWD_FILE=" + passwd, "GPUMETER_HOST_GROUP_FILE=" + group,
		"GPUMETER_DOCKER_HOST=unix://" + filepath.Join(dir, "no-docker.sock")}, "--sim", scenario, "--interval", "200ms")

	// Jobs with long names, images and commands, some cancelled: the
	// page with ended jobs shows every column.
	long := strings.Repeat("very-long-", 6)
	var ids []string
	for i := range 8 {
		secret := alice.secret
		if i%2 == 1 {
			secret = bobSecret
		}
		req := apitype.JobRequest{GPUs: 1 + i%2, Image: "pytorch/pytorch-" + long + "image:2.4.0-cuda12.1-cudnn9-runtime", Name: fmt.Sprintf("%sjob-%d", long[:50], i),
			Command: []string{"python", "/workspace/" + long + "train.py", "--config=/workspace/configs/" + long + "config.yaml", "--epochs=100"}}
		ids = append(ids, submitJobID(t, a.URL, secret, req))
	}
	for _, id := range ids[:3] {
		cancelJob(t, a.URL, alice.secret, bobSecret, id)
	}

	b := harness.NewBrowser(t)
	ctx := b.Ctx
	harness.SignIn(t, ctx, a.URL, admin.secret, admin.as)
	for _, vp := range []viewport{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}} {
		where := fmt.Sprintf("/jobs?all=1 at %d px", vp.width)
		emulate(t, ctx, vp, "light")
		open(t, ctx, a.URL+"/jobs?all=1")
		st := state(t, ctx)
		// Five live jobs with cancel and hold each.
		if len(st.Buttons) < 10 {
			t.Errorf("%s: %d buttons, want cancel and hold for each live job: %v", where, len(st.Buttons), st.Buttons)
		}
		for _, p := range evaluate[[]string](t, ctx, "fit", fitJS) {
			t.Errorf("%s: %s", where, p)
		}
		screenshot(t, ctx, artefactDir(t), "fit-jobs-"+vp.name)
		noErrors(t, b, where)
	}

	// The overview names the last tick's holders, as /api/v1/gpus does:
	// ends-soon, once it has ended, holds nothing.
	emulate(t, ctx, viewports[0], "light")
	var got map[string][]string
	harness.WaitFor(t, 60*time.Second, "ends-soon to end", func() bool {
		return !slices.Contains(apiHolders(t, a.URL, admin.secret)[0], "ends-soon")
	})
	open(t, ctx, a.URL+"/")
	got = evaluate[map[string][]string](t, ctx, "holders", holdersJS)
	if want := []string{"stays"}; !slices.Equal(got["gpu-0"], want) {
		t.Errorf("GPU 0 is held by %q on the overview, want %q as the API says", got["gpu-0"], want)
	}
	if want := []string{"bob (host)"}; !slices.Equal(got["gpu-1"], want) {
		t.Errorf("GPU 1 is held by %q on the overview, want %q", got["gpu-1"], want)
	}
	noErrors(t, b, "/")
}

// apiHolders are the names of the containers and host users that hold or
// use each GPU in the last tick, as /api/v1/gpus and /api/v1/containers
// say, by index.
func apiHolders(t *testing.T, url, secret string) map[int][]string {
	t.Helper()
	var gpus apitype.GPUsResponse
	getJSON(t, url+"/api/v1/gpus", secret, &gpus)
	var ctrs apitype.ContainersResponse
	getJSON(t, url+"/api/v1/containers", secret, &ctrs)
	names := map[string]string{}
	for _, c := range ctrs.Containers {
		names[c.ID] = c.Name
	}
	out := map[int][]string{}
	for _, g := range gpus.GPUs {
		for _, o := range g.Owners {
			if o.Share > 0 || o.Processes > 0 {
				out[g.Index] = append(out[g.Index], names[o.Owner])
			}
		}
	}
	return out
}

func getJSON(t *testing.T, url, secret string, v any) {
	t.Helper()
	resp, err := harness.GetAs(url, secret)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// submitJobID submits req as the holder of secret and returns the job's
// id.
func submitJobID(t *testing.T, url, secret string, req apitype.JobRequest) string {
	t.Helper()
	before := map[string]bool{}
	var jobs apitype.JobsResponse
	getJSON(t, url+"/api/v1/jobs", secret, &jobs)
	for _, j := range jobs.Jobs {
		before[j.ID] = true
	}
	submitJob(t, url, secret, req)
	getJSON(t, url+"/api/v1/jobs", secret, &jobs)
	for _, j := range jobs.Jobs {
		if !before[j.ID] {
			return j.ID
		}
	}
	t.Fatalf("the job %s is not in the list", req.Name)
	return ""
}

// cancelJob cancels job id with whichever of the secrets owns it.
func cancelJob(t *testing.T, url string, secrets ...string) {
	t.Helper()
	id := secrets[len(secrets)-1]
	for _, s := range secrets[:len(secrets)-1] {
		hr, err := http.NewRequest(http.MethodPost, url+"/api/v1/jobs/"+id+"/cancel", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Authorization", "Bearer "+s)
		hr.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
	}
	t.Fatalf("cancel %s: no token could", id)
}
