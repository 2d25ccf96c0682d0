package report

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// checkInvariants checks the identities the package documents, to tol
// relative to the host's cost (or hours, or energy).
func checkInvariants(t *testing.T, r *Report, tol float64) {
	t.Helper()
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > tol*max(1, math.Abs(want)) {
			t.Errorf("%s: %v, want %v (off by %g)", what, got, want, got-want)
		}
	}
	var rowsCost, share, hours, kWh float64
	for i, row := range r.Rows {
		near("row "+row.Key+" cost = Σ parts", row.Cost, row.CostGPU+row.CostCPU+row.CostRAM+row.CostEnergy+row.CostIdleShare)
		rowsCost += row.Cost
		share += row.CostIdleShare
		hours += row.GPUHoursAllocated
		kWh += row.EnergyKWh
		if i > 0 {
			p := r.Rows[i-1]
			if p.Cost < row.Cost || p.Cost == row.Cost && p.Key >= row.Key {
				t.Errorf("rows %q (%v) and %q (%v) out of order", p.Key, p.Cost, row.Key, row.Cost)
			}
		}
	}
	near("totals cost = Σ rows", r.Totals.Cost, rowsCost)
	for _, row := range append([]Row{r.Totals}, r.Rows...) {
		// Efficiency is within 0..1 (to the 12 digits a report keeps).
		if row.Efficiency < 0 || row.Efficiency > 1+1e-11 {
			t.Errorf("row %s: efficiency %v, want within 0..1", row.Key, row.Efficiency)
		}
		if row.GPUHoursHeld != nil && *row.GPUHoursHeld < 0 || row.GPUHoursHeld == nil && row.Efficiency != 0 {
			t.Errorf("row %s: held %v, efficiency %v", row.Key, row.GPUHoursHeld, row.Efficiency)
		}
	}
	if r.Filtered {
		return
	}
	if r.Idle.Shared {
		near("Σ rows' idle share = idle cost", share, r.Idle.Cost)
		near("Σ rows' cost + unbilled = host cost", rowsCost+r.Unbilled.Cost, r.Host.Cost)
	} else {
		if share != 0 {
			t.Errorf("idle not shared, yet rows carry %v of it", share)
		}
		near("Σ rows' cost + idle + unbilled = host cost", rowsCost+r.Idle.Cost+r.Unbilled.Cost, r.Host.Cost)
	}
	if r.Basis == cost.BasisAllocated && r.Unbilled != (Unbilled{}) {
		t.Errorf("basis allocated, yet unbilled %+v", r.Unbilled)
	}
	near("Σ rows' allocated + idle GPU-hours = host GPU-hours", hours+r.Idle.GPUHours, r.Host.GPUHours)
	near("Σ rows' energy + idle = host energy", kWh+r.Idle.EnergyKWh, r.Host.EnergyKWh)
}

var models = []string{a100, h100, "Tesla T4", "NVIDIA L4"} // the L4 has no price of its own

func randomModel() cost.Model {
	return cost.Model{
		Currency:    "EUR",
		GPUHour:     map[string]float64{a100: 1.9, h100: 3.1, "Tesla T4": 0.35, cost.DefaultPrice: 0.8},
		CPUCoreHour: 0.021, RAMGBHour: 0.0037, KWh: 0.27, PUE: 1.3,
		Weights: map[string]float64{cost.WeightGPU: 1.5, cost.WeightCPU: 1, cost.WeightRAM: 0.5, cost.WeightEnergy: 2},
	}
}

const day = 24 * 3600

// randomLedger is one day of three nodes with four GPUs each and n
// containers, consistent as the meter keeps it: each GPU's day is held by
// up to four containers or idle, its holders' allocated seconds add up to
// its AllocatedSeconds, and owners' energy plus the idle pool is its
// energy. Host processes and unattributed use come on top.
func randomLedger(seed uint64, n int) ([]ledger.UsageTotal, []ledger.GPUTotal) {
	rng := rand.New(rand.NewPCG(seed, seed))
	nodes := []string{"n1", "n2", "n3"}
	var containers []*ledger.Container
	for i := range n {
		node := nodes[rng.IntN(len(nodes))]
		name := fmt.Sprintf("job-%d", i)
		if rng.IntN(10) == 0 {
			name = "dup" // names collide
		}
		team := fmt.Sprintf("team-%d", rng.IntN(4))
		if rng.IntN(8) == 0 {
			team = ""
		}
		containers = append(containers, &ledger.Container{
			Node: node, ID: fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64()), Name: name,
			Image:  fmt.Sprintf("image-%d", rng.IntN(5)),
			Labels: map[string]string{"run": fmt.Sprint(i)},
			User:   fmt.Sprintf("u%d", rng.IntN(8)), Team: team, Project: fmt.Sprintf("p%d", rng.IntN(3)),
		})
	}
	var usage []ledger.UsageTotal
	var gpus []ledger.GPUTotal
	for _, node := range nodes {
		var here []*ledger.Container
		for _, c := range containers {
			if c.Node == node {
				here = append(here, c)
			}
		}
		for i := range 4 {
			g := ledger.GPU{Node: node, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Index: i, Model: models[rng.IntN(len(models))]}
			tot := ledger.GPUTotal{GPU: g, GPUSums: ledger.GPUSums{Seconds: day}}
			perm := rng.Perm(len(here))
			holders := min(rng.IntN(5), len(here))
			tot.IdleSeconds = day
			if holders > 0 {
				tot.IdleSeconds = math.Round(day * rng.Float64() * 0.5)
			}
			tot.AllocatedSeconds = day - tot.IdleSeconds
			record := func(kind, id string, c *ledger.Container, s ledger.Sums) {
				usage = append(usage, ledger.UsageTotal{Node: node, OwnerKind: kind, OwnerID: id, GPU: g, Container: c, Sums: s})
				tot.EnergyJoules += s.EnergyJoules
				tot.UsedSeconds += s.UsedSeconds
			}
			left := tot.AllocatedSeconds
			for h := range holders {
				c := here[perm[h]]
				alloc := left
				if h < holders-1 {
					alloc = math.Round(left * rng.Float64())
				}
				left -= alloc
				present := alloc * rng.Float64()
				// Every holder holds the GPU for all of its allocated time.
				s := ledger.Sums{
					AllocatedSeconds: alloc, HeldSeconds: tot.AllocatedSeconds, PresentSeconds: present, UsedSeconds: present * rng.Float64(),
					EnergyJoules: alloc * 300 * rng.Float64(), PeakMemoryBytes: rng.Uint64N(80 * gib), PeakUtil: 100 * rng.Float64(),
				}
				var unheld ledger.Unheld
				switch rng.IntN(8) {
				case 0: // written before held seconds: none known
					unheld = ledger.Unheld{Rows: 3, All: true, UsedSeconds: s.UsedSeconds}
					s.HeldSeconds = 0
				case 1: // partly: the part without held seconds took f of the time
					f := rng.Float64()
					unheld = ledger.Unheld{Rows: 1, UsedSeconds: s.UsedSeconds * f}
					s.HeldSeconds *= 1 - f
				}
				record(ledger.KindContainer, c.ID, c, s)
				usage[len(usage)-1].Unheld = unheld
			}
			if rng.IntN(2) == 0 {
				present := day * 0.2 * rng.Float64()
				record(ledger.KindHost, fmt.Sprintf("user%d", rng.IntN(3)), nil, ledger.Sums{
					PresentSeconds: present, UsedSeconds: present * rng.Float64(), EnergyJoules: present * 200 * rng.Float64(),
					PeakMemoryBytes: rng.Uint64N(8 * gib), PeakUtil: 100 * rng.Float64(),
				})
			}
			if rng.IntN(3) == 0 {
				used := 600 * rng.Float64()
				record(ledger.KindNone, "", nil, ledger.Sums{UsedSeconds: used, EnergyJoules: used * 100})
				tot.UnattributedSeconds = used
			}
			tot.IdleEnergyJoules = tot.IdleSeconds * 60 * rng.Float64()
			tot.EnergyJoules += tot.IdleEnergyJoules
			gpus = append(gpus, tot)
		}
	}
	// Containers that held no GPU still ran: one row with the zero GPU.
	held := map[string]bool{}
	for _, u := range usage {
		held[u.OwnerID] = true
	}
	for _, c := range containers {
		if !held[c.ID] {
			usage = append(usage, ledger.UsageTotal{Node: c.Node, OwnerKind: ledger.KindContainer, OwnerID: c.ID, Container: c})
		}
	}
	// The store's order, and CPU and RAM on each container's first row.
	slices.SortStableFunc(usage, func(a, b ledger.UsageTotal) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.OwnerKind, b.OwnerKind),
			cmp.Compare(a.OwnerID, b.OwnerID), cmp.Compare(a.GPU.UUID, b.GPU.UUID))
	})
	for i := range usage {
		u := &usage[i]
		if u.OwnerKind == ledger.KindContainer && (i == 0 || usage[i-1].OwnerID != u.OwnerID) {
			u.CPUSeconds = day * 16 * rng.Float64()
			u.RAMByteSeconds = day * 64 * gib * rng.Float64()
		}
	}
	return usage, gpus
}

// TestInvariantsRandom checks the documented identities on random
// ledgers for every basis, idle policy and grouping.
func TestInvariantsRandom(t *testing.T) {
	for seed := range uint64(20) {
		usage, gpus := randomLedger(seed, 10+int(seed)*15)
		window := from.Add(day * time.Second)
		for _, basis := range []string{cost.BasisAllocated, cost.BasisPresent, cost.BasisUsed} {
			for _, idle := range []string{cost.IdleNone, cost.IdleWeighted, cost.IdleEven} {
				m := randomModel()
				m.Basis, m.Idle = basis, idle
				for _, by := range Groupings() {
					t.Run(fmt.Sprintf("%d/%s/%s/%s", seed, basis, idle, by), func(t *testing.T) {
						r, err := Build(usage, gpus, Options{By: by, From: from, To: window, Cost: m})
						if err != nil {
							t.Fatal(err)
						}
						checkInvariants(t, r, 1e-9)
						// The ledger covers the whole window: every GPU's every hour
						// is someone's or idle.
						var hours float64
						for _, row := range r.Rows {
							hours += row.GPUHoursAllocated
						}
						if want := float64(len(gpus)) * 24; math.Abs(hours+r.Idle.GPUHours-want) > 1e-9*want {
							t.Errorf("allocated %v + idle %v GPU-hours, want %d GPUs × 24 h = %v", hours, r.Idle.GPUHours, len(gpus), want)
						}
						if (idle != cost.IdleNone) != r.Idle.Shared {
							t.Errorf("idle policy %s: Shared = %v", idle, r.Idle.Shared)
						}
					})
				}
			}
		}
	}
}

// TestFilterKeepsRows wants a filtered report to show the rows the
// unfiltered one does, for groupings inside one user.
func TestFilterKeepsRows(t *testing.T) {
	usage, gpus := randomLedger(3, 120)
	for _, idle := range []string{cost.IdleNone, cost.IdleWeighted, cost.IdleEven} {
		m := randomModel()
		m.Idle = idle
		for _, by := range []string{ByUser, ByContainer} {
			all, err := Build(usage, gpus, Options{By: by, Cost: m})
			if err != nil {
				t.Fatal(err)
			}
			some, err := Build(usage, gpus, Options{By: by, Cost: m, Filter: func(u *ledger.UsageTotal) bool {
				return u.Container != nil && u.Container.User == "u3"
			}})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]Row{}
			for _, row := range all.Rows {
				want[row.Key] = row
			}
			if len(some.Rows) == 0 {
				t.Fatalf("%s by %s: no rows for u3", idle, by)
			}
			for _, row := range some.Rows {
				if diff := gocmp.Diff(row, want[row.Key], approx); diff != "" {
					t.Errorf("%s by %s: row %q (-filtered +unfiltered):\n%s", idle, by, row.Key, diff)
				}
			}
			if diff := gocmp.Diff(some.Host, all.Host); diff != "" {
				t.Errorf("%s by %s: host (-filtered +unfiltered):\n%s", idle, by, diff)
			}
		}
	}
}
