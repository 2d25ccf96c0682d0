// Containers' CPU time and RAM, booked over the interval between two of
// their samples, as a GPU's interval is.

package meter

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
)

// ContainerSums are a container's CPU and RAM totals.
type ContainerSums struct {
	CPUSeconds     float64
	RAMByteSeconds float64
	Seconds        float64 // the time these sums cover
}

// Add adds d to s.
func (s *ContainerSums) Add(d ContainerSums) {
	s.CPUSeconds += d.CPUSeconds
	s.RAMByteSeconds += d.RAMByteSeconds
	s.Seconds += d.Seconds
}

// Container is one container's share of a tick.
type Container struct {
	container.Container
	Delta ContainerSums
	Total ContainerSums
}

type ctrState struct {
	primed     bool // seen holds a good reading
	seen       time.Time
	cpu        float64
	ram        uint64
	total      ContainerSums
	lastActive time.Time
	activeStep uint64 // the Step that set lastActive
}

// containerRows books CPU time and RAM over the interval since each
// container's previous sample. A CPU counter that goes backwards (the
// container restarted in a new cgroup) counts from zero. A running
// container whose stats could not be read books nothing: its interval is
// closed by the next good reading, as a GPU's is.
func (m *Meter) containerRows(now time.Time, ctrs []container.Container, out []Container) []Container {
	if out == nil {
		out = make([]Container, 0, len(ctrs)) // never nil, as before Recycle
	}
	out = slices.Grow(out[:0], len(ctrs))
	active := 0
	for i := range ctrs {
		c := &ctrs[i]
		st := m.containers[c.ID]
		var d ContainerSums
		if st == nil {
			st = &ctrState{}
			m.containers[c.ID] = st
		}
		if st.activeStep != m.step {
			st.activeStep = m.step
			active++
		}
		st.lastActive = now
		if c.StatsErr == "" || !c.Running {
			if dt := now.Sub(st.seen).Seconds(); st.primed && dt > 0 {
				if c.CPUSeconds >= st.cpu {
					d.CPUSeconds = c.CPUSeconds - st.cpu
				} else {
					d.CPUSeconds = c.CPUSeconds
				}
				d.RAMByteSeconds = float64(st.ram) * dt
				d.Seconds = dt
			}
			st.primed, st.seen, st.cpu, st.ram = true, now, c.CPUSeconds, c.MemoryBytes
			if !c.Running {
				st.ram = 0
			}
		}
		st.total.Add(d)
		out = append(out, Container{Container: *c, Delta: d, Total: st.total})
	}
	// When every container known is listed now, none can have expired.
	if active < len(m.containers) {
		for id, st := range m.containers {
			if now.Sub(st.lastActive) > m.cfg.Retain {
				delete(m.containers, id)
			}
		}
	}
	// Inventories often list in a stable order already.
	if !sortedByName(out) {
		slices.SortFunc(out, func(a, b Container) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	}
	return out
}

// sortedByName reports whether cs is in the order containerRows gives,
// without copying a Container per comparison.
func sortedByName(cs []Container) bool {
	for i := 1; i < len(cs); i++ {
		a, b := &cs[i-1], &cs[i]
		if a.Name > b.Name || (a.Name == b.Name && a.ID > b.ID) {
			return false
		}
	}
	return true
}
