package ledgertest

import (
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// Schema8GPU are the statements a backend's upgrade test runs on a ledger
// at schema version 8, before GPU rows kept sampled figures: GPU A of
// node A with a minute row at t0 and its hour row, in both backends' SQL.
var Schema8GPU = []string{
	"INSERT INTO nodes (name) VALUES ('" + nodeA + "')",
	"INSERT INTO gpus (node_id, uuid, idx, model, memory_total) SELECT id, '" + gpuA + "', 0, 'NVIDIA H100 80GB HBM3', 85899345920 FROM nodes",
	`INSERT INTO gpu_minute (start, gpu_id, seconds_us, allocated_us, idle_us, used_us, unattributed_us, energy_mj, idle_energy_mj, peak_util_cpct)
		SELECT 1741593600, id, 60000000, 60000000, 0, 30000000, 0, 12000000, 0, 9000 FROM gpus`,
	`INSERT INTO gpu_hour (start, gpu_id, seconds_us, allocated_us, idle_us, used_us, unattributed_us, energy_mj, idle_energy_mj, peak_util_cpct)
		SELECT 1741593600, id, 60000000, 60000000, 0, 30000000, 0, 12000000, 0, 9000 FROM gpus`,
}

// AfterSchema8 checks a store opened on a ledger at schema version 8
// holding Schema8GPU: the GPU's sums read as before and its rows, which
// hold no readings, give no GPU series points; readings written into the
// same minute afterwards are the only ones its point holds.
func AfterSchema8(t *testing.T, s ledger.Ledger) {
	t.Helper()
	f := ledger.Filter{From: at(0, 0), To: at(1, 0)}
	wantSums := ledger.GPUSums{Seconds: 60, AllocatedSeconds: 60, UsedSeconds: 30, EnergyJoules: 12000, PeakUtil: 90}
	if d := gocmp.Diff([]ledger.GPUTotal{{GPU: gpuMetaA, GPUSums: wantSums}}, readGPUs(t, s, f)); d != "" {
		t.Errorf("version 8 GPU sums after the upgrade (-want +got):\n%s", d)
	}
	for _, step := range []time.Duration{time.Minute, time.Hour} {
		if got := gpuSeries(t, s, nodeA, at(0, 0), at(1, 0), step); len(got) != 0 {
			t.Errorf("GPU series (step %v) of version 8 rows: %+v, want none", step, got)
		}
	}
	write(t, s, ledger.Batch{GPUUsage: []ledger.GPUUsage{gpuRow(nodeA, gpuA, at(0, 0), gauges(2, 50, 1<<30, 250, 60))}})
	wantSums.Seconds++
	if d := gocmp.Diff([]ledger.GPUTotal{{GPU: gpuMetaA, GPUSums: wantSums}}, readGPUs(t, s, f)); d != "" {
		t.Errorf("GPU sums after adding to a version 8 row (-want +got):\n%s", d)
	}
	point := ledger.GPUPoint{Start: at(0, 0), Samples: 2, UtilMean: 50, UtilMax: 50, MemoryMean: 1 << 30, MemoryMax: 1 << 30,
		PowerMean: 250, PowerMax: 250, TempMean: 60, TempMax: 60}
	for _, step := range []time.Duration{time.Minute, time.Hour} {
		want := []ledger.GPUHistory{{GPU: gpuMetaA, Points: []ledger.GPUPoint{point}}}
		if d := gocmp.Diff(want, gpuSeries(t, s, nodeA, at(0, 0), at(1, 0), step)); d != "" {
			t.Errorf("GPU series (step %v) after adding to a version 8 row (-want +got):\n%s", step, d)
		}
	}
}
