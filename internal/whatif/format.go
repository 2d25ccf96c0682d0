package whatif

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// Formats are the output formats of whatif and advise.
func Formats() []string { return []string{"table", "csv", "json"} }

// SchedConfig is the scheduler's part of the queue's settings, as the
// agent's queue runs with them: the replay places with the same rules.
func SchedConfig(q config.Queue) (queue.Config, error) {
	placement, err := queue.ParsePlacement(q.Placement)
	if err != nil {
		return queue.Config{}, fmt.Errorf("queue.placement: %w", err)
	}
	c := queue.Config{Placement: placement, MaxGPUsPerUser: queue.DefaultMaxGPUsPerUser,
		OutsideMemoryThreshold: q.OutsideMemoryThreshold, SharedMemoryFraction: q.SharedMemoryFraction,
		TargetUtilization: q.TargetUtilization, AgeMax: q.Priority.AgeMax,
		Weights: queue.Weights{FairShare: q.Priority.Weights.FairShare, Age: q.Priority.Weights.Age, Class: q.Priority.Weights.Class}}
	for user, n := range q.MaxGPUsPerUser {
		if user == config.DefaultUserCap {
			c.MaxGPUsPerUser = n
			continue
		}
		if c.UserMaxGPUs == nil {
			c.UserMaxGPUs = map[string]int{}
		}
		c.UserMaxGPUs[user] = n
	}
	for team, n := range q.MaxGPUsPerTeam {
		if team == config.DefaultUserCap {
			c.MaxGPUsPerTeam = n
			continue
		}
		if c.TeamMaxGPUs == nil {
			c.TeamMaxGPUs = map[string]int{}
		}
		c.TeamMaxGPUs[team] = n
	}
	return c, nil
}

// WriteJSON writes the result as its JSON contract.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

var csvHeader = []string{"mode", "gpus", "util_mean", "gpu_hours_held", "wait_p50_s", "wait_p95_s", "wait_max_s",
	"makespan_s", "stretch_p50", "stretch_p95", "jobs_slowed", "gpus_for_p95_wait", "cost", "currency", "over_time_limit", "unplaced"}

// WriteCSV writes one row per mode and GPU count, after a row of the
// measured figures (mode "measured").
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(csvHeader)
	m := r.Measured
	_ = cw.Write([]string{"measured", strconv.Itoa(m.GPUs), num(m.UtilMean), num(m.GPUHoursHeld), num(m.Wait.P50), num(m.Wait.P95), num(m.Wait.Max),
		num(m.MakespanS), "1", "1", "0", "", "", "", "", ""})
	for _, x := range r.Modes {
		g := ""
		if x.GPUsForP95Wait != nil {
			g = strconv.Itoa(*x.GPUsForP95Wait)
		}
		_ = cw.Write([]string{string(x.Mode), strconv.Itoa(x.GPUs), num(x.UtilMean), num(x.GPUHoursHeld), num(x.Wait.P50), num(x.Wait.P95), num(x.Wait.Max),
			num(x.MakespanS), num(x.Stretch.P50), num(x.Stretch.P95), strconv.Itoa(x.JobsSlowed), g, num(x.Cost.Amount), x.Cost.Currency,
			strconv.Itoa(x.OverTimeLimit), strconv.Itoa(x.Unplaced)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes the modes side by side, the measured figures first,
// with the model's assumptions and notes under them.
func (r *Result) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "What-if over %s – %s (replayed from %s): %d holders, %d queue jobs. A replay of measured use under a model.\n\n",
		r.Window.From.Format(time.RFC3339), r.Window.To.Format(time.RFC3339), r.Window.ReplayedFrom.Format(time.RFC3339), r.Model.Holders, r.Model.QueueJobs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []string{"", "measured"}
	for _, x := range r.Modes {
		cols = append(cols, fmt.Sprintf("%s (%d GPUs)", x.Mode, x.GPUs))
	}
	line := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	line(cols...)
	row := func(name, measured string, f func(x ModeResult) string) {
		cells := []string{name, measured}
		for _, x := range r.Modes {
			cells = append(cells, f(x))
		}
		line(cells...)
	}
	m := r.Measured
	waits := r.Model.QueueJobs > 0
	wait := func(f float64) string {
		if !waits {
			return "-"
		}
		return dur(f)
	}
	row("GPU utilisation", pct(m.UtilMean), func(x ModeResult) string { return pct(x.UtilMean) })
	row("GPU-hours held", fmt.Sprintf("%.1f", m.GPUHoursHeld), func(x ModeResult) string { return fmt.Sprintf("%.1f", x.GPUHoursHeld) })
	row("queue wait p50", wait(m.Wait.P50), func(x ModeResult) string { return wait(x.Wait.P50) })
	row("queue wait p95", wait(m.Wait.P95), func(x ModeResult) string { return wait(x.Wait.P95) })
	row("queue wait max", wait(m.Wait.Max), func(x ModeResult) string { return wait(x.Wait.Max) })
	row("makespan", dur(m.MakespanS), func(x ModeResult) string { return dur(x.MakespanS) })
	row("stretch p50 / p95", "1.00 / 1.00", func(x ModeResult) string { return fmt.Sprintf("%.2f / %.2f", x.Stretch.P50, x.Stretch.P95) })
	row("jobs slowed", "-", func(x ModeResult) string { return strconv.Itoa(x.JobsSlowed) })
	row("GPUs for p95 wait", "-", func(x ModeResult) string {
		if x.GPUsForP95Wait == nil {
			return "-"
		}
		return strconv.Itoa(*x.GPUsForP95Wait)
	})
	row("cost", "-", func(x ModeResult) string { return fmt.Sprintf("%.2f %s", x.Cost.Amount, x.Cost.Currency) })
	row("over time limit", "-", func(x ModeResult) string { return strconv.Itoa(x.OverTimeLimit) })
	row("never started", "-", func(x ModeResult) string { return strconv.Itoa(x.Unplaced) })
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nModel (share %d, memory fraction %.2f, switch overhead %.2f, placement %s):\n", r.Model.Share, r.Model.MemoryFraction, r.Model.SwitchOverhead, r.Model.Placement)
	for _, a := range r.Model.Assumptions {
		fmt.Fprintf(w, "  - %s\n", a)
	}
	for _, n := range r.Model.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	return nil
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func pct(f float64) string { return fmt.Sprintf("%.1f %%", 100*f) }

// dur prints seconds as a duration to the minute (to the second under
// one).
func dur(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	d = d.Round(time.Minute)
	if d >= 24*time.Hour {
		days := d / (24 * time.Hour)
		return fmt.Sprintf("%dd%s", days, strings.TrimSuffix((d-days*24*time.Hour).String(), "0s"))
	}
	return strings.TrimSuffix(d.String(), "0s")
}
