package ledger

import (
	"context"
	"time"
)

// GPUGauges are a GPU's sampled figures in one minute (or hour): how many
// readings the row holds and, per figure, their sum and their maximum.
// Sums rather than means, so that batches and the hour rollup add exactly
// and in any order; a mean is the sum over Samples. Stores keep
// utilisation and temperature to a hundredth, power to the milliwatt and
// memory to the byte. The zero value holds no readings.
type GPUGauges struct {
	Samples              int64
	UtilSum, UtilMax     float64 // SM utilisation, percent
	MemorySum, MemoryMax float64 // memory used, bytes
	PowerSum, PowerMax   float64 // watts
	TempSum, TempMax     float64 // degrees Celsius
}

// Observe adds one reading.
func (g *GPUGauges) Observe(util, memory, power, temp float64) {
	g.Add(GPUGauges{Samples: 1, UtilSum: util, UtilMax: util, MemorySum: memory, MemoryMax: memory,
		PowerSum: power, PowerMax: power, TempSum: temp, TempMax: temp})
}

// Add adds o to g: counts and sums add up, maxima take the larger.
func (g *GPUGauges) Add(o GPUGauges) {
	if o.Samples == 0 {
		return
	}
	if g.Samples == 0 {
		*g = o
		return
	}
	g.Samples += o.Samples
	g.UtilSum += o.UtilSum
	g.MemorySum += o.MemorySum
	g.PowerSum += o.PowerSum
	g.TempSum += o.TempSum
	g.UtilMax = max(g.UtilMax, o.UtilMax)
	g.MemoryMax = max(g.MemoryMax, o.MemoryMax)
	g.PowerMax = max(g.PowerMax, o.PowerMax)
	g.TempMax = max(g.TempMax, o.TempMax)
}

// GPUPoint is one GPU's figures over one step of a GPU series: the mean
// and the maximum of each over the readings the step holds.
type GPUPoint struct {
	Start      time.Time // start of the step, UTC
	Samples    int64
	UtilMean   float64 // percent
	UtilMax    float64
	MemoryMean float64 // bytes
	MemoryMax  float64
	PowerMean  float64 // watts
	PowerMax   float64
	TempMean   float64 // degrees Celsius
	TempMax    float64
}

// Point returns g's means and maxima as a point starting at start; g must
// hold at least one reading.
func (g GPUGauges) Point(start time.Time) GPUPoint {
	n := float64(g.Samples)
	return GPUPoint{Start: start.UTC(), Samples: g.Samples,
		UtilMean: g.UtilSum / n, UtilMax: g.UtilMax,
		MemoryMean: g.MemorySum / n, MemoryMax: g.MemoryMax,
		PowerMean: g.PowerSum / n, PowerMax: g.PowerMax,
		TempMean: g.TempSum / n, TempMax: g.TempMax}
}

// GPUHistory is one GPU's series.
type GPUHistory struct {
	GPU    GPU
	Points []GPUPoint // oldest first; a step without readings has none
}

// GPUSeriesStore reads GPU figures over time.
type GPUSeriesStore interface {
	// GPUSeries returns the figures of node's GPUs per step within
	// [from, to), one history per GPU that has readings there, ordered by
	// GPU index and UUID. step is a positive whole number of minutes;
	// a whole number of hours reads hour rows (and widens window edges
	// inside an hour to it), anything shorter reads minute rows (which
	// Retain may have deleted: the series then starts where they do).
	// Steps are aligned to the Unix epoch.
	GPUSeries(ctx context.Context, node string, from, to time.Time, step time.Duration) ([]GPUHistory, error)

	// GPUUsageSeries returns every GPU's rows within f's window, as they
	// were written and added up per step: time.Minute for minute rows
	// (which Retain may have deleted), time.Hour for hour rows; ordered
	// by start, then node and GPU UUID. It is how the ledger's minute
	// data is read whole, whatever its layout.
	GPUUsageSeries(ctx context.Context, f Filter, step time.Duration) ([]GPUUsage, error)
}

// MinuteCompacter compacts minute rows on demand. Writers compact a
// node's closed hours as its batches of a new hour come; a run that ends
// (a simulation) compacts its last hours itself.
type MinuteCompacter interface {
	// CompactMinutes moves node's minute rows of the hours before before
	// (rounded up to a whole hour) into the ledger's minute chunks.
	CompactMinutes(ctx context.Context, node string, before time.Time) error
}

// GPULister lists the GPUs a ledger knows.
type GPULister interface {
	// KnownGPUs returns every GPU any batch has named, on every node,
	// whether or not the ledger still keeps usage of it: GPUs are never
	// deleted. It reads no usage, so it costs the same for a month of
	// history as for a minute.
	KnownGPUs(ctx context.Context) ([]GPU, error)
}
