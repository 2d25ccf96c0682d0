package docker

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mcontainer "github.com/moby/moby/api/types/container"

	"github.com/gpumeter/gpumeter/internal/container"
)

// fakeProcs is a ProcReader with fixed answers.
type fakeProcs struct {
	owners map[int]string // pid -> user
	names  map[int]string // uid -> user
	cpu    float64
	mem    uint64
	err    error
}

func (f fakeProcs) ProcessUser(pid int) (string, error) {
	if u, ok := f.owners[pid]; ok {
		return u, nil
	}
	return "", errors.New("no such process")
}

func (f fakeProcs) UserName(uid int) string { return f.names[uid] }

func (f fakeProcs) Stats(int) (float64, uint64, error) { return f.cpu, f.mem, f.err }

func newTestInventory(t testing.TB, cfg Config) *Inventory {
	t.Helper()
	// Nothing listens here: tests that use this never reach a daemon.
	return New(newClient(t, "unix://"+t.TempDir()+"/none.sock"), cfg)
}

func TestFromInspect(t *testing.T) {
	procs := fakeProcs{
		owners: map[int]string{100: "carol", 200: "root"},
		names:  map[int]string{1000: "bob"},
	}
	running := func(pid int) *mcontainer.State {
		return &mcontainer.State{Status: "running", Running: true, Pid: pid, StartedAt: "2026-01-02T03:04:05.123456789Z", FinishedAt: "0001-01-01T00:00:00Z"}
	}
	exited := &mcontainer.State{Status: "exited", ExitCode: 137, StartedAt: "2026-01-02T03:04:05Z", FinishedAt: "2026-01-02T04:00:00.5Z"}
	inspect := func(state *mcontainer.State, user string, labels map[string]string) *mcontainer.InspectResponse {
		return &mcontainer.InspectResponse{
			ID:     "c0ffee",
			Name:   "/job",
			State:  state,
			Config: &mcontainer.Config{Image: "pytorch:latest", User: user, Labels: labels},
		}
	}
	started := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

	tests := []struct {
		name  string
		cfg   Config
		procs ProcReader
		in    *mcontainer.InspectResponse
		prev  *container.Container
		want  container.Container
	}{
		{
			name:  "labels",
			procs: procs,
			in:    inspect(running(100), "1000", map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp", "gpumeter.project": "llm", "com.docker.compose.project": "x"}),
			want: container.Container{
				ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 100, StartedAt: started,
				Labels: map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp", "gpumeter.project": "llm", "com.docker.compose.project": "x"},
				User:   "alice", Team: "nlp", Project: "llm",
			},
		},
		{
			name:  "configured label keys and compose project",
			cfg:   Config{UserLabel: "owner", TeamLabel: "group", ProjectLabel: "proj"},
			procs: procs,
			in:    inspect(running(100), "", map[string]string{"owner": "dave", "group": "cv", "gpumeter.user": "alice", "com.docker.compose.project": "stack"}),
			want: container.Container{
				ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 100, StartedAt: started,
				Labels: map[string]string{"owner": "dave", "group": "cv", "gpumeter.user": "alice", "com.docker.compose.project": "stack"},
				User:   "dave", Team: "cv", Project: "stack",
			},
		},
		{
			name:  "numeric config user through passwd",
			procs: procs,
			in:    inspect(running(100), "1000:1000", nil),
			want:  container.Container{ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 100, StartedAt: started, User: "bob"},
		},
		{
			name:  "numeric config user unknown to passwd",
			procs: procs,
			in:    inspect(running(100), "4242", nil),
			want:  container.Container{ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 100, StartedAt: started, User: "4242"},
		},
		{
			name:  "config user name with group",
			procs: procs,
			in:    inspect(running(100), "erin:staff", nil),
			want:  container.Container{ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 100, StartedAt: started, User: "erin"},
		},
		{
			name: "numeric config user without procs",
			in:   inspect(running(100), "1000", nil),
			want: container.Container{ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 100, StartedAt: started, User: "1000"},
		},
		{
			name:  "owner of main process",
			procs: procs,
			in:    inspect(running(200), "", nil),
			want:  container.Container{ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 200, StartedAt: started, User: "root"},
		},
		{
			name:  "main process unreadable",
			procs: procs,
			in:    inspect(running(300), "", nil),
			want:  container.Container{ID: "c0ffee", Name: "job", Image: "pytorch:latest", Running: true, PID: 300, StartedAt: started},
		},
		{
			name:  "stopped keeps the owner found while running",
			procs: procs,
			in:    inspect(exited, "", nil),
			prev:  &container.Container{ID: "c0ffee", User: "root"},
			want: container.Container{
				ID: "c0ffee", Name: "job", Image: "pytorch:latest", StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
				FinishedAt: time.Date(2026, 1, 2, 4, 0, 0, 5e8, time.UTC), ExitCode: 137, User: "root",
			},
		},
		{
			name:  "gpus from host config and env",
			procs: procs,
			in: &mcontainer.InspectResponse{
				ID: "c0ffee", Name: "/job", State: running(100),
				Config: &mcontainer.Config{Image: "cuda", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
				HostConfig: &mcontainer.HostConfig{Resources: mcontainer.Resources{
					DeviceRequests: []mcontainer.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"0", "GPU-abc"}}},
				}},
			},
			want: container.Container{
				ID: "c0ffee", Name: "job", Image: "cuda", Running: true, PID: 100, StartedAt: started, User: "carol",
				GPUs: container.GPURequest{IDs: []string{"0", "GPU-abc"}},
			},
		},
		{
			name:  "odd data: no state, no config",
			procs: procs,
			in:    &mcontainer.InspectResponse{ID: "c0ffee"},
			want:  container.Container{ID: "c0ffee"},
		},
		{
			name:  "odd data: bad timestamps",
			procs: procs,
			in:    inspect(&mcontainer.State{StartedAt: "yesterday", FinishedAt: ""}, "", nil),
			want:  container.Container{ID: "c0ffee", Name: "job", Image: "pytorch:latest"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Procs = tt.procs
			inv := newTestInventory(t, cfg)
			got := inv.fromInspect(tt.in, tt.prev)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fromInspect() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
