package main

import (
	"bufio"
	"io"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

// A column is one figure of a minute row as a metric family: a counter
// (the running sum of the figure, as the exporter's _total counters are)
// or a gauge (the minute's own value). The stored integer v is divided
// by n and by div to give the family's unit: n is 1 for a plain figure,
// the row's samples for a sum over them (a mean), and 0 where the row
// has no value (a GPU minute without samples).
type column[R any] struct {
	name, typ, help string
	div             float64
	value           func(*R) (v, n int64)
}

// row is what the converter needs of every minute row: its start, in
// unix seconds, and the index of its series.
type row interface {
	minute() int64
	series() int64
}

func (r *usageMinute) minute() int64     { return r.Start }
func (r *gpuMinute) minute() int64       { return r.Start }
func (r *containerMinute) minute() int64 { return r.Start }

func always[R any](f func(*R) int64) func(*R) (int64, int64) {
	return func(r *R) (int64, int64) { return f(r), 1 }
}

// The families, under the exporter's names where it has the series
// (internal/exporter) and after its conventions where only the ledger
// keeps it (a minute's peaks and means).
var usageColumns = []column[usageMinute]{
	{"gpumeter_container_gpu_allocated_seconds", "counter", "GPU time allocated to the container: its share of the GPU times seconds.", 1e6, always(func(r *usageMinute) int64 { return r.AllocatedUS })},
	{"gpumeter_container_gpu_held_seconds", "counter", "Time the container held the GPU, not split among the containers that share it.", 1e6, always(func(r *usageMinute) int64 { return r.HeldUS })},
	{"gpumeter_container_gpu_present_seconds", "counter", "Time the container had a process on the GPU.", 1e6, always(func(r *usageMinute) int64 { return r.PresentUS })},
	{"gpumeter_container_gpu_used_seconds", "counter", "SM-weighted GPU time the container used.", 1e6, always(func(r *usageMinute) int64 { return r.UsedUS })},
	{"gpumeter_container_gpu_memory_byte_seconds", "counter", "GPU memory the container held, integrated over time.", 1, always(func(r *usageMinute) int64 { return r.MemoryByteS })},
	{"gpumeter_container_gpu_energy_joules", "counter", "GPU energy attributed to the container.", 1e3, always(func(r *usageMinute) int64 { return r.EnergyMJ })},
	{"gpumeter_container_gpu_memory_peak_bytes", "gauge", "Most GPU memory the container held in the minute.", 1, always(func(r *usageMinute) int64 { return r.PeakMemoryBytes })},
	{"gpumeter_container_gpu_utilization_peak_ratio", "gauge", "The container's highest share of the GPU's SM time in the minute (0..1).", 1e4, always(func(r *usageMinute) int64 { return r.PeakUtilCpct })},
}

var gpuColumns = []column[gpuMinute]{
	{"gpumeter_gpu_metered_seconds", "counter", "Time the GPU was metered.", 1e6, always(func(r *gpuMinute) int64 { return r.SecondsUS })},
	{"gpumeter_gpu_allocated_seconds", "counter", "Time some running container held the GPU.", 1e6, always(func(r *gpuMinute) int64 { return r.AllocatedUS })},
	{"gpumeter_gpu_idle_seconds", "counter", "Time no container held the GPU: the idle pool.", 1e6, always(func(r *gpuMinute) int64 { return r.IdleUS })},
	{"gpumeter_gpu_used_seconds", "counter", "SM-weighted GPU time.", 1e6, always(func(r *gpuMinute) int64 { return r.UsedUS })},
	{"gpumeter_gpu_unattributed_seconds", "counter", "Utilisation-weighted GPU time that no process accounts for.", 1e6, always(func(r *gpuMinute) int64 { return r.UnattributedUS })},
	{"gpumeter_gpu_energy_joules", "counter", "Energy the GPU used while metered.", 1e3, always(func(r *gpuMinute) int64 { return r.EnergyMJ })},
	{"gpumeter_gpu_idle_energy_joules", "counter", "Energy booked to no owner: the idle pool.", 1e3, always(func(r *gpuMinute) int64 { return r.IdleEnergyMJ })},
	{"gpumeter_gpu_utilization_peak_ratio", "gauge", "The GPU's highest utilisation the meter saw in the minute (0..1).", 1e4, always(func(r *gpuMinute) int64 { return r.PeakUtilCpct })},
	{"gpumeter_gpu_utilization_ratio", "gauge", "The GPU's mean sampled utilisation in the minute (0..1).", 1e4, mean(func(r *gpuMinute) int64 { return r.UtilSumCpct })},
	{"gpumeter_gpu_utilization_max_ratio", "gauge", "The GPU's highest sampled utilisation in the minute (0..1).", 1e4, sampled(func(r *gpuMinute) int64 { return r.UtilMaxCpct })},
	{"gpumeter_gpu_memory_used_bytes", "gauge", "The GPU's mean used memory in the minute.", 1, mean(func(r *gpuMinute) int64 { return r.MemSum })},
	{"gpumeter_gpu_memory_used_max_bytes", "gauge", "The GPU's most used memory in the minute.", 1, sampled(func(r *gpuMinute) int64 { return r.MemMax })},
	{"gpumeter_gpu_power_watts", "gauge", "The GPU's mean power draw in the minute.", 1e3, mean(func(r *gpuMinute) int64 { return r.PowerSumMW })},
	{"gpumeter_gpu_power_max_watts", "gauge", "The GPU's highest power draw in the minute.", 1e3, sampled(func(r *gpuMinute) int64 { return r.PowerMaxMW })},
	{"gpumeter_gpu_temperature_celsius", "gauge", "The GPU's mean temperature in the minute.", 1e2, mean(func(r *gpuMinute) int64 { return r.TempSumCC })},
	{"gpumeter_gpu_temperature_max_celsius", "gauge", "The GPU's highest temperature in the minute.", 1e2, sampled(func(r *gpuMinute) int64 { return r.TempMax })},
}

var containerColumns = []column[containerMinute]{
	{"gpumeter_container_cpu_seconds", "counter", "CPU time of the container's cgroup.", 1e6, always(func(r *containerMinute) int64 { return r.CPUUS })},
	{"gpumeter_container_memory_byte_seconds", "counter", "Resident memory of the container's cgroup, integrated over time.", 1, always(func(r *containerMinute) int64 { return r.RAMByteS })},
}

// mean marks a sum over the minute's samples: the gauge is the sum over
// the samples, and a minute without samples has none.
func mean(sum func(*gpuMinute) int64) func(*gpuMinute) (int64, int64) {
	return func(r *gpuMinute) (int64, int64) { return sum(r), r.Samples }
}

// sampled marks a figure of the minute's samples (their maximum): a
// minute without samples has none.
func sampled(f func(*gpuMinute) int64) func(*gpuMinute) (int64, int64) {
	return func(r *gpuMinute) (int64, int64) { return f(r), min(r.Samples, 1) }
}

// counterSeries is one counter series of the query's family as written:
// the owner's user, its first and last sample and their count, and its
// final value. The answers are checked against these.
type counterSeries struct {
	User        string
	First, Last int64 // unix seconds
	Samples     int
	Value       float64
}

// conversion says what writeOpenMetrics wrote.
type conversion struct {
	Families, Series, Samples int
	Bytes                     int64
	// Allocated holds the series of queryFamily, which the answers are
	// checked against.
	Allocated []counterSeries
}

// writeOpenMetrics writes every series of m as OpenMetrics text, as a
// Prometheus scraping the exporter once a minute would have stored it,
// for promtool tsdb create-blocks-from openmetrics: each family once,
// with its series one after the other and each series in time order,
// timestamps in seconds, "# EOF" last.
//
// A minute row [start, start+60) gives a sample at start+60: the
// counter's running sum after the minute, or the gauge's value over it.
// A counter series also gets a 0 at the start of its first row, the
// value the exporter shows when the container appears, so that
// increase() over a window sees the whole of the series.
func writeOpenMetrics(w io.Writer, m *minutes) (conversion, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<20)
	var conv conversion
	var buf []byte

	labels := make([]string, len(m.UsageSeries))
	for i, k := range m.UsageSeries {
		labels[i] = usageLabelSet(k.GPU, k.Owner)
	}
	for _, c := range usageColumns {
		var done func(first, last *usageMinute, n int, v float64)
		if c.name == queryFamily {
			done = func(first, last *usageMinute, n int, v float64) {
				conv.Allocated = append(conv.Allocated, counterSeries{User: m.UsageSeries[first.Series].Owner.User,
					First: first.Start, Last: last.Start + 60, Samples: n, Value: v})
			}
		}
		writeFamily(bw, &buf, &conv, c, m.Usage, labels, done)
	}
	labels = make([]string, len(m.GPUSeries))
	for i, g := range m.GPUSeries {
		labels[i] = labelSet("Hostname", g.Node, "UUID", g.UUID, "gpu", strconv.Itoa(g.Index))
	}
	for _, c := range gpuColumns {
		writeFamily(bw, &buf, &conv, c, m.GPU, labels, nil)
	}
	labels = make([]string, len(m.ContainerSeries))
	for i, o := range m.ContainerSeries {
		labels[i] = containerLabelSet(o)
	}
	for _, c := range containerColumns {
		writeFamily(bw, &buf, &conv, c, m.Containers, labels, nil)
	}
	bw.WriteString("# EOF\n")
	if err := bw.Flush(); err != nil {
		return conv, err
	}
	conv.Bytes = cw.n
	return conv, cw.err
}

// writeFamily writes column c of rows, which come grouped by series and
// in time order within one; labels are the series' label sets by index.
// done, when not nil, is told of each counter series once written.
func writeFamily[T any, R interface {
	*T
	row
}](bw *bufio.Writer, buf *[]byte, conv *conversion, c column[T], rows []T, labels []string,
	done func(first, last *T, samples int, value float64)) {
	conv.Families++
	bw.WriteString("# TYPE " + c.name + " " + c.typ + "\n# HELP " + c.name + " " + c.help + "\n")
	sample := c.name
	if c.typ == "counter" {
		sample += "_total"
	}
	for i := 0; i < len(rows); {
		key := R(&rows[i]).series()
		j := i + 1
		for j < len(rows) && R(&rows[j]).series() == key {
			j++
		}
		prefix := sample + labels[key] + " "
		var sum int64
		n := 0
		put := func(v float64, t int64) {
			b := append((*buf)[:0], prefix...)
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
			b = append(b, ' ')
			b = strconv.AppendInt(b, t, 10)
			b = append(b, '\n')
			bw.Write(b)
			*buf = b
			n++
		}
		if c.typ == "counter" {
			put(0, R(&rows[i]).minute())
		}
		for k := i; k < j; k++ {
			v, per := c.value(&rows[k])
			if per == 0 {
				continue
			}
			t := R(&rows[k]).minute() + 60
			if c.typ == "counter" {
				sum += v
				put(float64(sum)/c.div, t)
			} else {
				put(float64(v)/float64(per)/c.div, t)
			}
		}
		if n > 0 {
			conv.Series++
		}
		conv.Samples += n
		if done != nil && c.typ == "counter" {
			done(&rows[i], &rows[j-1], n, float64(sum)/c.div)
		}
		i = j
	}
}

// usageLabelSet is the exporter's label set of a container's series on a
// GPU (containerLabels in internal/exporter), a host user's, or nobody's.
func usageLabelSet(g gpuInfo, o ownerInfo) string {
	gpu := strconv.Itoa(g.Index)
	switch o.Kind {
	case ledger.KindContainer:
		return labelSet("Hostname", o.Node, "UUID", g.UUID, "container", o.Container, "container_id", shortID(o.ID),
			"gpu", gpu, "image", o.Image, "project", o.Project, "team", o.Team, "user", o.User)
	case ledger.KindHost:
		return labelSet("Hostname", o.Node, "UUID", g.UUID, "gpu", gpu, "user", o.ID)
	}
	return labelSet("Hostname", o.Node, "UUID", g.UUID, "gpu", gpu)
}

func containerLabelSet(o ownerInfo) string {
	return labelSet("Hostname", o.Node, "container", o.Container, "container_id", shortID(o.ID),
		"image", o.Image, "project", o.Project, "team", o.Team, "user", o.User)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func shortID(id string) string { return id[:min(len(id), 12)] }

// labelSet renders name/value pairs as {a="x",b="y"}, escaped as the
// text formats want. A pair with an empty value is left out, as
// Prometheus drops such labels anyway.
func labelSet(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// countingWriter counts what it passes on and keeps the first error,
// so that the many small writes need no checks of their own.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}
