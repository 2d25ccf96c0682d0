package report

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// jobFixture is the fixture with its two containers run as queue jobs:
// train is j-000012 (alice asked for 1 GPU at 09:50, it ran 10:00–12:00
// and succeeded), notebook is j-000013 (bob asked for 2 at 10:30, it
// started 11:00 and still runs). Carol's host process is not a job.
func jobFixture() ([]ledger.UsageTotal, []ledger.GPUTotal, []queue.Job) {
	usage, gpus := fixture()
	for i, id := range map[int]string{0: "j-000012", 1: "j-000013"} {
		c := *usage[i].Container
		c.Labels = maps.Clone(c.Labels)
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[container.JobLabel] = id
		usage[i].Container = &c
	}
	jobs := []queue.Job{
		{ID: "j-000012", User: "alice", State: queue.Succeeded, GPUsRequested: 1,
			SubmittedAt: from.Add(-10 * time.Minute), StartedAt: from, EndedAt: to},
		{ID: "j-000013", User: "bob", State: queue.Running, GPUsRequested: 2,
			SubmittedAt: from.Add(30 * time.Minute), StartedAt: from.Add(time.Hour)},
	}
	return usage, gpus, jobs
}

// jobNow is when the by-job fixture's report is made: j-000013 has run
// 1 h 30 min.
var jobNow = to.Add(30 * time.Minute)

func buildJobs(t *testing.T, jobs []queue.Job) *Report {
	t.Helper()
	usage, gpus, _ := jobFixture()
	r, err := Build(usage, gpus, Options{By: ByJob, From: from, To: to, Cost: prices(), Jobs: jobs, Now: jobNow})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBuildByJob(t *testing.T) {
	_, _, jobs := jobFixture()
	got := buildJobs(t, jobs)
	at := func(d time.Duration) *time.Time { t := from.Add(d); return &t }
	// The rows' figures are the by-user rows of alice and bob (see
	// TestBuildByUser); carol and the unattributed use are not jobs.
	type row struct {
		Key        string
		Cost       float64
		Containers int
		Job        *JobInfo
	}
	want := []row{
		{"j-000012", 4.945, 1, &JobInfo{User: "alice", State: "succeeded", GPUsRequested: 1,
			SubmittedAt: at(-10 * time.Minute), StartedAt: at(0), EndedAt: at(2 * time.Hour),
			WaitedSeconds: hours(600), RanSeconds: hours(7200)}},
		{"j-000013", 3.175, 1, &JobInfo{User: "bob", State: "running", GPUsRequested: 2,
			SubmittedAt: at(30 * time.Minute), StartedAt: at(time.Hour),
			WaitedSeconds: hours(1800), RanSeconds: hours(5400)}},
		{KeyNotJob, 0.0225, 0, nil},
		{KeyUnattributed, 0.0045, 0, nil},
	}
	var rows []row
	for _, r := range got.Rows {
		rows = append(rows, row{r.Key, r.Cost, r.Containers, r.Job})
	}
	if diff := cmp.Diff(rows, want, approx); diff != "" {
		t.Errorf("rows by job (-got +want):\n%s", diff)
	}
	if got.Totals.Job != nil {
		t.Errorf("totals have a job: %+v", got.Totals.Job)
	}
	if byUser := build(t, ByUser, prices(), nil); got.Host != byUser.Host || got.Totals.Cost != byUser.Totals.Cost {
		t.Errorf("by job the host is %+v and the rows cost %v; by user %+v and %v", got.Host, got.Totals.Cost, byUser.Host, byUser.Totals.Cost)
	}
}

// TestBuildByJobUnknown: a job the job store does not know still has its
// row, with the user its container is labelled with and no times.
func TestBuildByJobUnknown(t *testing.T) {
	_, _, jobs := jobFixture()
	got := buildJobs(t, jobs[:1])
	var info *JobInfo
	for _, r := range got.Rows {
		if r.Key == "j-000013" {
			info = r.Job
		}
	}
	if diff := cmp.Diff(info, &JobInfo{User: "bob"}); diff != "" {
		t.Errorf("the unknown job (-got +want):\n%s", diff)
	}
	var b bytes.Buffer
	if err := got.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !regexpLine(b.String(), "j-000013", "bob", "-", "-") {
		t.Errorf("the unknown job's line does not show bob and dashes:\n%s", b.String())
	}
}

// TestBuildByJobOtherNode: a container on this engine labelled with
// another node's job of the same id is that node's job, not ours: two
// rows keyed by node and id, and only ours finds our job.
func TestBuildByJobOtherNode(t *testing.T) {
	usage, gpus, jobs := jobFixture()
	jobs[0].Node = "gpu1"
	c := *usage[1].Container
	c.Labels = maps.Clone(c.Labels)
	c.Labels[container.JobLabel], c.Labels[container.NodeLabel] = "j-000012", "gpu2"
	usage[1].Container = &c
	got, err := Build(usage, gpus, Options{By: ByJob, From: from, To: to, Cost: prices(), Jobs: jobs, Now: jobNow})
	if err != nil {
		t.Fatal(err)
	}
	infos := map[string]*JobInfo{}
	for _, r := range got.Rows {
		infos[r.Key] = r.Job
	}
	if j := infos["gpu1/j-000012"]; j == nil || j.State != "succeeded" {
		t.Errorf("our j-000012: %+v, want the succeeded job", j)
	}
	if j := infos["gpu2/j-000012"]; j == nil || j.State != "" || j.User != "bob" {
		t.Errorf("gpu2's j-000012: %+v, want a job the store does not know, of bob", j)
	}
	if _, ok := infos["j-000012"]; ok {
		t.Errorf("a row keyed by the id alone: %v", infos)
	}
}

// regexpLine reports whether a line of out begins with the fields given.
func regexpLine(out string, fields ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= len(fields) && slicesEqual(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestJobRunningWithoutNow: a running job's run time is measured to Now,
// else to the window's end.
func TestJobRunningWithoutNow(t *testing.T) {
	usage, gpus, jobs := jobFixture()
	r, err := Build(usage, gpus, Options{By: ByJob, From: from, To: to, Cost: prices(), Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Rows {
		if row.Key == "j-000013" {
			if row.Job.RanSeconds == nil || *row.Job.RanSeconds != 3600 {
				t.Errorf("ran %v, want 3600 s (to the window's end)", row.Job.RanSeconds)
			}
		}
	}
}

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		s    float64
		want string
	}{{0, "0s"}, {59.4, "59s"}, {60, "1m"}, {38*60 + 59, "38m"}, {3600, "1h00m"}, {2*3600 + 5*60, "2h05m"}, {86400 + 4*3600, "1d04h"}} {
		if got := span(&tc.s); got != tc.want {
			t.Errorf("span(%v) = %q, want %q", tc.s, got, tc.want)
		}
	}
	if got := span(nil); got != "-" {
		t.Errorf("span(nil) = %q, want -", got)
	}
}

// TestRunByJobSQLite writes two job containers' usage and their jobs to
// a real SQLite ledger and reads the report by job back through Run.
func TestRunByJobSQLite(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	const node = "gpu1"
	g0 := ledger.GPU{Node: node, UUID: "GPU-00000000-aaaa", Index: 0, Model: a100, MemoryTotal: 80 * gib}
	g1 := ledger.GPU{Node: node, UUID: "GPU-11111111-bbbb", Index: 1, Model: h100, MemoryTotal: 80 * gib}
	ctr := func(id, name, job, user string) ledger.Container {
		return ledger.Container{Node: node, ID: strings.Repeat(id, 32), Name: name, Image: "train:1",
			Labels: map[string]string{container.JobLabel: job, "gpumeter.user": user}, User: user,
			StartedAt: from, FirstSeen: from, LastSeen: to}
	}
	// Submitted first, so that the ledger's sequence gives j-000001 and
	// j-000002.
	var ids []string
	for _, j := range []queue.Job{
		{User: "alice", State: queue.Succeeded, GPUsRequested: 1, SubmittedAt: from.Add(-5 * time.Minute), StartedAt: from, EndedAt: from.Add(time.Hour)},
		{User: "bob", State: queue.Running, GPUsRequested: 1, SubmittedAt: from, StartedAt: from.Add(20 * time.Minute)},
	} {
		got, err := store.SubmitJob(ctx, queue.Job{Node: node, User: j.User, State: queue.Queued, GPUsRequested: j.GPUsRequested,
			Image: "train:1", Command: []string{"train"}, TimeLimit: 4 * time.Hour, SubmittedAt: j.SubmittedAt},
			audit.Event{Time: j.SubmittedAt, Node: node, Kind: "api", Caller: j.User, Role: "user",
				Source: "unix uid 1000", Action: "jobs.submit", Status: 201})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got.ID)
		if _, err := store.UpdateJob(ctx, got.ID, queue.Queued, func(x *queue.Job) {
			x.State, x.StartedAt, x.EndedAt = j.State, j.StartedAt, j.EndedAt
		}, audit.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob := ctr("1a", "gpumeter-job-"+ids[0], ids[0], "alice"), ctr("2b", "gpumeter-job-"+ids[1], ids[1], "bob")
	other := ctr("3c", "notebook", "", "carol")
	delete(other.Labels, container.JobLabel)
	b := ledger.Batch{
		Nodes:      []ledger.Node{{Name: node, FirstSeen: from, LastSeen: to}},
		GPUs:       []ledger.GPU{g0, g1},
		Containers: []ledger.Container{alice, bob, other},
		Usage: []ledger.Usage{
			{Node: node, Start: from, OwnerKind: ledger.KindContainer, OwnerID: alice.ID, GPU: g0.UUID,
				Sums: ledger.Sums{AllocatedSeconds: 60, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 30}},
			{Node: node, Start: from, OwnerKind: ledger.KindContainer, OwnerID: bob.ID, GPU: g1.UUID,
				Sums: ledger.Sums{AllocatedSeconds: 40, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 45}},
			{Node: node, Start: from, OwnerKind: ledger.KindContainer, OwnerID: other.ID, GPU: g1.UUID,
				Sums: ledger.Sums{AllocatedSeconds: 20, HeldSeconds: 60, PresentSeconds: 60, UsedSeconds: 6}},
		},
		GPUUsage: []ledger.GPUUsage{
			{Node: node, Start: from, GPU: g0.UUID, GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 30}},
			{Node: node, Start: from, GPU: g1.UUID, GPUSums: ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 51}},
		},
	}
	if err := store.Write(ctx, b); err != nil {
		t.Fatal(err)
	}

	req := Request{By: ByJob, Since: 2 * time.Hour, Format: "json"}
	if err := req.Validate(to); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, store, store, req, prices())
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Key              string
		Alloc, Used, Eff float64
		User             string
		GPUs             int
		Waited, Ran      *float64
	}
	var got []row
	for _, r := range rep.Rows {
		x := row{Key: r.Key, Alloc: r.GPUHoursAllocated * 3600, Used: r.GPUHoursUsed * 3600, Eff: r.Efficiency}
		if r.Job != nil {
			x.User, x.GPUs, x.Waited, x.Ran = r.Job.User, r.Job.GPUsRequested, r.Job.WaitedSeconds, r.Job.RanSeconds
		}
		got = append(got, x)
	}
	// alice's job: the A100 for 60 s, used half of it; bob's: 40 s of
	// the H100 it shares with carol's notebook, used 45 of the 60 s it
	// held; bob's job still runs at `to`, 1 h 40 min after it started.
	want := []row{
		{ids[0], 60, 30, 0.5, "alice", 1, hours(300), hours(3600)},
		{ids[1], 40, 45, 0.75, "bob", 1, hours(1200), hours(6000)},
		{KeyNotJob, 20, 6, 0.1, "", 0, nil, nil},
	}
	if diff := cmp.Diff(got, want, approx); diff != "" {
		t.Errorf("rows by job from SQLite (-got +want):\n%s", diff)
	}

	if _, err := Run(ctx, store, nil, req, prices()); err == nil || !strings.Contains(err.Error(), "no job store") {
		t.Errorf("by job without a job store: %v, want an error that says so", err)
	}
	req.By = ByUser
	if _, err := Run(ctx, store, nil, req, prices()); err != nil {
		t.Errorf("by user without a job store: %v", err)
	}

	// since=1h at 7 s past a minute reads that minute's rows, and the
	// report's window ends then, not at the next minute.
	at := to.Add(7 * time.Second)
	req = Request{By: ByUser, Since: time.Hour, Format: "json"}
	if err := req.Validate(at); err != nil {
		t.Fatal(err)
	}
	rep, err = Run(ctx, store, nil, req, prices())
	if err != nil {
		t.Fatal(err)
	}
	if want := at.Add(-time.Hour).Truncate(time.Minute); !rep.From.Equal(want) || !rep.To.Equal(at) {
		t.Errorf("since=1h at %s: window %s to %s, want %s to %s", at, rep.From, rep.To, want, at)
	}
}

// TestJobJSONContract checks the job fields docs/design.md promises.
func TestJobJSONContract(t *testing.T) {
	_, _, jobs := jobFixture()
	var b bytes.Buffer
	if err := buildJobs(t, jobs).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	keys := []string{"user", "state", "gpus_requested", "submitted_at", "started_at", "ended_at", "waited_seconds", "ran_seconds"}
	for _, r := range got.Rows {
		job, has := r["job"]
		if isJob := strings.HasPrefix(r["key"].(string), "j-"); isJob != has {
			t.Errorf("row %v: has job %v, want %v", r["key"], has, isJob)
			continue
		}
		if !has {
			continue
		}
		m, _ := job.(map[string]any)
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("row %v: job has no %q", r["key"], k)
			}
		}
	}
}
