package sqlledger

import (
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/queue"
)

// The columns as earlier versions wrote them: a ledger keeps them, so the
// encoding is held byte for byte, and what they hold reads back.
const (
	requestGolden = `{"gpus":2,"gpu_memory":21474836480,"class":"high","time_limit":"4h","image":"img:1","name":"train",` +
		`"env_keys":["TOKEN"],"mounts":["/data/a:/data:ro"],"workdir":"/w","cpus":2.5,"memory":34359738368,"shm_size":8589934592,` +
		`"pids":512,"publish":["8080:80"],"labels":["gpumeter.project=seg"],"command":["python","train.py"],"notify":["start","end"]}`
	placementGolden = `{"policy":"target","candidates":[{"uuid":"GPU-1","index":1,"score":97.5,"util":0.725,"chosen":true},` +
		`{"uuid":"GPU-0","index":0,"score":40,"util":1.3,"chosen":false}]}`
)

func goldenJob() queue.Job {
	return queue.Job{
		Name: "train", GPUsRequested: 2, Image: "img:1", Command: []string{"python", "train.py"}, EnvKeys: []string{"TOKEN"},
		TimeLimit: 4 * time.Hour,
		Request: &queue.Request{GPUMemory: 20 << 30, Class: queue.ClassHigh, Mounts: []string{"/data/a:/data:ro"}, Workdir: "/w",
			CPUs: 2.5, Memory: 32 << 30, ShmSize: 8 << 30, Pids: 512, Publish: []string{"8080:80"},
			Labels: []string{"gpumeter.project=seg"}, Notify: []string{"start", "end"}},
		Placement: &queue.PlacementRecord{Policy: queue.Target, Candidates: []queue.Candidate{
			{UUID: "GPU-1", Index: 1, Score: 97.5, Util: 0.725, Chosen: true},
			{UUID: "GPU-0", Index: 0, Score: 40, Util: 1.3},
		}},
	}
}

func TestRequestColumn(t *testing.T) {
	j := goldenJob()
	got, err := requestColumn(j)
	if err != nil || got != requestGolden {
		t.Errorf("requestColumn = %s, %v\nwant %s", got, err, requestGolden)
	}
	if d := gocmp.Diff(j.Request, requestOf(requestGolden)); d != "" {
		t.Errorf("requestOf(golden) (-want +got):\n%s", d)
	}
	if got, _ := requestColumn(queue.Job{}); got != "null" {
		t.Errorf("requestColumn of a job without a request = %s, want null", got)
	}
	for _, s := range []string{"", "null", "{", `{"gpus":"two"}`} {
		if r := requestOf(s); r != nil {
			t.Errorf("requestOf(%q) = %+v, want nil", s, r)
		}
	}
}

func TestPlacementColumn(t *testing.T) {
	j := goldenJob()
	if got := placementColumn(j.Placement); got != placementGolden {
		t.Errorf("placementColumn = %v\nwant %s", got, placementGolden)
	}
	s := placementGolden
	if d := gocmp.Diff(j.Placement, placementOf(&s)); d != "" {
		t.Errorf("placementOf(golden) (-want +got):\n%s", d)
	}
	if got := placementColumn(nil); got != nil {
		t.Errorf("placementColumn(nil) = %v, want NULL", got)
	}
	for _, s := range []string{"null", "[", `{"policy":1}`} {
		if p := placementOf(&s); p != nil {
			t.Errorf("placementOf(%q) = %+v, want nil", s, p)
		}
	}
}

// TestRequestColumnWorkflow: the fields of arrays, dependencies,
// preemption and requeue go in the request column's JSON and read back;
// a row without them (requestGolden) reads as a job of its own.
func TestRequestColumnWorkflow(t *testing.T) {
	j := goldenJob()
	j.Request.Array = &queue.ArrayTask{ID: "j-000010", Index: 3, Count: 8, MaxRunning: 2}
	j.Request.After = []queue.Dependency{{Type: queue.AfterOK, ID: "j-000004"}, {Type: queue.AfterFail, ID: "j-000010"}}
	j.Request.Preemptible, j.Request.RequeueFailed = true, true
	j.Request.RequeueOf, j.Request.Attempt = "j-000002", 2
	col, err := requestColumn(j)
	if err != nil {
		t.Fatal(err)
	}
	want := requestGolden[:len(requestGolden)-1] + `,"array":{"id":"j-000010","index":3,"count":8,"max_running":2},` +
		`"after":[{"type":"ok","id":"j-000004"},{"type":"fail","id":"j-000010"}],"preemptible":true,"requeue_failed":true,` +
		`"requeue_of":"j-000002","attempt":2}`
	if col != want {
		t.Errorf("requestColumn = %s\nwant %s", col, want)
	}
	if d := gocmp.Diff(j.Request, requestOf(col)); d != "" {
		t.Errorf("requestOf(column) (-want +got):\n%s", d)
	}
	if r := requestOf(requestGolden); r.Array != nil || r.After != nil || r.Preemptible || r.RequeueOf != "" || r.Attempt != 0 {
		t.Errorf("an earlier row reads as %+v, want no array, dependency, preemption or requeue", r)
	}
}

// TestColumnsFleet: a fleet job's constraints and its placement's nodes
// go in the columns' JSON and read back; one host's rows (the goldens)
// keep their bytes.
func TestColumnsFleet(t *testing.T) {
	j := goldenJob()
	j.Request.Node, j.Request.Model = "gpu-*", "*H100*"
	col, err := requestColumn(j)
	if err != nil {
		t.Fatal(err)
	}
	if want := requestGolden[:len(requestGolden)-1] + `,"node":"gpu-*","model":"*H100*"}`; col != want {
		t.Errorf("requestColumn = %s\nwant %s", col, want)
	}
	if d := gocmp.Diff(j.Request, requestOf(col)); d != "" {
		t.Errorf("requestOf(column) (-want +got):\n%s", d)
	}
	p := j.Placement
	for i := range p.Candidates {
		p.Candidates[i].Node = "gpu-2"
	}
	p.Nodes = []queue.NodeCandidate{{Node: "gpu-2", Score: 97.5, Util: 0.725, Chosen: true}, {Node: "gpu-1", Score: 12, Util: 0.95}}
	got, ok := placementColumn(p).(string)
	want := `{"policy":"target","candidates":[{"uuid":"GPU-1","index":1,"node":"gpu-2","score":97.5,"util":0.725,"chosen":true},` +
		`{"uuid":"GPU-0","index":0,"node":"gpu-2","score":40,"util":1.3,"chosen":false}],` +
		`"nodes":[{"node":"gpu-2","score":97.5,"util":0.725,"chosen":true},{"node":"gpu-1","score":12,"util":0.95,"chosen":false}]}`
	if !ok || got != want {
		t.Errorf("placementColumn = %v\nwant %s", got, want)
	}
	if d := gocmp.Diff(p, placementOf(&got)); d != "" {
		t.Errorf("placementOf(column) (-want +got):\n%s", d)
	}
}
