package web_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// replayLedger is a SQLite ledger of two containers on one GPU, one
// after the other, each at 40 % SM for an hour, named by scriptName.
func replayLedger(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	start := servertest.Start.Add(-3 * time.Hour)
	g := ledger.GPU{Node: "n1", UUID: "GPU-0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30}
	b := ledger.Batch{Nodes: []ledger.Node{{Name: "n1", FirstSeen: start, LastSeen: start.Add(2 * time.Hour)}}, GPUs: []ledger.GPU{g}}
	for k := range 2 {
		id := fmt.Sprintf("%064x", k+1)
		from := start.Add(time.Duration(k) * time.Hour)
		b.Containers = append(b.Containers, ledger.Container{Node: "n1", ID: id, Name: scriptName, Image: "train:1", User: "alice",
			StartedAt: from, FinishedAt: from.Add(time.Hour), FirstSeen: from, LastSeen: from.Add(time.Hour)})
		for m := range 60 {
			b.Usage = append(b.Usage, ledger.Usage{Node: "n1", Start: from.Add(time.Duration(m) * time.Minute), OwnerKind: ledger.KindContainer,
				OwnerID: id, GPU: g.UUID, Sums: ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 24,
					MemoryByteSeconds: 60 * float64(8<<30), PeakMemoryBytes: 8 << 30}})
		}
	}
	if err := store.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	return store
}

// TestWhatIfPage: the page draws the modes side by side with bars, the
// utilisation line per mode and the download of the JSON; its controls
// are checked as the API checks them; a ledger that is off is said.
func TestWhatIfPage(t *testing.T) {
	store := replayLedger(t)
	f := servertest.NewFixture(t, func(c *server.Config) {
		c.WhatIf = &whatif.Service{Ledger: store, Now: c.Now}
	})
	for _, caller := range []string{servertest.AsAdmin, servertest.AsAlice, servertest.AsViewer} {
		body := checkHTMLPage(t, pageAs(t, f, caller, true, "/whatif?window=24h&gpus=%2B1&share=3"), http.StatusOK)
		for _, want := range []string{
			`id="whatif-modes"`, `<td>exclusive</td>`, `<td>timeslice</td>`, `<td>memory</td>`, `<td>exclusive (2 GPUs)</td>`,
			`<svg class="bar"`, `id="whatif-util"`, `class="line c0"`,
			`href="/api/v1/whatif?fleet_gpus=%2B1&amp;search=0&amp;share=3&amp;since=24h"`,
			"A replay of measured use under a model", `id="whatif-assumptions"`, "2 holders, 0 of them queue jobs",
			`aria-current="page">What-if`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: the page lacks %q:\n%.4000s", caller, want, body)
			}
		}
	}
	for path, want := range map[string]string{
		"/whatif?window=1y":   `window: "1y" is not one of 24h, 7d, 30d`,
		"/whatif?gpus=lots":   `gpus: "lots" is not a GPU count`,
		"/whatif?share=0":     `share: "0" is not a whole number between 1 and 64`,
		"/whatif?mode=memory": "mode: not a parameter of the what-if page",
	} {
		status, body := page(t, f, servertest.AsAdmin, path)
		if status != http.StatusBadRequest || !strings.Contains(message(body), want) {
			t.Errorf("%s: %d %q, want 400 with %q", path, status, message(body), want)
		}
	}
	off := servertest.NewFixture(t, func(c *server.Config) { c.WhatIf = nil })
	if status, body := page(t, off, servertest.AsAdmin, "/whatif"); status != http.StatusOK || !strings.Contains(body, `id="whatif-off"`) {
		t.Errorf("ledger off: %d\n%.3000s", status, body)
	}
}

// TestUsagePageAdvice: the usage page lists the window's advice, a
// user's own only.
func TestUsagePageAdvice(t *testing.T) {
	store := adviceLedger(t)
	f := servertest.NewFixture(t, func(c *server.Config) {
		c.WhatIf = &whatif.Service{Ledger: store, Now: c.Now}
	})
	body := checkHTMLPage(t, pageAs(t, f, servertest.AsAdmin, true, "/usage?window=24h"), http.StatusOK)
	if !strings.Contains(body, `id="advice"`) || !strings.Contains(body, "<code>--gpus 1</code>") || !strings.Contains(body, "<td>bob</td>") {
		t.Errorf("admin's usage page lacks bob's --gpus 1 advice:\n%.6000s", body)
	}
	if body := checkHTMLPage(t, pageAs(t, f, servertest.AsAlice, true, "/usage?window=24h"), http.StatusOK); !strings.Contains(body, `id="no-advice"`) || strings.Contains(body, "<td>bob</td>") {
		t.Errorf("alice's usage page shows advice that is not hers:\n%.6000s", body)
	}
	if body := checkHTMLPage(t, pageAs(t, f, servertest.AsBob, true, "/usage?window=24h"), http.StatusOK); !strings.Contains(body, "<code>--gpus 1</code>") {
		t.Errorf("bob's usage page lacks his advice:\n%.6000s", body)
	}
}

// adviceLedger is bob's container holding two GPUs for two hours and
// computing on one.
func adviceLedger(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	start := servertest.Start.Add(-3 * time.Hour)
	gpus := []ledger.GPU{{Node: "n1", UUID: "GPU-0", Index: 0, Model: "m", MemoryTotal: 80 << 30}, {Node: "n1", UUID: "GPU-1", Index: 1, Model: "m", MemoryTotal: 80 << 30}}
	id := fmt.Sprintf("%064x", 7)
	b := ledger.Batch{Nodes: []ledger.Node{{Name: "n1", FirstSeen: start, LastSeen: start.Add(2 * time.Hour)}}, GPUs: gpus,
		Containers: []ledger.Container{{Node: "n1", ID: id, Name: "bob-train", Image: "train:1", User: "bob",
			StartedAt: start, FinishedAt: start.Add(2 * time.Hour), FirstSeen: start, LastSeen: start.Add(2 * time.Hour)}}}
	for m := range 120 {
		for i, g := range gpus {
			b.Usage = append(b.Usage, ledger.Usage{Node: "n1", Start: start.Add(time.Duration(m) * time.Minute), OwnerKind: ledger.KindContainer,
				OwnerID: id, GPU: g.UUID, Sums: ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: float64(54 * (1 - i)),
					MemoryByteSeconds: 60 * float64(30<<30), PeakMemoryBytes: 30 << 30}})
		}
	}
	if err := store.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	return store
}

// TestJobRowGPUUse: a running job that holds two GPUs and computes on
// one says so on its row.
func TestJobRowGPUUse(t *testing.T) {
	var f *servertest.JobsFixture
	f = servertest.NewJobsFixtureServer(t, nil, func(c *server.Config) {
		c.WhatIf = &whatif.Service{Ledger: lazyLedger{&f}, Now: c.Now}
	})
	j := f.Submit(t, servertest.AsAlice, strings.Replace(servertest.GoodJob, `"gpus":1`, `"gpus":2`, 1))
	ctx := context.Background()
	start := servertest.Start
	id := fmt.Sprintf("%064x", 9)
	if _, err := f.Store.UpdateJob(ctx, j.ID, queue.Queued, func(q *queue.Job) {
		q.State, q.StartedAt, q.ContainerID, q.GPUs = queue.Running, start, id, []string{"GPU-0", "GPU-1"}
	}, audit.Event{}); err != nil {
		t.Fatal(err)
	}
	gpus := []ledger.GPU{{Node: "n1", UUID: "GPU-0", Index: 0, Model: "m", MemoryTotal: 80 << 30}, {Node: "n1", UUID: "GPU-1", Index: 1, Model: "m", MemoryTotal: 80 << 30}}
	b := ledger.Batch{Nodes: []ledger.Node{{Name: "n1", FirstSeen: start, LastSeen: start.Add(time.Hour)}}, GPUs: gpus,
		Containers: []ledger.Container{{Node: "n1", ID: id, Name: "gpumeter-job-" + j.ID, Image: "gpumeter/sleeper:1", User: "alice",
			StartedAt: start, FirstSeen: start, LastSeen: start.Add(time.Hour)}}}
	for m := range 30 {
		for i, g := range gpus {
			b.Usage = append(b.Usage, ledger.Usage{Node: "n1", Start: start.Add(time.Duration(m) * time.Minute), OwnerKind: ledger.KindContainer,
				OwnerID: id, GPU: g.UUID, Sums: ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: float64(50 * (1 - i))}})
		}
	}
	if err := f.Store.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	body := checkHTMLPage(t, pageAs(t, f.Fixture, servertest.AsAlice, true, "/jobs"), http.StatusOK)
	if !strings.Contains(body, "this job used 1 of its 2 GPUs") {
		t.Errorf("the job's row does not say it used 1 of its 2 GPUs:\n%.5000s", body)
	}
}

// lazyLedger reads the jobs fixture's ledger, which exists only once the
// fixture does.
type lazyLedger struct{ f **servertest.JobsFixture }

func (l lazyLedger) Series(ctx context.Context, f ledger.Filter, step time.Duration) ([]ledger.UsagePoint, error) {
	return (*l.f).Store.Series(ctx, f, step)
}
func (l lazyLedger) KnownGPUs(ctx context.Context) ([]ledger.GPU, error) {
	return (*l.f).Store.KnownGPUs(ctx)
}
func (l lazyLedger) Jobs(ctx context.Context, f ledger.JobFilter) ([]queue.Job, error) {
	return (*l.f).Store.Jobs(ctx, f)
}
