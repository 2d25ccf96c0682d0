// Package exporter renders the latest tick as Prometheus metrics: per-GPU
// values under dcgm-exporter's names and labels, so dashboards built for it
// work unchanged, and gpumeter's own per-container, per-user and health
// series. A scrape reads the published tick and never waits on a source.
package exporter

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// TickSource gives the latest tick; *sampler.Sampler is one.
type TickSource interface {
	Latest() *sampler.Tick
}

// Collector is a prometheus.Collector over the latest tick.
type Collector struct {
	src TickSource
}

// NewCollector returns a collector reading src.
func NewCollector(src TickSource) *Collector { return &Collector{src: src} }

// Handler returns the /metrics handler: gpumeter's series plus the Go and
// process collectors of the exporter itself.
func Handler(src TickSource, version string) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(src), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "gpumeter_build_info",
		Help:        "A metric with a constant '1' value labelled by the gpumeter version.",
		ConstLabels: prometheus.Labels{"version": version},
	}, func() float64 { return 1 }))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

var (
	gpuLabels = []string{"gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
	ctrLabels = []string{"container", "container_id", "image", "user", "team", "project", "Hostname"}
	ctrGPU    = append(append([]string{}, ctrLabels...), "gpu", "UUID")
	hostGPU   = []string{"user", "gpu", "UUID", "Hostname"}
	ownGPU    = []string{"gpu", "UUID", "Hostname"}
)

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

type gpuMetric struct {
	d     *prometheus.Desc
	typ   prometheus.ValueType
	field gpu.Field // "" when always present
	value func(*gpu.Device) float64
}

const mib = 1 << 20

// dcgm lists the per-GPU values with dcgm-exporter's names, help and units.
var dcgm = []gpuMetric{
	{desc("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", gpuLabels), prometheus.GaugeValue, gpu.FieldSMClock, func(d *gpu.Device) float64 { return d.SMClockMHz }},
	{desc("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", gpuLabels), prometheus.GaugeValue, gpu.FieldMemClock, func(d *gpu.Device) float64 { return d.MemClockMHz }},
	{desc("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", gpuLabels), prometheus.GaugeValue, gpu.FieldMemTemp, func(d *gpu.Device) float64 { return d.MemTempC }},
	{desc("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", gpuLabels), prometheus.GaugeValue, gpu.FieldTemp, func(d *gpu.Device) float64 { return d.TempC }},
	{desc("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", gpuLabels), prometheus.GaugeValue, gpu.FieldPower, func(d *gpu.Device) float64 { return d.PowerWatts }},
	{desc("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", gpuLabels), prometheus.CounterValue, gpu.FieldEnergy, func(d *gpu.Device) float64 { return float64(d.EnergyMilliJoules) }},
	{desc("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", gpuLabels), prometheus.GaugeValue, gpu.FieldUtil, func(d *gpu.Device) float64 { return d.Util }},
	{desc("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", gpuLabels), prometheus.GaugeValue, gpu.FieldMemCopyUtil, func(d *gpu.Device) float64 { return d.MemCopyUtil }},
	{desc("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", gpuLabels), prometheus.GaugeValue, gpu.FieldEncUtil, func(d *gpu.Device) float64 { return d.EncUtil }},
	{desc("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", gpuLabels), prometheus.GaugeValue, gpu.FieldDecUtil, func(d *gpu.Device) float64 { return d.DecUtil }},
	{desc("DCGM_FI_DEV_FB_FREE", "Frame buffer memory free (in MiB).", gpuLabels), prometheus.GaugeValue, "", func(d *gpu.Device) float64 { return float64(d.MemoryFree / mib) }},
	{desc("DCGM_FI_DEV_FB_USED", "Frame buffer memory used (in MiB).", gpuLabels), prometheus.GaugeValue, "", func(d *gpu.Device) float64 { return float64(d.MemoryUsed / mib) }},
}

var (
	gpuUp        = desc("gpumeter_gpu_up", "1 when the GPU was read at the latest sample, 0 when reading it failed.", []string{"gpu", "UUID", "Hostname"})
	gpuReadErrs  = desc("gpumeter_gpu_read_errors_total", "Failed reads of the GPU.", []string{"gpu", "UUID", "Hostname"})
	gpuMissing   = desc("gpumeter_gpu_value_unavailable", "1 for each value the GPU does not report (e.g. utilisation under MIG), which is then left out rather than shown as zero.", []string{"gpu", "UUID", "Hostname", "field"})
	gpuMIG       = desc("gpumeter_gpu_mig_enabled", "1 when the GPU is in MIG mode.", ownGPU)
	migMemUsed   = desc("gpumeter_mig_instance_memory_used_bytes", "Memory used on a MIG GPU instance.", []string{"gpu", "UUID", "Hostname", "gpu_instance", "profile", "mig_uuid"})
	migMemTotal  = desc("gpumeter_mig_instance_memory_total_bytes", "Memory of a MIG GPU instance.", []string{"gpu", "UUID", "Hostname", "gpu_instance", "profile", "mig_uuid"})
	gpuHolders   = desc("gpumeter_gpu_holders", "Running containers that hold the GPU.", ownGPU)
	gpuMemTotal  = desc("gpumeter_gpu_memory_total_bytes", "GPU memory in all.", ownGPU)
	gpuMetered   = desc("gpumeter_gpu_metered_seconds_total", "Time the GPU was metered.", ownGPU)
	gpuAlloc     = desc("gpumeter_gpu_allocated_seconds_total", "Time some running container held the GPU.", ownGPU)
	gpuIdle      = desc("gpumeter_gpu_idle_seconds_total", "Time no container held the GPU: the idle pool.", ownGPU)
	gpuUnattr    = desc("gpumeter_gpu_unattributed_seconds_total", "Utilisation-weighted GPU time that no process accounts for.", ownGPU)
	gpuEnergy    = desc("gpumeter_gpu_energy_joules_total", "Energy the GPU used while metered.", ownGPU)
	gpuIdleE     = desc("gpumeter_gpu_idle_energy_joules_total", "Energy booked to no owner: the idle pool.", ownGPU)
	gpuResets    = desc("gpumeter_gpu_energy_counter_resets_total", "Times the GPU's energy counter went backwards (driver reload).", ownGPU)
	gpuUnattrNow = desc("gpumeter_gpu_unattributed_utilization_ratio", "Utilisation that no process accounts for, now.", ownGPU)

	cAlloc   = desc("gpumeter_container_gpu_allocated_seconds_total", "GPU time allocated to the container: its share of the GPU times seconds.", ctrGPU)
	cPresent = desc("gpumeter_container_gpu_present_seconds_total", "Time the container had a process on the GPU.", ctrGPU)
	cUsed    = desc("gpumeter_container_gpu_used_seconds_total", "SM-weighted GPU time the container used.", ctrGPU)
	cMemBS   = desc("gpumeter_container_gpu_memory_byte_seconds_total", "GPU memory the container held, integrated over time.", ctrGPU)
	cEnergy  = desc("gpumeter_container_gpu_energy_joules_total", "GPU energy attributed to the container.", ctrGPU)
	cUtil    = desc("gpumeter_container_gpu_utilization_ratio", "The container's share of the GPU's SM time now (0..1).", ctrGPU)
	cMem     = desc("gpumeter_container_gpu_memory_bytes", "GPU memory the container holds now.", ctrGPU)
	cShare   = desc("gpumeter_container_gpu_allocation_share", "The container's allocation share of the GPU now (1/n for n holders).", ctrGPU)
	cCPU     = desc("gpumeter_container_cpu_seconds_total", "CPU time of the container's cgroup.", ctrLabels)
	cRAM     = desc("gpumeter_container_memory_bytes", "Resident memory of the container's cgroup.", ctrLabels)
	cUp      = desc("gpumeter_container_running", "1 while the container runs.", ctrLabels)

	hPresent = desc("gpumeter_host_gpu_present_seconds_total", "Time a user's processes outside containers were on the GPU.", hostGPU)
	hUsed    = desc("gpumeter_host_gpu_used_seconds_total", "SM-weighted GPU time used by a user's processes outside containers.", hostGPU)
	hMemBS   = desc("gpumeter_host_gpu_memory_byte_seconds_total", "GPU memory held by a user's processes outside containers, integrated over time.", hostGPU)
	hEnergy  = desc("gpumeter_host_gpu_energy_joules_total", "GPU energy attributed to a user's processes outside containers.", hostGPU)
	hUtil    = desc("gpumeter_host_gpu_utilization_ratio", "A user's share of the GPU's SM time now, outside containers (0..1).", hostGPU)
	hMem     = desc("gpumeter_host_gpu_memory_bytes", "GPU memory a user's processes outside containers hold now.", hostGPU)

	uMem    = desc("gpumeter_unresolved_gpu_memory_bytes", "GPU memory held by processes whose owner could not be found.", ownGPU)
	uEnergy = desc("gpumeter_unresolved_gpu_energy_joules_total", "GPU energy attributed to processes whose owner could not be found.", ownGPU)

	srcUp       = desc("gpumeter_source_up", "1 when the source answered at the latest sample.", []string{"source", "Hostname"})
	srcDuration = desc("gpumeter_source_duration_seconds", "How long the source took at the latest sample.", []string{"source", "Hostname"})
	srcErrors   = desc("gpumeter_source_errors_total", "Failed reads of the source.", []string{"source", "Hostname"})
	tickDur     = desc("gpumeter_tick_duration_seconds", "How long the latest sample took, sources and meter together.", []string{"Hostname"})
	ticks       = desc("gpumeter_ticks_total", "Samples taken.", []string{"Hostname"})
	missed      = desc("gpumeter_ticks_missed_total", "Samples that could not run on time.", []string{"Hostname"})
	lastTick    = desc("gpumeter_last_tick_timestamp_seconds", "When the latest sample was taken.", []string{"Hostname"})
	unresolved  = desc("gpumeter_unresolved_processes", "GPU processes at the latest sample whose owner could not be found.", []string{"Hostname"})
	resolveErrs = desc("gpumeter_process_resolve_errors_total", "Failed lookups of a GPU process's owner.", []string{"Hostname"})
)

// Describe sends nothing: the series depend on what the host runs, so the
// collector is unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect renders the latest tick.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	t := c.src.Latest()
	if t == nil || t.Tick == nil {
		return
	}
	node := t.Node
	h := &t.Health
	for _, s := range h.Sources {
		ch <- gauge(srcUp, b2f(s.OK), s.Name, node)
		ch <- gauge(srcDuration, s.Duration.Seconds(), s.Name, node)
		ch <- counter(srcErrors, float64(s.Errors), s.Name, node)
	}
	ch <- gauge(tickDur, h.TickDuration.Seconds(), node)
	ch <- counter(ticks, float64(h.Ticks), node)
	ch <- counter(missed, float64(h.Missed), node)
	ch <- gauge(unresolved, float64(h.Unresolved), node)
	ch <- counter(resolveErrs, float64(h.ResolveErrors), node)
	if !t.Time.IsZero() {
		ch <- gauge(lastTick, float64(t.Time.UnixNano())/1e9, node)
	}

	driver := t.Sample.DriverVersion
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		idx := strconv.Itoa(d.Index)
		ch <- counter(gpuReadErrs, float64(h.GPUReadErrors[meter.GPUKey(d.UUID, d.Index)]), idx, d.UUID, node)
		if d.Err != nil {
			ch <- gauge(gpuUp, 0, idx, d.UUID, node)
			continue
		}
		ch <- gauge(gpuUp, 1, idx, d.UUID, node)
		for _, m := range dcgm {
			if m.field != "" && !d.Has(m.field) {
				continue
			}
			ch <- prometheus.MustNewConstMetric(m.d, m.typ, m.value(d), idx, d.UUID, "nvidia"+idx, d.Model, node, driver)
		}
		for _, f := range d.Missing {
			ch <- gauge(gpuMissing, 1, idx, d.UUID, node, string(f))
		}
		ch <- gauge(gpuMIG, b2f(d.MIGEnabled), idx, d.UUID, node)
		for _, mi := range d.MIG {
			gi := strconv.Itoa(mi.GPUInstanceID)
			ch <- gauge(migMemUsed, float64(mi.MemoryUsed), idx, d.UUID, node, gi, mi.Profile, mi.UUID)
			ch <- gauge(migMemTotal, float64(mi.MemoryTotal), idx, d.UUID, node, gi, mi.Profile, mi.UUID)
		}
		ch <- gauge(gpuMemTotal, float64(d.MemoryTotal), idx, d.UUID, node)
		if i < len(t.GPUs) {
			g := &t.GPUs[i]
			ch <- gauge(gpuHolders, float64(g.Holders), idx, d.UUID, node)
			ch <- gauge(gpuUnattrNow, g.UnattributedUtil/100, idx, d.UUID, node)
			ch <- counter(gpuMetered, g.Total.Seconds, idx, d.UUID, node)
			ch <- counter(gpuAlloc, g.Total.AllocatedSeconds, idx, d.UUID, node)
			ch <- counter(gpuIdle, g.Total.IdleSeconds, idx, d.UUID, node)
			ch <- counter(gpuUnattr, g.Total.UnattributedSeconds, idx, d.UUID, node)
			ch <- counter(gpuEnergy, g.Total.EnergyJoules, idx, d.UUID, node)
			ch <- counter(gpuIdleE, g.Total.IdleEnergyJoules, idx, d.UUID, node)
			ch <- counter(gpuResets, float64(g.Total.EnergyResets), idx, d.UUID, node)
		}
	}

	byID := make(map[string]*meter.Container, len(t.Containers))
	for i := range t.Containers {
		c := &t.Containers[i]
		byID[c.ID] = c
		lv := containerLabels(&c.Container, c.ID, node)
		ch <- gauge(cUp, b2f(c.Running), lv...)
		ch <- counter(cCPU, c.CPUSeconds, lv...)
		ch <- gauge(cRAM, float64(c.MemoryBytes), lv...)
	}
	for i := range t.Usage {
		u := &t.Usage[i]
		idx := strconv.Itoa(u.GPU)
		switch u.Owner.Kind {
		case container.OwnerContainer:
			var lv []string
			if c := byID[u.Owner.ID]; c != nil {
				lv = containerLabels(&c.Container, c.ID, node)
			} else {
				lv = containerLabels(nil, u.Owner.ID, node)
			}
			lv = append(lv, idx, u.UUID)
			ch <- counter(cAlloc, u.Total.AllocatedSeconds, lv...)
			ch <- counter(cPresent, u.Total.PresentSeconds, lv...)
			ch <- counter(cUsed, u.Total.UsedSeconds, lv...)
			ch <- counter(cMemBS, u.Total.MemoryByteSeconds, lv...)
			ch <- counter(cEnergy, u.Total.EnergyJoules, lv...)
			ch <- gauge(cUtil, u.SMUtil/100, lv...)
			ch <- gauge(cMem, float64(u.MemoryBytes), lv...)
			ch <- gauge(cShare, u.Share, lv...)
		case container.OwnerHost:
			ch <- counter(hPresent, u.Total.PresentSeconds, u.Owner.ID, idx, u.UUID, node)
			ch <- counter(hUsed, u.Total.UsedSeconds, u.Owner.ID, idx, u.UUID, node)
			ch <- counter(hMemBS, u.Total.MemoryByteSeconds, u.Owner.ID, idx, u.UUID, node)
			ch <- counter(hEnergy, u.Total.EnergyJoules, u.Owner.ID, idx, u.UUID, node)
			ch <- gauge(hUtil, u.SMUtil/100, u.Owner.ID, idx, u.UUID, node)
			ch <- gauge(hMem, float64(u.MemoryBytes), u.Owner.ID, idx, u.UUID, node)
		default:
			ch <- gauge(uMem, float64(u.MemoryBytes), idx, u.UUID, node)
			ch <- counter(uEnergy, u.Total.EnergyJoules, idx, u.UUID, node)
		}
	}
}

// containerLabels gives the label values of ctrLabels. A container the
// inventory does not know (Docker unreachable, say) shows its short ID as
// its name and "unresolved" as its user.
func containerLabels(c *container.Container, id, node string) []string {
	lv := make([]string, 0, len(ctrGPU))
	if c == nil {
		short := id
		if len(short) > 12 {
			short = short[:12]
		}
		return append(lv, short, short, "", "unresolved", "", "", node)
	}
	return append(lv, c.Name, c.ShortID(), c.Image, c.User, c.Team, c.Project, node)
}

func gauge(d *prometheus.Desc, v float64, lv ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
}

func counter(d *prometheus.Desc, v float64, lv ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
