package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
)

// fromLabels has three GPUs (10GiB, 100W idle, 300W at 100 %, so
// W = 100 + 2·util) and its own container played by PID 4000 on GPU 0 at
// 60 % and 8GiB.
const fromLabels = `version: 1
node: t
start: 2026-03-01T00:00:00Z
duration: 1h
docker:
  containers: from_labels
gpus:
  - count: 3
    memory: 10GiB
    idle_power: 100W
    max_power: 300W
containers:
  - name: own
    pid: 4000
    gpus: [0]
    phases: [{at: 0s, util: 60, memory: 8GiB}]
`

// lister is the real inventory a test makes up; it may be changed
// between reads.
type lister struct {
	mu   sync.Mutex
	list []container.Container
	err  error
}

func (l *lister) Containers(ctx context.Context, now time.Time) ([]container.Container, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.list, l.err
}

func (l *lister) set(cs ...container.Container) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = cs
}

// realCtr is a running real container with these labels and GPUs.
func realCtr(id string, pid int, gpus container.GPURequest, labels ...string) container.Container {
	m := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		m[labels[i]] = labels[i+1]
	}
	return container.Container{ID: id, Name: "ctr-" + id, Running: true, PID: pid, Labels: m, GPUs: gpus}
}

func ids(ids ...string) container.GPURequest { return container.GPURequest{IDs: ids} }

// playing returns a source of scenario text playing l, and its log.
func playing(t *testing.T, text string, l ContainerLister) (*Source, *bytes.Buffer) {
	t.Helper()
	sc, err := Parse("t.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	var log bytes.Buffer
	src := NewSource(sc, false)
	src.PlayContainers(l, slog.New(slog.NewJSONHandler(&log, nil)))
	return src, &log
}

func TestPlayContainers(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(fromLabels))
	if err != nil {
		t.Fatal(err)
	}
	uuid2 := GPUUUID("t", 2)
	at := sc.Start.Add(time.Minute)
	idle := state{Util: 0, Used: 0, Power: 100}
	own := state{Util: 60, Used: 8 * gib, Power: 220, Processes: ps(proc(4000, 60, 8*gib))}
	tests := []struct {
		name string
		ctr  container.Container
		want []state // without energy
	}{
		{"by index", realCtr("a", 501, ids("1"), UtilLabel, "80", MemoryLabel, "2GiB"),
			[]state{own, {Util: 80, Used: 2 * gib, Power: 260, Processes: ps(proc(501, 80, 2*gib))}, idle}},
		{"by UUID in another case", realCtr("a", 501, ids(strings.ToLower(uuid2)), UtilLabel, "85%"),
			[]state{own, idle, {Util: 85, Power: 270, Processes: ps(proc(501, 85, 0))}}},
		{"all GPUs, memory only", realCtr("a", 501, container.GPURequest{All: true}, MemoryLabel, " 1 GiB "),
			[]state{
				{Util: 60, Used: 9 * gib, Power: 220, Processes: ps(proc(4000, 60, 8*gib), proc(501, 0, gib))},
				{Used: gib, Power: 100, Processes: ps(proc(501, 0, gib))},
				{Used: gib, Power: 100, Processes: ps(proc(501, 0, gib))},
			}},
		{"two of three", realCtr("a", 501, ids("2", "0"), UtilLabel, "12.5 %"),
			[]state{
				{Util: 72.5, Used: 8 * gib, Power: 245, Processes: ps(proc(4000, 60, 8*gib), proc(501, 12.5, 0))},
				idle,
				{Util: 12.5, Power: 125, Processes: ps(proc(501, 12.5, 0))},
			}},
		{"utilisation and memory capped", realCtr("a", 501, ids("0"), UtilLabel, "70", MemoryLabel, "12GiB"),
			[]state{{Util: 100, Used: 10 * gib, Power: 300, Processes: ps(proc(4000, 60, 8*gib), proc(501, 70, 10*gib))}, idle, idle}},
		{"the scenario's own PID plays its phases", realCtr("a", 4000, ids("0", "1"), UtilLabel, "90"),
			[]state{own, idle, idle}},
		{"stopped", func() container.Container {
			c := realCtr("a", 501, ids("1"), UtilLabel, "80")
			c.Running = false
			return c
		}(), []state{own, idle, idle}},
		{"no PID", realCtr("a", 0, ids("1"), UtilLabel, "80"), []state{own, idle, idle}},
		{"no sim labels", realCtr("a", 501, ids("1"), "gpumeter.user", "alice"), []state{own, idle, idle}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, log := playing(t, fromLabels, &lister{list: []container.Container{tt.ctr}})
			sample, err := src.Read(context.Background(), at)
			if err != nil {
				t.Fatal(err)
			}
			got := states(sample)
			for i := range got {
				got[i].EnergyMJ = 0
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			for _, d := range sample.Devices {
				if d.MemoryFree != d.MemoryTotal-d.MemoryUsed {
					t.Errorf("GPU %d: free %d, want total %d - used %d", d.Index, d.MemoryFree, d.MemoryTotal, d.MemoryUsed)
				}
			}
			if log.Len() > 0 {
				t.Errorf("logged %q, want nothing", log)
			}
		})
	}
}

// ps lists a device's processes.
func ps(p ...gpu.Process) []gpu.Process { return p }

func TestPlayContainersBadLabels(t *testing.T) {
	tests := []struct {
		name  string
		ctr   container.Container
		label string // the warning's label and value, "" for none
		value string
		err   string // in its err
	}{
		{"util too high", realCtr("a", 501, ids("1"), UtilLabel, "150", MemoryLabel, "1GiB"), UtilLabel, "150", "150 is outside 0..100"},
		{"util negative", realCtr("a", 501, ids("1"), UtilLabel, "-1"), UtilLabel, "-1", "-1 is outside 0..100"},
		{"util not a number", realCtr("a", 501, ids("1"), UtilLabel, "busy"), UtilLabel, "busy", "want a percentage such as 85 or 85%"},
		{"util NaN", realCtr("a", 501, ids("1"), UtilLabel, "NaN"), UtilLabel, "NaN", "want a percentage"},
		{"util empty", realCtr("a", 501, ids("1"), UtilLabel, ""), UtilLabel, "", "want a percentage"},
		{"memory in GB", realCtr("a", 501, ids("1"), UtilLabel, "50", MemoryLabel, "2GB"), MemoryLabel, "2GB", `unknown unit "GB"`},
		{"memory negative", realCtr("a", 501, ids("1"), MemoryLabel, "-1GiB"), MemoryLabel, "-1GiB", "negative"},
		{"no GPU", realCtr("a", 501, container.GPURequest{}, UtilLabel, "50"), "", "", "was given no GPU"},
		{"GPU not the scenario's", realCtr("a", 501, ids("7", "GPU-nope"), UtilLabel, "50"), "", "", "none of its GPUs (7,GPU-nope) is one of the scenario's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &lister{list: []container.Container{tt.ctr}}
			src, log := playing(t, fromLabels, l)
			sc, _ := Parse("t.yaml", []byte(fromLabels))
			for k := range 3 {
				sample, err := src.Read(context.Background(), sc.Start.Add(time.Duration(k)*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range sample.Devices {
					for _, p := range d.Processes {
						if p.PID == 501 {
							t.Errorf("read %d: GPU %d shows process %+v, want none for a container with a bad label", k, d.Index, p)
						}
					}
				}
			}
			lines := strings.Split(strings.TrimSpace(log.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("logged %d lines over three reads, want 1:\n%s", len(lines), log)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatalf("log line %q: %v", lines[0], err)
			}
			errText, _ := got["err"].(string)
			if !strings.Contains(errText, tt.err) {
				t.Errorf("warning's err = %q, want it to contain %q", errText, tt.err)
			}
			delete(got, "time")
			delete(got, "err")
			want := map[string]any{"level": "WARN", "msg": "sim: container shows no GPU use", "container": "ctr-a", "id": "a"}
			if tt.label != "" {
				want["label"], want["value"] = tt.label, tt.value
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("warning (-want +got):\n%s", diff)
			}
		})
	}
}

// A container warned about is warned about again once it has left the
// list and come back, and the warnings of others do not hide its own.
func TestPlayContainersWarnsPerContainer(t *testing.T) {
	l := &lister{}
	src, log := playing(t, fromLabels, l)
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	read := func() {
		t.Helper()
		now = now.Add(time.Second)
		if _, err := src.Read(context.Background(), now); err != nil {
			t.Fatal(err)
		}
	}
	bad := realCtr("a", 501, ids("1"), UtilLabel, "x")
	l.set(bad, realCtr("b", 502, ids("1"), MemoryLabel, "y"))
	read()
	read()
	l.set()
	read()
	l.set(bad)
	read()
	if got := strings.Count(log.String(), `"container":"ctr-a"`); got != 2 {
		t.Errorf("ctr-a warned about %d times, want 2:\n%s", got, log)
	}
	if got := strings.Count(log.String(), `"container":"ctr-b"`); got != 1 {
		t.Errorf("ctr-b warned about %d times, want 1:\n%s", got, log)
	}
}

// The energy counter grows by the power a container adds, over the time
// between reads, and stays monotonic when the container goes.
func TestPlayContainersEnergy(t *testing.T) {
	l := &lister{}
	src, _ := playing(t, fromLabels, l)
	sc, _ := Parse("t.yaml", []byte(fromLabels))
	bare := NewSource(sc, false)
	energyOf := func(s *Source, at time.Duration) uint64 {
		t.Helper()
		sample, err := s.Read(context.Background(), sc.Start.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return sample.Devices[1].EnergyMilliJoules
	}
	energyOf(src, 10*time.Second)
	l.set(realCtr("a", 501, ids("1"), UtilLabel, "50")) // 100W more
	energyOf(src, 20*time.Second)                       // seen from here on
	l.set()
	for _, tt := range []struct {
		at    time.Duration
		extra uint64 // mJ on top of the scenario's own
	}{
		{30 * time.Second, 1_000_000}, // 100W over 10s
		{40 * time.Second, 1_000_000}, // gone: no more
	} {
		if got, want := energyOf(src, tt.at), energyOf(bare, tt.at)+tt.extra; got != want {
			t.Errorf("energy at %v = %d mJ, want %d", tt.at, got, want)
		}
	}
}

// A scenario without docker.containers: from_labels plays no real
// container, whatever its labels; nor does one whose inventory is down
// with nothing listed.
func TestPlayContainersOff(t *testing.T) {
	for _, text := range []string{
		strings.Replace(fromLabels, "docker:\n  containers: from_labels\n", "", 1),
		strings.Replace(fromLabels, "from_labels", "ignore", 1),
	} {
		l := &lister{list: []container.Container{realCtr("a", 501, ids("1"), UtilLabel, "80")}}
		src, _ := playing(t, text, l)
		sample, err := src.Read(context.Background(), time.Date(2026, 3, 1, 0, 1, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(sample.Devices[1].Processes); n != 0 {
			t.Errorf("GPU 1 shows %d processes without from_labels, want 0", n)
		}
	}
	// The inventory's last list stands while it is down.
	l := &lister{list: []container.Container{realCtr("a", 501, ids("1"), UtilLabel, "80")}, err: errors.New("docker daemon unreachable")}
	src, _ := playing(t, fromLabels, l)
	sample, err := src.Read(context.Background(), time.Date(2026, 3, 1, 0, 1, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sample.Devices[1].Processes); n != 1 {
		t.Errorf("GPU 1 shows %d processes from an inventory that is down, want its last list's 1", n)
	}
}
