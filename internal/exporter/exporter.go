// Package exporter renders the latest tick as Prometheus metrics: per-GPU
// values under dcgm-exporter's names and labels, so dashboards built for it
// work unchanged, and gpumeter's own per-container, per-user and health
// series. A scrape reads the published tick and never waits on a source.
//
// The tick is written straight into the text exposition format. A busy
// node has thousands of series, and building client_golang's metric
// objects for each of them on every scrape cost more than twice the
// scrape budget; the exporter's own Go and process metrics still come from
// client_golang, and the handler serves both as promhttp would.
package exporter

import (
	"math"
	"strconv"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// family is one metric family: its name, help and type.
type family struct {
	name, help, typ string
}

// dcgm lists the per-GPU values with dcgm-exporter's names, help and units.
var dcgm = []struct {
	family
	field gpu.Field // "" when always present
	value func(*gpu.Device) float64
}{
	{family{"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "gauge"}, gpu.FieldSMClock, func(d *gpu.Device) float64 { return d.SMClockMHz }},
	{family{"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "gauge"}, gpu.FieldMemClock, func(d *gpu.Device) float64 { return d.MemClockMHz }},
	{family{"DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "gauge"}, gpu.FieldMemTemp, func(d *gpu.Device) float64 { return d.MemTempC }},
	{family{"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge"}, gpu.FieldTemp, func(d *gpu.Device) float64 { return d.TempC }},
	{family{"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gauge"}, gpu.FieldPower, func(d *gpu.Device) float64 { return d.PowerWatts }},
	{family{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", "counter"}, gpu.FieldEnergy, func(d *gpu.Device) float64 { return float64(d.EnergyMilliJoules) }},
	{family{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge"}, gpu.FieldUtil, func(d *gpu.Device) float64 { return d.Util }},
	{family{"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "gauge"}, gpu.FieldMemCopyUtil, func(d *gpu.Device) float64 { return d.MemCopyUtil }},
	{family{"DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", "gauge"}, gpu.FieldEncUtil, func(d *gpu.Device) float64 { return d.EncUtil }},
	{family{"DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", "gauge"}, gpu.FieldDecUtil, func(d *gpu.Device) float64 { return d.DecUtil }},
	{family{"DCGM_FI_DEV_FB_FREE", "Frame buffer memory free (in MiB).", "gauge"}, "", func(d *gpu.Device) float64 { return float64(d.MemoryFree >> 20) }},
	{family{"DCGM_FI_DEV_FB_USED", "Frame buffer memory used (in MiB).", "gauge"}, "", func(d *gpu.Device) float64 { return float64(d.MemoryUsed >> 20) }},
}

// gpuSeries are gpumeter's per-GPU series, from the device and its books.
var gpuSeries = []struct {
	family
	value func(*gpu.Device, *meter.GPU) float64
}{
	{family{"gpumeter_gpu_mig_enabled", "1 when the GPU is in MIG mode.", "gauge"}, func(d *gpu.Device, _ *meter.GPU) float64 { return b2f(d.MIGEnabled) }},
	{family{"gpumeter_gpu_memory_total_bytes", "GPU memory in all.", "gauge"}, func(d *gpu.Device, _ *meter.GPU) float64 { return float64(d.MemoryTotal) }},
	{family{"gpumeter_gpu_holders", "Running containers that hold the GPU.", "gauge"}, func(_ *gpu.Device, g *meter.GPU) float64 { return float64(g.Holders) }},
	{family{"gpumeter_gpu_unattributed_utilization_ratio", "Utilisation that no process accounts for, now.", "gauge"}, func(_ *gpu.Device, g *meter.GPU) float64 { return g.UnattributedUtil / 100 }},
	{family{"gpumeter_gpu_metered_seconds_total", "Time the GPU was metered.", "counter"}, func(_ *gpu.Device, g *meter.GPU) float64 { return g.Total.Seconds }},
	{family{"gpumeter_gpu_allocated_seconds_total", "Time some running container held the GPU.", "counter"}, func(_ *gpu.Device, g *meter.GPU) float64 { return g.Total.AllocatedSeconds }},
	{family{"gpumeter_gpu_idle_seconds_total", "Time no container held the GPU: the idle pool.", "counter"}, func(_ *gpu.Device, g *meter.GPU) float64 { return g.Total.IdleSeconds }},
	{family{"gpumeter_gpu_unattributed_seconds_total", "Utilisation-weighted GPU time that no process accounts for.", "counter"}, func(_ *gpu.Device, g *meter.GPU) float64 { return g.Total.UnattributedSeconds }},
	{family{"gpumeter_gpu_energy_joules_total", "Energy the GPU used while metered.", "counter"}, func(_ *gpu.Device, g *meter.GPU) float64 { return g.Total.EnergyJoules }},
	{family{"gpumeter_gpu_idle_energy_joules_total", "Energy booked to no owner: the idle pool.", "counter"}, func(_ *gpu.Device, g *meter.GPU) float64 { return g.Total.IdleEnergyJoules }},
	{family{"gpumeter_gpu_energy_resets_total", "Times the GPU's energy counter went backwards (driver reload).", "counter"}, func(_ *gpu.Device, g *meter.GPU) float64 { return float64(g.Total.EnergyResets) }},
}

// usageSeries are the per-owner, per-GPU series; host users and
// containers have the same figures under their own names.
var usageSeries = []struct {
	ctr, host family // host.name == "" when host users have no such series
	value     func(*meter.Usage) float64
}{
	{family{"gpumeter_container_gpu_allocated_seconds_total", "GPU time allocated to the container: its share of the GPU times seconds.", "counter"}, family{}, func(u *meter.Usage) float64 { return u.Total.AllocatedSeconds }},
	{family{"gpumeter_container_gpu_held_seconds_total", "Time the container held the GPU, not split among the containers that share it: efficiency is used over held seconds.", "counter"}, family{}, func(u *meter.Usage) float64 { return u.Total.HeldSeconds }},
	{family{"gpumeter_container_gpu_present_seconds_total", "Time the container had a process on the GPU.", "counter"}, family{"gpumeter_host_gpu_present_seconds_total", "Time a user's processes outside containers were on the GPU.", "counter"}, func(u *meter.Usage) float64 { return u.Total.PresentSeconds }},
	{family{"gpumeter_container_gpu_used_seconds_total", "SM-weighted GPU time the container used.", "counter"}, family{"gpumeter_host_gpu_used_seconds_total", "SM-weighted GPU time used by a user's processes outside containers.", "counter"}, func(u *meter.Usage) float64 { return u.Total.UsedSeconds }},
	{family{"gpumeter_container_gpu_memory_byte_seconds_total", "GPU memory the container held, integrated over time.", "counter"}, family{"gpumeter_host_gpu_memory_byte_seconds_total", "GPU memory held by a user's processes outside containers, integrated over time.", "counter"}, func(u *meter.Usage) float64 { return u.Total.MemoryByteSeconds }},
	{family{"gpumeter_container_gpu_energy_joules_total", "GPU energy attributed to the container.", "counter"}, family{"gpumeter_host_gpu_energy_joules_total", "GPU energy attributed to a user's processes outside containers.", "counter"}, func(u *meter.Usage) float64 { return u.Total.EnergyJoules }},
	{family{"gpumeter_container_gpu_utilization_ratio", "The container's share of the GPU's SM time now (0..1).", "gauge"}, family{"gpumeter_host_gpu_utilization_ratio", "A user's share of the GPU's SM time now, outside containers (0..1).", "gauge"}, func(u *meter.Usage) float64 { return u.SMUtil / 100 }},
	{family{"gpumeter_container_gpu_memory_bytes", "GPU memory the container holds now.", "gauge"}, family{"gpumeter_host_gpu_memory_bytes", "GPU memory a user's processes outside containers hold now.", "gauge"}, func(u *meter.Usage) float64 { return float64(u.MemoryBytes) }},
	{family{"gpumeter_container_gpu_allocation_share", "The container's allocation share of the GPU now (1/n for n holders).", "gauge"}, family{}, func(u *meter.Usage) float64 { return u.Share }},
}

var ctrSeries = []struct {
	family
	value func(*meter.Container) float64
}{
	{family{"gpumeter_container_running", "1 while the container runs.", "gauge"}, func(c *meter.Container) float64 { return b2f(c.Running) }},
	{family{"gpumeter_container_cpu_seconds_total", "CPU time of the container's cgroup.", "counter"}, func(c *meter.Container) float64 { return c.CPUSeconds }},
	{family{"gpumeter_container_memory_bytes", "Resident memory of the container's cgroup.", "gauge"}, func(c *meter.Container) float64 { return float64(c.MemoryBytes) }},
}

var (
	famGPUUp      = family{"gpumeter_gpu_up", "1 when the GPU was read at the latest sample, 0 when reading it failed.", "gauge"}
	famGPUErrs    = family{"gpumeter_gpu_read_errors_total", "Failed reads of the GPU.", "counter"}
	famMissing    = family{"gpumeter_gpu_value_unavailable", "1 for each value the GPU does not report (e.g. utilisation under MIG), which is then left out rather than shown as zero.", "gauge"}
	famMIGUsed    = family{"gpumeter_mig_instance_memory_used_bytes", "Memory used on a MIG GPU instance.", "gauge"}
	famMIGTotal   = family{"gpumeter_mig_instance_memory_total_bytes", "Memory of a MIG GPU instance.", "gauge"}
	famUnresMem   = family{"gpumeter_unresolved_gpu_memory_bytes", "GPU memory held by processes whose owner could not be found.", "gauge"}
	famUnresE     = family{"gpumeter_unresolved_gpu_energy_joules_total", "GPU energy attributed to processes whose owner could not be found.", "counter"}
	famSrcUp      = family{"gpumeter_source_up", "1 when the source answered at the latest sample.", "gauge"}
	famSrcDur     = family{"gpumeter_source_duration_seconds", "How long the source took at the latest sample.", "gauge"}
	famSrcErrs    = family{"gpumeter_source_errors_total", "Failed reads of the source.", "counter"}
	famTickDur    = family{"gpumeter_tick_duration_seconds", "How long the latest sample took, sources and meter together.", "gauge"}
	famTicks      = family{"gpumeter_ticks_total", "Samples taken.", "counter"}
	famMissed     = family{"gpumeter_ticks_missed_total", "Samples that could not run on time.", "counter"}
	famLastTick   = family{"gpumeter_last_tick_timestamp_seconds", "When the latest sample was taken.", "gauge"}
	famUnresolved = family{"gpumeter_unresolved_processes", "GPU processes at the latest sample whose owner could not be found.", "gauge"}
	famResErrs    = family{"gpumeter_process_resolve_errors_total", "Failed lookups of a GPU process's owner.", "counter"}
)

// Render appends the tick's metrics in the text exposition format to b.
// Families come out in a fixed order and series in the tick's order, so
// the same tick always renders the same bytes. A nil tick renders nothing.
func Render(b []byte, t *sampler.Tick) []byte {
	if t == nil || t.Tick == nil {
		return b
	}
	w := writer{b: b}
	node := t.Node
	nodeLabel := w.labels(nil, "Hostname", node)
	h := &t.Health

	// Per-GPU label sets, rendered once and reused by every family.
	dcgmLabels := make([][]byte, len(t.Sample.Devices))
	gpuLabels := make([][]byte, len(t.Sample.Devices))
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		idx := strconv.Itoa(d.Index)
		dcgmLabels[i] = w.labels(nil, "DCGM_FI_DRIVER_VERSION", t.Sample.DriverVersion, "Hostname", node, "UUID", d.UUID, "device", "nvidia"+idx, "gpu", idx, "modelName", d.Model)
		gpuLabels[i] = w.labels(nil, "Hostname", node, "UUID", d.UUID, "gpu", idx)
	}

	for _, m := range dcgm {
		w.family(m.family)
		for i := range t.Sample.Devices {
			d := &t.Sample.Devices[i]
			if d.Err == nil && (m.field == "" || d.Has(m.field)) {
				w.sample(m.name, dcgmLabels[i], m.value(d))
			}
		}
	}

	w.family(famGPUUp)
	for i := range t.Sample.Devices {
		w.sample(famGPUUp.name, gpuLabels[i], b2f(t.Sample.Devices[i].Err == nil))
	}
	w.family(famGPUErrs)
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		w.sample(famGPUErrs.name, gpuLabels[i], float64(h.GPUReadErrors[meter.GPUKey(d.UUID, d.Index)]))
	}
	w.family(famMissing)
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		if d.Err != nil {
			continue
		}
		for _, f := range d.Missing {
			w.sample(famMissing.name, w.labels(nil, "Hostname", node, "UUID", d.UUID, "field", string(f), "gpu", strconv.Itoa(d.Index)), 1)
		}
	}
	for _, m := range gpuSeries {
		w.family(m.family)
		for i := range t.Sample.Devices {
			if d := &t.Sample.Devices[i]; d.Err == nil && i < len(t.GPUs) {
				w.sample(m.name, gpuLabels[i], m.value(d, &t.GPUs[i]))
			}
		}
	}
	for _, fam := range []family{famMIGUsed, famMIGTotal} {
		w.family(fam)
		for i := range t.Sample.Devices {
			d := &t.Sample.Devices[i]
			if d.Err != nil {
				continue
			}
			for _, mi := range d.MIG {
				lv := w.labels(nil, "Hostname", node, "UUID", d.UUID, "gpu", strconv.Itoa(d.Index), "gpu_instance", strconv.Itoa(mi.GPUInstanceID), "mig_uuid", mi.UUID, "profile", mi.Profile)
				v := mi.MemoryUsed
				if fam == famMIGTotal {
					v = mi.MemoryTotal
				}
				w.sample(fam.name, lv, float64(v))
			}
		}
	}

	// Containers: label sets by container ID, for the per-container and
	// the per-GPU series.
	byID := make(map[string]*meter.Container, len(t.Containers))
	ctrLabels := make([][]byte, len(t.Containers))
	for i := range t.Containers {
		c := &t.Containers[i]
		byID[c.ID] = c
		ctrLabels[i] = containerLabels(&w, &c.Container, c.ID, node, "", "")
	}
	for _, m := range ctrSeries {
		w.family(m.family)
		for i := range t.Containers {
			w.sample(m.name, ctrLabels[i], m.value(&t.Containers[i]))
		}
	}
	usageLabels := make([][]byte, len(t.Usage))
	for i := range t.Usage {
		u := &t.Usage[i]
		idx := strconv.Itoa(u.GPU)
		switch u.Owner.Kind {
		case container.OwnerContainer:
			var c *container.Container
			if mc := byID[u.Owner.ID]; mc != nil {
				c = &mc.Container
			}
			usageLabels[i] = containerLabels(&w, c, u.Owner.ID, node, idx, u.UUID)
		case container.OwnerHost:
			usageLabels[i] = w.labels(nil, "Hostname", node, "UUID", u.UUID, "gpu", idx, "user", u.Owner.ID)
		default:
			usageLabels[i] = w.labels(nil, "Hostname", node, "UUID", u.UUID, "gpu", idx)
		}
	}
	for _, kind := range []container.OwnerKind{container.OwnerContainer, container.OwnerHost} {
		for _, m := range usageSeries {
			fam := m.ctr
			if kind == container.OwnerHost {
				fam = m.host
			}
			if fam.name == "" {
				continue
			}
			w.family(fam)
			for i := range t.Usage {
				if u := &t.Usage[i]; u.Owner.Kind == kind {
					w.sample(fam.name, usageLabels[i], m.value(u))
				}
			}
		}
	}
	w.family(famUnresMem)
	for i := range t.Usage {
		if u := &t.Usage[i]; u.Owner.Kind == container.OwnerNone {
			w.sample(famUnresMem.name, usageLabels[i], float64(u.MemoryBytes))
		}
	}
	w.family(famUnresE)
	for i := range t.Usage {
		if u := &t.Usage[i]; u.Owner.Kind == container.OwnerNone {
			w.sample(famUnresE.name, usageLabels[i], u.Total.EnergyJoules)
		}
	}

	srcLabels := make([][]byte, len(h.Sources))
	for i, s := range h.Sources {
		srcLabels[i] = w.labels(nil, "Hostname", node, "source", s.Name)
	}
	w.family(famSrcUp)
	for i, s := range h.Sources {
		w.sample(famSrcUp.name, srcLabels[i], b2f(s.OK))
	}
	w.family(famSrcDur)
	for i, s := range h.Sources {
		w.sample(famSrcDur.name, srcLabels[i], s.Duration.Seconds())
	}
	w.family(famSrcErrs)
	for i, s := range h.Sources {
		w.sample(famSrcErrs.name, srcLabels[i], float64(s.Errors))
	}
	for _, s := range []struct {
		family
		v float64
	}{
		{famTickDur, h.TickDuration.Seconds()},
		{famTicks, float64(h.Ticks)},
		{famMissed, float64(h.Missed)},
		{famUnresolved, float64(h.Unresolved)},
		{famResErrs, float64(h.ResolveErrors)},
	} {
		w.family(s.family)
		w.sample(s.name, nodeLabel, s.v)
	}
	if !t.Time.IsZero() {
		w.family(famLastTick)
		w.sample(famLastTick.name, nodeLabel, float64(t.Time.UnixNano())/1e9)
	}
	return w.b
}

// containerLabels renders a container's label set, with gpu and UUID when
// gpu is set. A container the inventory does not know (Docker unreachable,
// say) shows its short ID as its name and "unresolved" as its user.
// job_id is the queue job the container runs, node/id for another node's
// job (two agents on one engine each meter the other's jobs, and their
// ids collide), "" for other containers (job is Prometheus' own label):
// one value for a container's whole life, so it adds no series.
func containerLabels(w *writer, c *container.Container, id, node, gpuIdx, uuid string) []byte {
	name, short, image, user, team, project := "", container.ShortID(id), "", "unresolved", "", ""
	if c == nil {
		name = short
	} else {
		name, image, user, team, project = c.Name, c.Image, c.User, c.Team, c.Project
	}
	job := ""
	if c != nil {
		job = c.Job(node).On(node)
	}
	if gpuIdx == "" {
		return w.labels(nil, "Hostname", node, "container", name, "container_id", short, "image", image, "job_id", job, "project", project, "team", team, "user", user)
	}
	return w.labels(nil, "Hostname", node, "UUID", uuid, "container", name, "container_id", short, "gpu", gpuIdx, "image", image, "job_id", job, "project", project, "team", team, "user", user)
}

// writer appends the text exposition format to b.
type writer struct {
	b []byte
}

func (w *writer) family(f family) {
	w.b = append(w.b, "# HELP "...)
	w.b = append(w.b, f.name...)
	w.b = append(w.b, ' ')
	w.b = appendEscaped(w.b, f.help, false)
	w.b = append(w.b, "\n# TYPE "...)
	w.b = append(w.b, f.name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, f.typ...)
	w.b = append(w.b, '\n')
}

// labels renders name/value pairs, given in name order, as {a="1",b="2"}.
func (w *writer) labels(dst []byte, pairs ...string) []byte {
	dst = append(dst, '{')
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, pairs[i]...)
		dst = append(dst, '=', '"')
		dst = appendEscaped(dst, pairs[i+1], true)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

func (w *writer) sample(name string, labels []byte, v float64) {
	w.b = append(w.b, name...)
	w.b = append(w.b, labels...)
	w.b = append(w.b, ' ')
	switch {
	case math.IsNaN(v):
		w.b = append(w.b, "NaN"...)
	case math.IsInf(v, +1):
		w.b = append(w.b, "+Inf"...)
	case math.IsInf(v, -1):
		w.b = append(w.b, "-Inf"...)
	default:
		w.b = strconv.AppendFloat(w.b, v, 'g', -1, 64)
	}
	w.b = append(w.b, '\n')
}

// appendEscaped escapes backslash and newline, and in label values the
// double quote, as the text format requires. Invalid UTF-8 is replaced, so
// a container name from outside can never break the exposition.
func appendEscaped(dst []byte, s string, quote bool) []byte {
	for _, r := range s {
		switch {
		case r == '\\':
			dst = append(dst, `\\`...)
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '"' && quote:
			dst = append(dst, `\"`...)
		default:
			dst = utf8Append(dst, r)
		}
	}
	return dst
}

func utf8Append(dst []byte, r rune) []byte {
	if r < 0x80 {
		return append(dst, byte(r))
	}
	return append(dst, string(r)...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
