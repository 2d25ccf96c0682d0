package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpumeter/gpumeter/internal/cost"
)

// WriteJSON writes the report as one indented JSON object (the contract in
// docs/design.md) and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people, aligned as docker ps aligns:
// the rows, their TOTAL, the idle pool, Unbilled when the basis is not
// allocated, and what the HOST metered (whatever the filter), then the
// report's notes. On those last lines the ALLOC GPU-H column holds the
// line's own GPU-hours: nobody's, not charged, and all the host metered.
// HELD GPU-H and EFF are "-" where the row has no held GPU-hours. Figures
// are rounded for reading: GPU-hours, core-hours, GiB-hours and cost to 2
// decimals, kWh to 3, memory in GiB.
//
// By job, the columns are those of a job's bill instead (see
// writeJobTable).
func (r *Report) WriteTable(w io.Writer) error {
	if r.By == ByJob {
		return r.writeJobTable(w)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	shared := r.Idle.Shared
	head := []string{strings.ToUpper(r.By), "ALLOC GPU-H", "HELD GPU-H", "PRESENT GPU-H", "USED GPU-H", "EFF", "ENERGY kWh",
		"PEAK MEM", "PEAK UTIL", "CPU CORE-H", "RAM GiB-H", "CONTAINERS"}
	if shared {
		head = append(head, "IDLE SHARE")
	}
	head = append(head, "COST "+r.Currency)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	row := func(x *Row) {
		held, eff := "-", "-"
		if x.GPUHoursHeld != nil {
			held = fixed(*x.GPUHoursHeld, 2)
			if *x.GPUHoursHeld > 0 {
				eff = fixed(100*x.Efficiency, 1) + "%"
			}
		}
		f := []string{x.Key, fixed(x.GPUHoursAllocated, 2), held, fixed(x.GPUHoursPresent, 2), fixed(x.GPUHoursUsed, 2),
			eff, fixed(x.EnergyKWh, 3), gibString(x.PeakGPUMemoryBytes),
			fixed(x.PeakUtilizationPercent, 0) + "%", fixed(x.CPUCoreHours, 2), fixed(x.RAMGBHours, 2),
			strconv.Itoa(x.Containers)}
		if shared {
			f = append(f, fixed(x.CostIdleShare, 2))
		}
		f = append(f, fixed(x.Cost, 2))
		fmt.Fprintln(tw, strings.Join(f, "\t"))
	}
	// other writes a line that is not a row: GPU-hours, energy and cost.
	other := func(key string, hours float64, kWh string, cost string) {
		f := []string{key, fixed(hours, 2), "-", "-", "-", "-", kWh, "-", "-", "-", "-", "-"}
		if shared {
			f = append(f, "-")
		}
		f = append(f, cost)
		fmt.Fprintln(tw, strings.Join(f, "\t"))
	}
	for i := range r.Rows {
		row(&r.Rows[i])
	}
	t := r.Totals
	t.Key = "TOTAL"
	row(&t)
	idleCost := fixed(r.Idle.Cost, 2)
	if shared {
		idleCost = "(shared " + idleCost + ")"
	}
	other("(idle)", r.Idle.GPUHours, fixed(r.Idle.EnergyKWh, 3), idleCost)
	if r.Basis != cost.BasisAllocated {
		other("(unbilled)", r.Unbilled.GPUHours, "-", fixed(r.Unbilled.Cost, 2))
	}
	other("HOST", r.Host.GPUHours, fixed(r.Host.EnergyKWh, 3), fixed(r.Host.Cost, 2))
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeNotes(w)
}

// writeNotes writes the report's notes under its table.
func (r *Report) writeNotes(w io.Writer) error {
	for _, n := range r.Notes {
		if _, err := fmt.Fprintf(w, "\nnote: %s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// csvHeader are the columns of WriteCSV.
var csvHeader = []string{
	"kind", "key",
	"gpu_hours_allocated", "gpu_hours_present", "gpu_hours_used", "gpu_hours_idle", "gpu_hours_unbilled",
	"efficiency", "energy_kwh", "peak_gpu_memory_bytes", "peak_utilization_percent",
	"cpu_core_hours", "ram_gb_hours", "containers",
	"cost_gpu", "cost_cpu", "cost_ram", "cost_energy", "cost_idle_share", "cost", "currency",
	"gpu_hours_held",
}

// WriteCSV writes the report for machines in machine units (hours, kWh,
// bytes), one line per row, then kind "total" (the rows' sum), "idle" and,
// when the basis is not allocated, "unbilled". Columns that do not apply
// to a kind are empty, and so is gpu_hours_held where it is unknown (null
// in JSON). Columns added later go at the end, so that the older ones
// keep their place. By job, the job's columns (jobCSVHeader) follow, empty
// on lines that are not a job.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	header := csvHeader
	if r.By == ByJob {
		header = append(slices.Clip(header), jobCSVHeader...)
	}
	cw.Write(header)
	row := func(kind string, x *Row) {
		f := []string{kind, x.Key,
			num(x.GPUHoursAllocated), num(x.GPUHoursPresent), num(x.GPUHoursUsed), "", "",
			num(x.Efficiency), num(x.EnergyKWh), strconv.FormatUint(x.PeakGPUMemoryBytes, 10), num(x.PeakUtilizationPercent),
			num(x.CPUCoreHours), num(x.RAMGBHours), strconv.Itoa(x.Containers),
			num(x.CostGPU), num(x.CostCPU), num(x.CostRAM), num(x.CostEnergy), num(x.CostIdleShare), num(x.Cost), r.Currency,
			optNum(x.GPUHoursHeld)}
		if r.By == ByJob {
			f = append(f, jobCSV(x)...)
		}
		cw.Write(f)
	}
	for i := range r.Rows {
		row("row", &r.Rows[i])
	}
	row("total", &r.Totals)
	// other writes a line that is not a row, filling the named columns.
	other := func(kind string, kv ...string) {
		f := make([]string, len(header))
		f[0], f[1], f[slices.Index(csvHeader, "currency")] = kind, "("+kind+")", r.Currency
		for i := 0; i < len(kv); i += 2 {
			f[slices.Index(csvHeader, kv[i])] = kv[i+1]
		}
		cw.Write(f)
	}
	other("idle", "gpu_hours_idle", num(r.Idle.GPUHours), "energy_kwh", num(r.Idle.EnergyKWh), "cost", num(r.Idle.Cost))
	if r.Basis != cost.BasisAllocated {
		other("unbilled", "gpu_hours_unbilled", num(r.Unbilled.GPUHours), "cost", num(r.Unbilled.Cost))
	}
	cw.Flush()
	return cw.Error()
}

// num formats a number for machines: rounded to 12 significant digits,
// without exponent.
func num(v float64) string {
	if v = round(v); v == 0 {
		return "0" // and never "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// optNum is num for a figure that may be unknown: "" then.
func optNum(v *float64) string {
	if v == nil {
		return ""
	}
	return num(*v)
}

// fixed formats a number for people with prec decimals.
func fixed(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.HasPrefix(s, "-") && strings.Trim(s, "-0.") == "" {
		return s[1:]
	}
	return s
}

func gibString(b uint64) string { return fixed(float64(b)/bytesPerGiB, 2) + " GiB" }
