package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// schema11Job is a running job as a ledger at schema version 11 holds
// it, before allocations existed; it takes the job's number, its user,
// its GPUs and request (JSON) and the backend's boolean literal.
const schema11Job = `INSERT INTO jobs (seq, id, node, name, user_name, team, state, reason, reason_text, gpus_requested, gpus, image,
	command, env_keys, request, time_limit_us, submitted_us, started_us, ended_us, exit_code, container_id, held, attempts,
	requeues, updated_us, rev, placement) VALUES (%[1]d, 'j-00000%[1]d', 'node-a', 'train', '%[2]s', 'nlp', 'running', '', '',
	1, '%[3]s', 'localhost/sleeper:1', '["/sleeper"]', '[]', '%[4]s', 3600000000, 1741593600000000,
	1741593660000000, NULL, NULL, '', %[5]s, 1, 0, 1741593660000000, 1, NULL)`

// Schema11Jobs are the statements a backend's upgrade test runs on a
// ledger at schema version 11, given the backend's boolean literal for
// false: two jobs that an older release let run on GPU A whole at once,
// and a memory job on GPU B.
func Schema11Jobs(falseLiteral string) []string {
	whole := `{"gpus":1,"time_limit":"1h","image":"localhost/sleeper:1"}`
	mem := `{"gpus":0,"gpu_memory":4294967296,"time_limit":"1h","image":"localhost/sleeper:1"}`
	return []string{
		"UPDATE job_sequence SET last = 3",
		fmt.Sprintf(schema11Job, 1, "alice", `["`+gpuA+`"]`, whole, falseLiteral),
		fmt.Sprintf(schema11Job, 2, "bob", `["`+gpuA+`"]`, whole, falseLiteral),
		fmt.Sprintf(schema11Job, 3, "carol", `["`+gpuB+`"]`, mem, falseLiteral),
	}
}

// AfterSchema11 checks a store opened on a ledger at schema version 11
// holding Schema11Jobs: the migration gave the running jobs their
// allocations (the first of the two on GPU A keeps it, and the migration
// does not fail on the second), so that a new job may not take either
// GPU, and the jobs end as before.
func AfterSchema11(t *testing.T, s ledger.Ledger) {
	t.Helper()
	ctx := context.Background()
	checkAllocations(t, s, "after the upgrade", map[ledger.NodeGPUKey]string{{Node: nodeA, UUID: gpuA}: "j-000001"})
	j := submit(t, s, newJob("dave"))
	for _, g := range []string{gpuA, gpuB} {
		_, err := s.UpdateJob(ctx, j.ID, jobQueued, func(x *queue.Job) { x.State, x.GPUs = jobStarting, []string{g} }, audit.Event{})
		if !errors.Is(err, ledger.ErrDoubleAllocation) {
			t.Errorf("a new job on GPU %s of a version 11 job: %v, want ErrDoubleAllocation", g, err)
		}
	}
	for _, id := range []string{"j-000001", "j-000002", "j-000003"} {
		if _, err := s.UpdateJob(ctx, id, jobRunning, func(x *queue.Job) { x.State = jobSucceeded }, audit.Event{}); err != nil {
			t.Errorf("end the version 11 job %s: %v", id, err)
		}
	}
	checkAllocations(t, s, "once the version 11 jobs ended", nil)
}
