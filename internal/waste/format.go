package waste

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

// Formats are the output formats of a waste report.
func Formats() []string { return []string{"table", "csv", "json"} }

// WriteJSON writes the report as one indented JSON object and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people, aligned as docker ps aligns:
// a line per finding, then each rule's total and the grand total. Times
// are UTC to the minute, GPU-hours and cost to 2 decimals.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join([]string{"RULE", "WHO", "OWNER", "GPUS", "SINCE", "FOR", "NOW", "WASTED GPU-H", "COST " + r.Currency, "EVIDENCE"}, "\t"))
	for i := range r.Findings {
		f := &r.Findings[i]
		now := "-"
		if f.Active {
			now = "yes"
		}
		fmt.Fprintln(tw, strings.Join([]string{f.Rule, who(f), dash(f.Owner), gpuList(f.GPUs), f.Since.Format("2006-01-02 15:04"),
			duration(f.Until.Sub(f.Since)), now, fixed(f.WastedGPUHours, 2), fixed(f.Cost, 2), Summary(f)}, "\t"))
	}
	for _, t := range r.Totals {
		if t.Findings == 0 && t.Rule != TotalKey {
			continue
		}
		key := "(" + t.Rule + ")"
		if t.Rule == TotalKey {
			key = "TOTAL"
		}
		fmt.Fprintln(tw, strings.Join([]string{key, strconv.Itoa(t.Findings) + " found", "-", "-", "-", "-", strconv.Itoa(t.Active),
			fixed(t.WastedGPUHours, 2), fixed(t.Cost, 2), ""}, "\t"))
	}
	return tw.Flush()
}

// csvHeader are the columns of WriteCSV.
var csvHeader = []string{
	"rule", "id", "node", "owner_kind", "container_id", "container", "owner", "team", "project",
	"gpus", "gpu_uuids", "since", "first_seen", "until", "active", "wasted_gpu_hours", "cost", "currency", "evidence",
}

// WriteCSV writes one line per finding in machine units; evidence is
// name=value pairs joined by ";", names sorted.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	for i := range r.Findings {
		f := &r.Findings[i]
		var uuids []string
		for _, g := range f.GPUs {
			uuids = append(uuids, g.UUID)
		}
		var ev []string
		for _, k := range slices.Sorted(maps.Keys(f.Evidence)) {
			ev = append(ev, k+"="+num(f.Evidence[k]))
		}
		cw.Write([]string{f.Rule, f.ID, f.Node, f.OwnerKind, f.ContainerID, f.Container, f.Owner, f.Team, f.Project,
			gpuList(f.GPUs), strings.Join(uuids, " "), f.Since.Format(time.RFC3339), f.FirstSeen.Format(time.RFC3339), f.Until.Format(time.RFC3339),
			strconv.FormatBool(f.Active), num(f.WastedGPUHours), num(f.Cost), r.Currency, strings.Join(ev, ";")})
	}
	cw.Flush()
	return cw.Error()
}

// Summary puts a finding's evidence in a few words.
func Summary(f *Finding) string {
	e := f.Evidence
	switch f.Rule {
	case config.RuleIdle:
		return fmt.Sprintf("SM %s%% (max %s%%) < %s%%, CPU %s cores (max %s) < %s", fixed(e[EvSMPercent], 1), fixed(e[EvSMPercentMax], 1),
			num(e[EvThreshold]), fixed(e[EvCPUCores], 2), fixed(e[EvCPUCoresMax], 2), num(e[EvThresholdCPU]))
	case config.RuleStalled:
		return fmt.Sprintf("%s GPU memory held, SM %s%%, CPU %s cores", gib(e[EvMemoryBytes]), fixed(e[EvSMPercentMax], 1), fixed(e[EvCPUCores], 2))
	case config.RuleOverAllocated:
		return fmt.Sprintf("uses %s of %s GPUs: SM %s%% on them, %s%% on the rest over %s", num(e[EvGPUsUsed]), num(e[EvGPUsHeld]),
			fixed(e[EvSMPercentUsed], 1), fixed(e[EvSMPercent], 1), duration(seconds(e[EvWindow])))
	case config.RuleTooOld:
		return fmt.Sprintf("running %s, max %s", duration(seconds(e[EvAge])), duration(seconds(e[EvMaxAge])))
	case config.RuleLowEfficiency:
		return fmt.Sprintf("efficiency %s%% < %s%% over %s (%s of %s held GPU-h used)", fixed(100*e[EvEfficiency], 1), num(100*e[EvThreshold]),
			duration(seconds(e[EvWindow])), fixed(e[EvUsedHours], 2), fixed(e[EvHeldHours], 2))
	case config.RuleOutside:
		if _, ok := e[EvUnaccounted]; ok {
			return fmt.Sprintf("%s of GPU memory no process accounts for (max %s)", gib(e[EvUnaccounted]), gib(e[EvUnaccountedMax]))
		}
		return fmt.Sprintf("process outside containers: %s GPU-h present, SM %s%%, %s", fixed(e[EvPresentHours], 2), fixed(e[EvSMPercent], 1), gib(e[EvMemoryBytes]))
	}
	return ""
}

func who(f *Finding) string {
	switch {
	case f.Container != "":
		return f.Container
	case f.OwnerKind == OwnerHost:
		return "(host)"
	case len(f.GPUs) > 0 && f.Evidence[EvUnaccounted] > 0:
		return "(gpu)"
	}
	return "(unresolved)"
}

func gpuList(gs []GPURef) string {
	if len(gs) == 0 {
		return "-"
	}
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = strconv.Itoa(g.Index)
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// duration writes d as 3d4h, 5h20m, 12m or 40s.
func duration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

func gib(b float64) string { return fixed(b/(1<<30), 1) + " GiB" }

// num formats a number for machines: 12 significant digits, no exponent.
func num(v float64) string {
	if v = round(v); v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// fixed formats a number for people with prec decimals.
func fixed(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.HasPrefix(s, "-") && strings.Trim(s, "-0.") == "" {
		return s[1:]
	}
	return s
}
