// The rules every store holds a batch to before it writes it.

package ledger

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalidBatch is wrapped by Write when a batch breaks a rule of
// Batch.Validate. Writing the same batch again fails the same way.
var ErrInvalidBatch = errors.New("invalid ledger batch")

// Validate checks what every store requires of a batch: keys present
// (node, GPU UUID, container ID, a start time, a known owner kind with an
// owner ID for containers and hosts and none for KindNone), every number
// finite, peaks within int64, and every string valid UTF-8 without NUL
// bytes (PostgreSQL stores no others). Errors wrap ErrInvalidBatch.
func (b *Batch) Validate() error {
	if err := b.validateID(); err != nil {
		return err
	}
	for i, n := range b.Nodes {
		if err := keys(n.Name); err != nil {
			return invalid("nodes[%d]: node name %v", i, err)
		}
	}
	for i, g := range b.GPUs {
		if err := keys(g.Node, g.UUID); err != nil {
			return invalid("gpus[%d] (node %q, %q): %v", i, g.Node, g.UUID, err)
		}
		if err := text(g.Model); err != nil {
			return invalid("gpus[%d] (node %q, %q): model %v", i, g.Node, g.UUID, err)
		}
		if g.MemoryTotal > math.MaxInt64 {
			return invalid("gpus[%d] (node %q, %q): MemoryTotal %d is out of range", i, g.Node, g.UUID, g.MemoryTotal)
		}
	}
	for i, c := range b.Containers {
		if err := keys(c.Node, c.ID); err != nil {
			return invalid("containers[%d] (node %q, %q): %v", i, c.Node, c.ID, err)
		}
		if err := text(c.Name, c.Image, c.User, c.Team, c.Project, c.GPURequest); err != nil {
			return invalid("containers[%d] (node %q, %q): %v", i, c.Node, c.ID, err)
		}
		for k, v := range c.Labels {
			if err := text(k, v); err != nil {
				return invalid("containers[%d] (node %q, %q): label %q: %v", i, c.Node, c.ID, k, err)
			}
		}
	}
	for i, u := range b.Usage {
		at := func() string {
			return fmt.Sprintf("usage[%d] (node %q, %s %q, GPU %q, %s)", i, u.Node, u.OwnerKind, u.OwnerID, u.GPU, u.Start.UTC().Format(time.RFC3339))
		}
		if err := keys(u.Node, u.GPU); err != nil {
			return invalid("%s: %v", at(), err)
		}
		if err := owner(u.OwnerKind, u.OwnerID); err != nil {
			return invalid("%s: %v", at(), err)
		}
		if u.Start.IsZero() {
			return invalid("%s: zero Start", at())
		}
		if err := finite(
			number{"AllocatedSeconds", u.AllocatedSeconds},
			number{"HeldSeconds", u.HeldSeconds},
			number{"PresentSeconds", u.PresentSeconds},
			number{"UsedSeconds", u.UsedSeconds},
			number{"MemoryByteSeconds", u.MemoryByteSeconds},
			number{"EnergyJoules", u.EnergyJoules},
			number{"PeakUtil", u.PeakUtil},
		); err != nil {
			return invalid("%s: %v", at(), err)
		}
		if u.PeakMemoryBytes > math.MaxInt64 {
			return invalid("%s: PeakMemoryBytes %d is out of range", at(), u.PeakMemoryBytes)
		}
	}
	for i, g := range b.GPUUsage {
		at := func() string {
			return fmt.Sprintf("gpu usage[%d] (node %q, GPU %q, %s)", i, g.Node, g.GPU, g.Start.UTC().Format(time.RFC3339))
		}
		if err := keys(g.Node, g.GPU); err != nil {
			return invalid("%s: %v", at(), err)
		}
		if g.Start.IsZero() {
			return invalid("%s: zero Start", at())
		}
		if err := finite(
			number{"Seconds", g.Seconds},
			number{"AllocatedSeconds", g.AllocatedSeconds},
			number{"IdleSeconds", g.IdleSeconds},
			number{"UsedSeconds", g.UsedSeconds},
			number{"UnattributedSeconds", g.UnattributedSeconds},
			number{"EnergyJoules", g.EnergyJoules},
			number{"IdleEnergyJoules", g.IdleEnergyJoules},
			number{"PeakUtil", g.PeakUtil},
			number{"Gauges.UtilSum", g.Gauges.UtilSum},
			number{"Gauges.UtilMax", g.Gauges.UtilMax},
			number{"Gauges.MemorySum", g.Gauges.MemorySum},
			number{"Gauges.MemoryMax", g.Gauges.MemoryMax},
			number{"Gauges.PowerSum", g.Gauges.PowerSum},
			number{"Gauges.PowerMax", g.Gauges.PowerMax},
			number{"Gauges.TempSum", g.Gauges.TempSum},
			number{"Gauges.TempMax", g.Gauges.TempMax},
		); err != nil {
			return invalid("%s: %v", at(), err)
		}
		if g.Gauges.Samples < 0 {
			return invalid("%s: Gauges.Samples %d is negative", at(), g.Gauges.Samples)
		}
	}
	for i, c := range b.ContainerUsage {
		at := func() string {
			return fmt.Sprintf("container usage[%d] (node %q, %q, %s)", i, c.Node, c.ContainerID, c.Start.UTC().Format(time.RFC3339))
		}
		if err := keys(c.Node, c.ContainerID); err != nil {
			return invalid("%s: %v", at(), err)
		}
		if c.Start.IsZero() {
			return invalid("%s: zero Start", at())
		}
		if err := finite(
			number{"CPUSeconds", c.CPUSeconds},
			number{"RAMByteSeconds", c.RAMByteSeconds},
		); err != nil {
			return invalid("%s: %v", at(), err)
		}
	}
	return nil
}

// validateID checks that a batch with an ID is complete and holds only
// its node's rows: the lease fences one node.
func (b *Batch) validateID() error {
	id := b.ID
	if id.IsZero() {
		return nil
	}
	if err := keys(id.Node, id.Instance); err != nil {
		return invalid("batch ID (node %q, instance %q): %v", id.Node, id.Instance, err)
	}
	if id.Seq == 0 || id.Seq > math.MaxInt64 {
		return invalid("batch ID (node %q): sequence %d is outside 1..%d", id.Node, id.Seq, int64(math.MaxInt64))
	}
	return errors.Join(
		sameNode(id.Node, "nodes", b.Nodes, func(n Node) string { return n.Name }),
		sameNode(id.Node, "gpus", b.GPUs, func(g GPU) string { return g.Node }),
		sameNode(id.Node, "containers", b.Containers, func(c Container) string { return c.Node }),
		sameNode(id.Node, "usage", b.Usage, func(u Usage) string { return u.Node }),
		sameNode(id.Node, "gpu usage", b.GPUUsage, func(g GPUUsage) string { return g.Node }),
		sameNode(id.Node, "container usage", b.ContainerUsage, func(c ContainerUsage) string { return c.Node }),
	)
}

// sameNode checks that every row of a batch under node's lease is node's.
func sameNode[T any](node, what string, rows []T, nodeOf func(T) string) error {
	for i, r := range rows {
		if n := nodeOf(r); n != node {
			return invalid("%s[%d] is of node %q in a batch of node %q", what, i, n, node)
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidBatch}, args...)...)
}

// keys checks strings that identify something: present and storable.
func keys(ss ...string) error {
	for _, s := range ss {
		if s == "" {
			return errors.New("empty key")
		}
	}
	return text(ss...)
}

// text checks strings that every store can hold.
func text(ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%q is not valid UTF-8", s)
		}
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("%q holds a NUL byte", s)
		}
	}
	return nil
}

func owner(kind, id string) error {
	switch kind {
	case KindContainer, KindHost:
		if id == "" {
			return fmt.Errorf("owner kind %q needs an owner ID", kind)
		}
	case KindNone:
		if id != "" {
			return fmt.Errorf("owner kind %q takes no owner ID, got %q", kind, id)
		}
	default:
		return fmt.Errorf("unknown owner kind %q", kind)
	}
	return text(id)
}

// number is a named value for finite.
type number struct {
	name string
	v    float64
}

func finite(ns ...number) error {
	for _, n := range ns {
		if math.IsNaN(n.v) || math.IsInf(n.v, 0) {
			return fmt.Errorf("%s is %v", n.name, n.v)
		}
	}
	return nil
}
