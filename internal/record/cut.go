// Cutting a tick into minutes: the pieces of an interval that fall in each
// minute, a GPU's and an owner's share of one, and the container record a
// tick makes.

package record

import (
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// piece is the part of an interval that falls in one minute.
type piece struct {
	minute int64 // unix seconds of the minute's start
	frac   float64
}

// cutter splits intervals that end at one instant, keeping the last
// result: within a tick most GPUs and containers book the same span.
type cutter struct {
	end    time.Time
	span   time.Duration
	pieces []piece // nil until the first split
	buf    [4]piece
}

func (c *cutter) split(span time.Duration) []piece {
	if c.pieces == nil || span != c.span {
		c.span, c.pieces = span, split(c.end, span, c.buf[:0])
	}
	return c.pieces
}

// split appends to buf a piece for each minute that [end − span, end)
// touches, with the fraction of span that falls in it. It runs on every
// tick, so it takes the caller's buffer instead of a callback.
func split(end time.Time, span time.Duration, buf []piece) []piece {
	start := end.Add(-span)
	for t := start; t.Before(end); {
		m := t.Truncate(time.Minute)
		next := m.Add(time.Minute)
		if next.After(end) {
			next = end
		}
		buf = append(buf, piece{m.Unix(), float64(next.Sub(t)) / float64(span)})
		t = next
	}
	return buf
}

// meta is a container's ledger record with the state it was made from.
type meta struct {
	ledger.Container
	running  bool
	finished time.Time
}

func metaOf(lc ledger.Container, c *container.Container) meta {
	return meta{Container: lc, running: c.Running, finished: c.FinishedAt}
}

// stateOf reports whether c is still in the state the record was made
// from; only then can the record stand with a new LastSeen.
func (m meta) stateOf(c *container.Container) bool {
	return m.running == c.Running && m.finished.Equal(c.FinishedAt) && m.Name == c.Name
}

func ledgerContainer(node string, c *container.Container, now time.Time, prev ledger.Container) ledger.Container {
	lc := ledger.Container{
		Node: node, ID: c.ID, Name: c.Name, Image: c.Image, Labels: c.Labels,
		User: c.User, Team: c.Team, Project: c.Project, GPURequest: c.GPUs.String(),
		StartedAt: c.StartedAt.UTC(), FirstSeen: prev.FirstSeen, LastSeen: now,
	}
	if lc.FirstSeen.IsZero() {
		lc.FirstSeen = now
	}
	if !c.Running && !c.FinishedAt.IsZero() {
		lc.FinishedAt = c.FinishedAt.UTC()
		code := c.ExitCode
		lc.ExitCode = &code
	}
	return lc
}

// gpuPart is the part f of a GPU's delta, as the ledger sums it, with
// util as its peak utilisation.
func gpuPart(d *meter.GPUSums, f, util float64) ledger.GPUSums {
	return ledger.GPUSums{
		Seconds:             d.Seconds * f,
		AllocatedSeconds:    d.AllocatedSeconds * f,
		IdleSeconds:         d.IdleSeconds * f,
		UsedSeconds:         d.UsedSeconds * f,
		UnattributedSeconds: d.UnattributedSeconds * f,
		EnergyJoules:        d.EnergyJoules * f,
		IdleEnergyJoules:    d.IdleEnergyJoules * f,
		PeakUtil:            util,
	}
}

// usagePart is the part f of an owner's delta on a GPU, as the ledger
// sums it. Its peak utilisation is that of the time the owner was on the
// GPU; none when it was not.
func usagePart(d *meter.Sums, f float64) ledger.Sums {
	var peak float64
	if d.PresentSeconds > 0 {
		peak = d.UsedSeconds / d.PresentSeconds * 100
	}
	return ledger.Sums{
		AllocatedSeconds:  d.AllocatedSeconds * f,
		HeldSeconds:       d.HeldSeconds * f,
		PresentSeconds:    d.PresentSeconds * f,
		UsedSeconds:       d.UsedSeconds * f,
		MemoryByteSeconds: d.MemoryByteSeconds * f,
		EnergyJoules:      d.EnergyJoules * f,
		PeakMemoryBytes:   d.PeakMemoryBytes,
		PeakUtil:          peak,
	}
}
