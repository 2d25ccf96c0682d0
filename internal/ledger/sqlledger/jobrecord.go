package sqlledger

import (
	"encoding/json"

	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/units"
)

// The JSON columns of a job, request and placement, in their stored
// shapes: the one place a job's request and placement are encoded and
// decoded. The shapes are the ledger's on-disk format, kept byte for byte
// as earlier versions wrote them.

// requestRow is the request column: the submitted request without its
// environment values. It repeats the job's own columns (gpus, image,
// name, env_keys, command, time_limit), as it always has; a read takes
// those from the columns.
type requestRow struct {
	GPUs      int      `json:"gpus"`
	GPUMemory uint64   `json:"gpu_memory,omitempty"` // bytes on one shared GPU
	Class     string   `json:"class,omitempty"`
	TimeLimit string   `json:"time_limit"`
	Image     string   `json:"image"`
	Name      string   `json:"name,omitempty"`
	EnvKeys   []string `json:"env_keys,omitempty"`
	Mounts    []string `json:"mounts,omitempty"`
	Workdir   string   `json:"workdir,omitempty"`
	CPUs      float64  `json:"cpus,omitempty"`
	Memory    uint64   `json:"memory,omitempty"`
	ShmSize   uint64   `json:"shm_size,omitempty"`
	Pids      int      `json:"pids,omitempty"`
	Publish   []string `json:"publish,omitempty"`
	Labels    []string `json:"labels,omitempty"` // K=V
	Command   []string `json:"command"`
	Notify    []string `json:"notify,omitempty"`
	// What later versions added; absent from earlier rows, which read
	// as a job of its own with no dependency.
	Array         *arrayRow  `json:"array,omitempty"`
	After         []afterRow `json:"after,omitempty"`
	Preemptible   bool       `json:"preemptible,omitempty"`
	RequeueFailed bool       `json:"requeue_failed,omitempty"`
	RequeueOf     string     `json:"requeue_of,omitempty"`
	Attempt       int        `json:"attempt,omitempty"`
	// A fleet's placement constraints (patterns).
	Node  string `json:"node,omitempty"`
	Model string `json:"model,omitempty"`
}

type arrayRow struct {
	ID         string `json:"id"`
	Index      int    `json:"index"`
	Count      int    `json:"count"`
	MaxRunning int    `json:"max_running,omitempty"`
}

type afterRow struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// requestColumn is job j's request as its column keeps it: "null" for a
// job without one.
func requestColumn(j queue.Job) (string, error) {
	r := j.Request
	if r == nil {
		return "null", nil
	}
	b, err := json.Marshal(requestRow{
		GPUs: j.GPUsRequested, GPUMemory: r.GPUMemory, Class: string(r.Class),
		TimeLimit: units.FormatDuration(j.TimeLimit), Image: j.Image, Name: j.Name,
		EnvKeys: j.EnvKeys, Mounts: r.Mounts, Workdir: r.Workdir, CPUs: r.CPUs, Memory: r.Memory,
		ShmSize: r.ShmSize, Pids: r.Pids, Publish: r.Publish, Labels: r.Labels, Command: j.Command, Notify: r.Notify,
		Array: arrayColumn(r.Array), After: afterColumn(r.After), Preemptible: r.Preemptible,
		RequeueFailed: r.RequeueFailed, RequeueOf: r.RequeueOf, Attempt: r.Attempt,
		Node: r.Node, Model: r.Model,
	})
	return string(b), err
}

func arrayColumn(a *queue.ArrayTask) *arrayRow {
	if a == nil {
		return nil
	}
	return &arrayRow{ID: a.ID, Index: a.Index, Count: a.Count, MaxRunning: a.MaxRunning}
}

func afterColumn(ds []queue.Dependency) []afterRow {
	if len(ds) == 0 {
		return nil
	}
	out := make([]afterRow, len(ds))
	for i, d := range ds {
		out[i] = afterRow{Type: string(d.Type), ID: d.ID}
	}
	return out
}

// requestOf reads a request column; nil for none, and for one that does
// not read, which the launcher then refuses to start rather than the
// store refusing to list.
func requestOf(s string) *queue.Request {
	if s == "" || s == "null" {
		return nil
	}
	var r requestRow
	if json.Unmarshal([]byte(s), &r) != nil {
		return nil
	}
	return &queue.Request{
		GPUMemory: r.GPUMemory, Class: queue.Class(r.Class), Mounts: r.Mounts, Workdir: r.Workdir,
		CPUs: r.CPUs, Memory: r.Memory, ShmSize: r.ShmSize, Pids: r.Pids,
		Publish: r.Publish, Labels: r.Labels, Notify: r.Notify,
		Array: arrayOf(r.Array), After: afterOf(r.After), Preemptible: r.Preemptible,
		RequeueFailed: r.RequeueFailed, RequeueOf: r.RequeueOf, Attempt: r.Attempt,
		Node: r.Node, Model: r.Model,
	}
}

func arrayOf(a *arrayRow) *queue.ArrayTask {
	if a == nil {
		return nil
	}
	return &queue.ArrayTask{ID: a.ID, Index: a.Index, Count: a.Count, MaxRunning: a.MaxRunning}
}

func afterOf(rs []afterRow) []queue.Dependency {
	if len(rs) == 0 {
		return nil
	}
	out := make([]queue.Dependency, len(rs))
	for i, r := range rs {
		out[i] = queue.Dependency{Type: queue.DependencyType(r.Type), ID: r.ID}
	}
	return out
}

// placementRow is the placement column, in the shape the API shows.
type placementRow struct {
	Policy     string         `json:"policy"`
	Candidates []candidateRow `json:"candidates"`
}

type candidateRow struct {
	UUID   string  `json:"uuid"`
	Index  int     `json:"index"`
	Score  float64 `json:"score"`
	Util   float64 `json:"util"`
	Chosen bool    `json:"chosen"`
}

// placementColumn is p as a nullable text column: nil (NULL) for none.
func placementColumn(p *queue.PlacementRecord) any {
	if p == nil {
		return nil
	}
	out := placementRow{Policy: string(p.Policy), Candidates: make([]candidateRow, 0, len(p.Candidates))}
	for _, c := range p.Candidates {
		out.Candidates = append(out.Candidates, candidateRow{c.UUID, c.Index, c.Score, c.Util, c.Chosen})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil
	}
	return string(b)
}

// placementOf reads a placement column; nil for NULL and for a record
// that does not read, which is left out rather than shown wrong.
func placementOf(s *string) *queue.PlacementRecord {
	if s == nil || *s == "null" {
		return nil
	}
	var r placementRow
	if json.Unmarshal([]byte(*s), &r) != nil {
		return nil
	}
	out := &queue.PlacementRecord{Policy: queue.Placement(r.Policy)}
	if r.Candidates != nil {
		out.Candidates = make([]queue.Candidate, 0, len(r.Candidates))
	}
	for _, c := range r.Candidates {
		out.Candidates = append(out.Candidates, queue.Candidate{UUID: c.UUID, Index: c.Index, Score: c.Score, Util: c.Util, Chosen: c.Chosen})
	}
	return out
}
