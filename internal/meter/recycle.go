package meter

// spareTicks is how many handed-back ticks' rows a meter keeps for reuse:
// enough for those a simulation has in flight between the sampler and
// the recorder (two groups of 16), more would only hold memory.
const spareTicks = 64

// spare is the row slices of a tick that its last reader handed back.
type spare struct {
	usage      []Usage
	containers []Container
}

// Recycle hands back t, which nobody reads any more, so that a later
// Step may fill its Usage and Containers slices in place of allocating
// new ones: the benchmark day allocated 6 GB of them. Only a caller that
// owns every reader of t may call it; serve publishes its ticks to
// scrapes and the API and never does. Recycle may be called from any
// goroutine, while Step runs; it never blocks, and drops t's rows when
// enough are kept.
func (m *Meter) Recycle(t *Tick) {
	if t == nil || (t.Usage == nil && t.Containers == nil) {
		return
	}
	select {
	case m.spares <- spare{t.Usage[:0], t.Containers[:0]}:
	default:
	}
	t.Usage, t.Containers = nil, nil
}

// takeSpare returns a handed-back tick's slices, or empty ones.
func (m *Meter) takeSpare() spare {
	select {
	case s := <-m.spares:
		return s
	default:
		return spare{}
	}
}
