package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadStats(t *testing.T) {
	tests := []struct {
		tree string
		pid  int
		want Stats
	}{
		// Captured from a container on a v1 host whose controllers are
		// mounted one per directory (cpuacct, memory). docker stats showed
		// 1.121MiB for it: usage 2650112 - total_inactive_file 1474560.
		{"v1-separate", 5751, Stats{CPUSeconds: 0.062176459, MemoryBytes: 1175552}},
		// The common v1 layout: cpu and cpuacct mounted together.
		{"v1-joint", 4242, Stats{CPUSeconds: 3812.457219034, MemoryBytes: 8589934592 - 1073741824}},
		{"v2-systemd", 4242, Stats{CPUSeconds: 93178.204511, MemoryBytes: 25769803776 - 4294967296}},
		// A v2 host with a v1 name=systemd hierarchy next to it.
		{"v2-name-systemd", 4242, Stats{CPUSeconds: 93178.204511, MemoryBytes: 25769803776 - 4294967296}},
	}
	for _, tt := range tests {
		t.Run(tt.tree, func(t *testing.T) {
			root := filepath.Join("testdata", "stats", tt.tree)
			got, err := ReadStats(filepath.Join(root, "proc"), filepath.Join(root, "cgroup"), tt.pid)
			if err != nil {
				t.Fatalf("ReadStats: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadStats mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadStatsMemory(t *testing.T) {
	tests := []struct {
		name     string
		usage    string
		stat     string
		want     uint64
		wantErrs string
	}{
		{"inactive below usage", "1000\n", "total_inactive_file 300\ninactive_file 100\n", 700, ""},
		{"v1 falls back to inactive_file", "1000\n", "cache 5\ninactive_file 100\n", 900, ""},
		{"inactive above usage", "1000\n", "total_inactive_file 3000\n", 1000, ""},
		{"no inactive key", "1000\n", "cache 5\n", 0, "no total_inactive_file or inactive_file"},
		{"bad usage", "lots\n", "total_inactive_file 1\n", 0, `"lots" is not a number`},
		{"bad inactive", "1000\n", "total_inactive_file x\n", 0, `total_inactive_file "x" is not a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			writeFile(t, filepath.Join(proc, "7", "cgroup"), "3:memory:/docker/"+testID+"\n2:cpuacct:/docker/"+testID+"\n")
			dir := filepath.Join(cg, "memory", "docker", testID)
			writeFile(t, filepath.Join(dir, "memory.usage_in_bytes"), tt.usage)
			writeFile(t, filepath.Join(dir, "memory.stat"), tt.stat)
			writeFile(t, filepath.Join(cg, "cpuacct", "docker", testID, "cpuacct.usage"), "5000000000\n")
			got, err := ReadStats(proc, cg, 7)
			if tt.wantErrs != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrs) {
					t.Fatalf("ReadStats = %+v, %v; want an error containing %q", got, err, tt.wantErrs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Stats{CPUSeconds: 5, MemoryBytes: tt.want}, got); diff != "" {
				t.Errorf("ReadStats mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadStatsErrors(t *testing.T) {
	v2 := "0::/system.slice/docker-" + testID + ".scope\n"
	scope := filepath.Join("system.slice", "docker-"+testID+".scope")
	tests := []struct {
		name    string
		cgroup  string            // /proc/7/cgroup; "" for none
		files   map[string]string // under the cgroup root
		wantErr string
		gone    bool
	}{
		{name: "no process", gone: true, wantErr: "no such process"},
		{name: "bad cgroup file", cgroup: "junk\n", wantErr: "line 1: want hierarchy-ID:controllers:path"},
		{name: "cgroup removed", cgroup: v2, wantErr: "no such file or directory"},
		{name: "outside the cgroup namespace", cgroup: "0::/../docker-" + testID + ".scope\n",
			wantErr: "outside this cgroup namespace"},
		{name: "no cpu hierarchy", cgroup: "4:memory:/docker/" + testID + "\n", wantErr: "names no cpuacct or v2 cgroup"},
		{name: "no memory hierarchy", cgroup: "2:cpuacct:/\n",
			files: map[string]string{"cpuacct/cpuacct.usage": "1\n"}, wantErr: "names no memory or v2 cgroup"},
		{name: "cpu.stat without usage", cgroup: v2,
			files:   map[string]string{filepath.Join(scope, "cpu.stat"): "user_usec 5\n"},
			wantErr: "no usage_usec"},
		{name: "cpuacct.usage garbage", cgroup: "2:cpuacct:/\n4:memory:/\n",
			files: map[string]string{"cpuacct/cpuacct.usage": "\x00\x01\n"}, wantErr: "is not a number"},
		{name: "no memory.current", cgroup: v2,
			files:   map[string]string{filepath.Join(scope, "cpu.stat"): "usage_usec 5\n"},
			wantErr: "memory: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			if tt.cgroup != "" {
				writeFile(t, filepath.Join(proc, "7", "cgroup"), tt.cgroup)
			}
			for name, content := range tt.files {
				writeFile(t, filepath.Join(cg, name), content)
			}
			got, err := ReadStats(proc, cg, 7)
			if err == nil {
				t.Fatalf("ReadStats = %+v, nil; want an error", got)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ReadStats error = %q, want it to contain %q", err, tt.wantErr)
			}
			if errors.Is(err, ErrNoProcess) != tt.gone {
				t.Errorf("errors.Is(%q, ErrNoProcess) = %t, want %t", err, !tt.gone, tt.gone)
			}
			if got != (Stats{}) {
				t.Errorf("ReadStats = %+v with an error, want Stats{}", got)
			}
		})
	}
	if _, err := ReadStats(t.TempDir(), t.TempDir(), 0); err == nil {
		t.Error("ReadStats(pid 0) = nil error")
	}
}

// TestReadStatsSelf reads the test process's own cgroup on this machine.
func TestReadStatsSelf(t *testing.T) {
	const root = "/sys/fs/cgroup"
	if _, err := os.ReadDir(root); err != nil {
		t.Skipf("%s is not readable here (%v): no cgroup filesystem to read", root, err)
	}
	got, err := ReadStats("/proc", root, os.Getpid())
	if err != nil {
		t.Fatalf("ReadStats(self): %v", err)
	}
	if got.CPUSeconds <= 0 {
		t.Errorf("ReadStats(self).CPUSeconds = %v, want > 0", got.CPUSeconds)
	}
	t.Logf("own cgroup: %+v", got)
}

func BenchmarkReadStats(b *testing.B) {
	for _, tree := range []string{"v1-joint", "v2-systemd"} {
		root := filepath.Join("testdata", "stats", tree)
		b.Run(tree, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ReadStats(filepath.Join(root, "proc"), filepath.Join(root, "cgroup"), 4242); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
