package server

import (
	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/units"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// This file turns the domain's audit events, waste findings, usage
// reports, fair share, GPU history and the fleet's nodes into their wire
// shapes in apitype: one function per concept, which every answer that
// carries the concept goes through (the CLI's too, when it reads the
// ledger or a file itself and prints what the API would). The audit
// events', the findings' and the reports' keep the domain value's
// encoding byte for byte, nil slices as null included; wire_test.go holds
// them to it. The others' domain types are not encoded: the fair share's
// conversion writes the half-life in the units grammar and a budget of 0
// as null, the history's renames the fields, the nodes' writes the
// lease's age in seconds and leaves out which job holds a GPU.

// AuditFromLog is events on the wire; none is [], not null.
func AuditFromLog(events []audit.Event) []apitype.AuditEvent {
	out := make([]apitype.AuditEvent, len(events))
	for i, e := range events {
		out[i] = apitype.AuditEvent{
			Time: e.Time, Kind: e.Kind, Rule: e.Rule, FindingID: e.FindingID, Node: e.Node,
			ContainerID: e.ContainerID, Container: e.Container, Owner: e.Owner, Evidence: e.Evidence,
			DryRun: e.DryRun, Outcome: e.Outcome, Attempts: e.Attempts, Error: e.Error,
			Caller: e.Caller, Role: e.Role, Source: e.Source, Action: e.Action, Target: e.Target,
			Status: e.Status, Count: e.Count,
		}
	}
	return out
}

// WasteFromReport is r on the wire; nil stays nil.
func WasteFromReport(r *waste.Report) *apitype.WasteReport {
	if r == nil {
		return nil
	}
	return &apitype.WasteReport{
		From: r.From, To: r.To, Currency: r.Currency,
		Findings: mapSlice(r.Findings, func(f waste.Finding) apitype.WasteFinding {
			return apitype.WasteFinding{
				ID: f.ID, Rule: f.Rule, Node: f.Node, OwnerKind: f.OwnerKind,
				ContainerID: f.ContainerID, Container: f.Container, Image: f.Image,
				Owner: f.Owner, Team: f.Team, Project: f.Project,
				GPUs: mapSlice(f.GPUs, func(g waste.GPURef) apitype.WasteGPU {
					return apitype.WasteGPU{Index: g.Index, UUID: g.UUID, Model: g.Model}
				}),
				Since: f.Since, FirstSeen: f.FirstSeen, Until: f.Until, Active: f.Active,
				Evidence: f.Evidence, WastedGPUHours: f.WastedGPUHours, Cost: f.Cost,
			}
		}),
		Totals: mapSlice(r.Totals, func(t waste.Total) apitype.WasteTotal {
			return apitype.WasteTotal{Rule: t.Rule, Findings: t.Findings, Active: t.Active, WastedGPUHours: t.WastedGPUHours, Cost: t.Cost}
		}),
	}
}

// UsageFromReport is r on the wire.
func UsageFromReport(r *report.Report) apitype.Usage {
	return apitype.Usage{
		From: r.From, To: r.To, By: r.By, Currency: r.Currency,
		Rows:       mapSlice(r.Rows, wireUsageRow),
		Idle:       apitype.UsageIdle{GPUHours: r.Idle.GPUHours, EnergyKWh: r.Idle.EnergyKWh, Cost: r.Idle.Cost, Shared: r.Idle.Shared},
		Totals:     wireUsageRow(r.Totals),
		Basis:      r.Basis,
		IdlePolicy: r.IdlePolicy,
		Unbilled:   apitype.UsageUnbilled{GPUHours: r.Unbilled.GPUHours, Cost: r.Unbilled.Cost},
		Host:       apitype.UsageHost{GPUs: r.Host.GPUs, GPUHours: r.Host.GPUHours, EnergyKWh: r.Host.EnergyKWh, Cost: r.Host.Cost},
		Filtered:   r.Filtered,
		Notes:      r.Notes,
	}
}

func wireUsageRow(x report.Row) apitype.UsageRow {
	out := apitype.UsageRow{
		Key: x.Key, GPUHoursAllocated: x.GPUHoursAllocated, GPUHoursUsed: x.GPUHoursUsed,
		Efficiency: x.Efficiency, EnergyKWh: x.EnergyKWh, PeakGPUMemoryBytes: x.PeakGPUMemoryBytes,
		CPUCoreHours: x.CPUCoreHours, RAMGBHours: x.RAMGBHours, Cost: x.Cost, Containers: x.Containers,
		GPUHoursPresent: x.GPUHoursPresent, GPUHoursHeld: x.GPUHoursHeld, PeakUtilizationPercent: x.PeakUtilizationPercent,
		CostGPU: x.CostGPU, CostCPU: x.CostCPU, CostRAM: x.CostRAM, CostEnergy: x.CostEnergy, CostIdleShare: x.CostIdleShare,
	}
	if j := x.Job; j != nil {
		out.Job = &apitype.UsageJob{
			User: j.User, State: string(j.State), GPUsRequested: j.GPUsRequested,
			SubmittedAt: j.SubmittedAt, StartedAt: j.StartedAt, EndedAt: j.EndedAt,
			WaitedSeconds: j.WaitedSeconds, RanSeconds: j.RanSeconds,
		}
	}
	return out
}

// FairShareFromReport is r on the wire; no rows are [], not null.
func FairShareFromReport(r fairshare.Report) apitype.FairShare {
	out := apitype.FairShare{Basis: r.Basis, HalfLife: units.FormatDuration(r.HalfLife), At: r.At.UTC(),
		Users: make([]apitype.FairShareRow, 0, len(r.Users)), Teams: make([]apitype.FairShareRow, 0, len(r.Teams)),
		Totals: fairShareRow(r.Totals)}
	for _, row := range r.Users {
		out.Users = append(out.Users, fairShareRow(row))
	}
	for _, row := range r.Teams {
		out.Teams = append(out.Teams, fairShareRow(row))
	}
	return out
}

func fairShareRow(r fairshare.Row) apitype.FairShareRow {
	out := apitype.FairShareRow{Name: r.Name, Kind: r.Kind, Team: r.Team, Share: r.Share, NormShare: r.NormShare,
		UsageGPUHours: r.Usage, NormUsage: r.NormUsage, Factor: r.Factor, BudgetUsedGPUHours: r.BudgetUsed, BudgetLifted: r.Lifted}
	if r.Budget > 0 {
		b := r.Budget
		out.BudgetGPUHours = &b
	}
	return out
}

// NodesFromView is the fleet's nodes on the wire; no nodes, and a node
// without GPUs, are [], not null.
func NodesFromView(views []queue.NodeView) apitype.Nodes {
	out := apitype.Nodes{Nodes: make([]apitype.Node, 0, len(views))}
	for _, v := range views {
		n := apitype.Node{Node: v.Node, State: string(v.State), LeaseAgeSeconds: v.LeaseAge.Seconds(), AgentVersion: v.AgentVersion,
			Score: v.Score, SMUtil: v.SMUtil, GPUs: make([]apitype.NodeGPU, 0, len(v.GPUs))}
		for _, g := range v.GPUs {
			n.GPUs = append(n.GPUs, apitype.NodeGPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryBytes: g.MemoryBytes, State: string(g.State)})
		}
		out.Nodes = append(out.Nodes, n)
	}
	return out
}

// HistoryFromLedger is the GPU series hs, of the ledger or of the
// agent's last hour, on the wire; nil stays nil.
func HistoryFromLedger(hs []ledger.GPUHistory) []apitype.GPUHistory {
	return mapSlice(hs, func(h ledger.GPUHistory) apitype.GPUHistory {
		return apitype.GPUHistory{UUID: h.GPU.UUID, Index: h.GPU.Index, Model: h.GPU.Model,
			Points: mapSlice(h.Points, func(p ledger.GPUPoint) apitype.HistoryPoint {
				return apitype.HistoryPoint{T: p.Start, Samples: p.Samples,
					UtilMean: p.UtilMean, UtilMax: p.UtilMax, MemMean: p.MemoryMean, MemMax: p.MemoryMax,
					PowerMean: p.PowerMean, PowerMax: p.PowerMax, TempMean: p.TempMean, TempMax: p.TempMax}
			})}
	})
}

// mapSlice is f of each element of in; nil stays nil, so that a null in
// the domain's encoding stays one on the wire.
func mapSlice[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
