package whatif_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// history is a planted-truth history in testdata: GPUs and the holders
// on them, minute by minute, as a node's agent would have metered them.
type history struct {
	Node    string    `json:"node"`
	Start   time.Time `json:"start"`
	GPUs    int       `json:"gpus"`
	Model   string    `json:"model"`
	MemGiB  uint64    `json:"memory_gib"`
	Holders []holder  `json:"holders"`
}

// holder is one container, a queue job's when Job is set. Times are
// minutes from the history's start; Util is the SM share on each of its
// GPUs; Duty, when set, is how many minutes of every Period (default
// ten) it computes, from the start of each.
type holder struct {
	Name      string    `json:"name"`
	User      string    `json:"user"`
	Team      string    `json:"team"`
	Image     string    `json:"image"`
	Job       bool      `json:"job"`
	Asked     int       `json:"asked"`
	Submit    int       `json:"submit"`
	Start     int       `json:"start"`
	End       int       `json:"end"`
	GPUs      []int     `json:"gpus"`
	Util      []float64 `json:"util"`
	Duty      int       `json:"duty"`
	Period    int       `json:"period"`
	MemGiB    float64   `json:"memory_gib"`
	LimitMins int       `json:"limit"`
	Repeat    int       `json:"repeat"`
	Every     int       `json:"every"`
}

const gib = 1 << 30

func readHistory(t testing.TB, name string) history {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var h history
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return h
}

// expand turns repeated holders into one each, Every minutes apart.
func (h history) expand() []holder {
	var out []holder
	for _, x := range h.Holders {
		n := max(1, x.Repeat)
		for i := range n {
			y := x
			off := i * x.Every
			y.Submit, y.Start, y.End = x.Submit+off, x.Start+off, x.End+off
			if n > 1 {
				y.Name = fmt.Sprintf("%s-%d", x.Name, i)
			}
			out = append(out, y)
		}
	}
	return out
}

// write puts h into a fresh SQLite ledger, minute rows compacted into
// chunks as an agent's would be, and returns it.
func write(t testing.TB, h history) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	node := h.Node
	if node == "" {
		node = "gpu1"
	}
	at := func(m int) time.Time { return h.Start.Add(time.Duration(m) * time.Minute) }
	var gpus []ledger.GPU
	for i := range h.GPUs {
		gpus = append(gpus, ledger.GPU{Node: node, UUID: fmt.Sprintf("GPU-%04d", i), Index: i, Model: h.Model, MemoryTotal: h.MemGiB * gib})
	}
	holders := h.expand()
	end := 0
	for _, x := range holders {
		end = max(end, x.End)
	}
	b := ledger.Batch{Nodes: []ledger.Node{{Name: node, FirstSeen: at(0), LastSeen: at(end)}}, GPUs: gpus}
	flush := func() {
		if err := store.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		b = ledger.Batch{}
	}
	for k, x := range holders {
		id := fmt.Sprintf("%064x", k+1)
		c := ledger.Container{Node: node, ID: id, Name: x.Name, Image: x.Image, User: x.User, Team: x.Team,
			Labels: map[string]string{"gpumeter.user": x.User}, StartedAt: at(x.Start), FinishedAt: at(x.End),
			FirstSeen: at(x.Start), LastSeen: at(x.End)}
		b.Containers = append(b.Containers, c)
		mem := uint64(x.MemGiB * gib)
		period := x.Period
		if period == 0 {
			period = 10
		}
		for m := x.Start; m < x.End; m++ {
			busy := x.Duty == 0 || (m-x.Start)%period < x.Duty
			for i, g := range x.GPUs {
				u := 0.0
				if busy && i < len(x.Util) {
					u = x.Util[i]
				}
				b.Usage = append(b.Usage, ledger.Usage{Node: node, Start: at(m), OwnerKind: ledger.KindContainer, OwnerID: id, GPU: gpus[g].UUID,
					Sums: ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 60 * u,
						MemoryByteSeconds: 60 * float64(mem), PeakMemoryBytes: mem, PeakUtil: 100 * u}})
			}
		}
		if len(b.Usage) > 20000 {
			flush()
		}
		if !x.Job {
			continue
		}
		asked := x.Asked
		if asked == 0 {
			asked = len(x.GPUs)
		}
		j, err := store.SubmitJob(ctx, queue.Job{Node: node, Name: x.Name, User: x.User, Team: x.Team, State: queue.Queued,
			GPUsRequested: asked, Image: x.Image, Command: []string{"run"}, TimeLimit: time.Duration(x.LimitMins) * time.Minute,
			SubmittedAt: at(x.Submit)}, audit.Event{Time: at(x.Submit), Node: node, Kind: "api", Caller: x.User, Role: "user", Action: "jobs.submit", Status: 201})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.UpdateJob(ctx, j.ID, queue.Queued, func(q *queue.Job) {
			q.State, q.StartedAt, q.ContainerID = queue.Running, at(x.Start), id
		}, audit.Event{}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.UpdateJob(ctx, j.ID, queue.Running, func(q *queue.Job) {
			q.State, q.EndedAt = queue.Succeeded, at(x.End)
		}, audit.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	if err := store.CompactMinutes(ctx, node, at(end+60)); err != nil {
		t.Fatal(err)
	}
	return store
}
