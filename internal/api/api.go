// Package api serves the live tick as JSON under /api/v1 and a small HTML
// page at /, and holds the typed client the command line uses to read it.
package api

import (
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// GPU is one GPU in /api/v1/gpus.
type GPU struct {
	Index            int        `json:"index"`
	UUID             string     `json:"uuid"`
	Model            string     `json:"model"`
	Error            string     `json:"error,omitempty"`
	MemoryTotalBytes uint64     `json:"memory_total_bytes"`
	MemoryUsedBytes  uint64     `json:"memory_used_bytes"`
	UtilPercent      *float64   `json:"utilization_percent"` // null where the GPU does not report it (MIG)
	PowerWatts       *float64   `json:"power_watts"`
	TemperatureC     *float64   `json:"temperature_c"`
	Unavailable      []string   `json:"unavailable,omitempty"`
	MIGEnabled       bool       `json:"mig_enabled"`
	MIG              []MIG      `json:"mig,omitempty"`
	Holders          int        `json:"holders"`
	UnattributedPct  float64    `json:"unattributed_utilization_percent"`
	Processes        []Process  `json:"processes"`
	Totals           GPUTotals  `json:"totals"`
	Owners           []GPUShare `json:"owners"`
}

// MIG is one MIG instance of a GPU.
type MIG struct {
	GPUInstanceID    int    `json:"gpu_instance"`
	UUID             string `json:"uuid"`
	Profile          string `json:"profile"`
	MemoryTotalBytes uint64 `json:"memory_total_bytes"`
	MemoryUsedBytes  uint64 `json:"memory_used_bytes"`
}

// Process is one process on a GPU with its owner.
type Process struct {
	PID         uint32  `json:"pid"`
	Type        string  `json:"type"`
	OwnerKind   string  `json:"owner_kind"` // container, host or none
	Owner       string  `json:"owner"`      // container ID or user name
	MemoryBytes uint64  `json:"memory_bytes"`
	SMPercent   float64 `json:"sm_util_percent"`
}

// GPUTotals are a GPU's counters since the agent started.
type GPUTotals struct {
	MeteredSeconds      float64 `json:"metered_seconds"`
	AllocatedSeconds    float64 `json:"allocated_seconds"`
	IdleSeconds         float64 `json:"idle_seconds"`
	UnattributedSeconds float64 `json:"unattributed_seconds"`
	EnergyJoules        float64 `json:"energy_joules"`
	IdleEnergyJoules    float64 `json:"idle_energy_joules"`
}

// GPUShare is one owner's use of one GPU: the rows of `gpumeter ps`.
type GPUShare struct {
	OwnerKind        string  `json:"owner_kind"`
	Owner            string  `json:"owner"`
	GPU              int     `json:"gpu"`
	UUID             string  `json:"uuid"`
	Share            float64 `json:"share"`
	SMPercent        float64 `json:"sm_util_percent"`
	MemoryBytes      uint64  `json:"memory_bytes"`
	Processes        int     `json:"processes"`
	AllocatedSeconds float64 `json:"allocated_seconds"`
	// HeldSeconds is the whole time a container held the GPU, shared or
	// not: used over held seconds is its efficiency.
	HeldSeconds     float64 `json:"held_seconds"`
	PresentSeconds  float64 `json:"present_seconds"`
	UsedSeconds     float64 `json:"used_seconds"`
	EnergyJoules    float64 `json:"energy_joules"`
	PeakMemoryBytes uint64  `json:"peak_memory_bytes"`
}

// Container is one container in /api/v1/containers.
type Container struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Image       string            `json:"image"`
	Labels      map[string]string `json:"labels"`
	User        string            `json:"user"`
	Team        string            `json:"team"`
	Project     string            `json:"project"`
	Running     bool              `json:"running"`
	Resolved    bool              `json:"resolved"` // false: seen on a GPU but unknown to the inventory
	GPURequest  string            `json:"gpu_request"`
	StartedAt   *time.Time        `json:"started_at,omitempty"`
	FinishedAt  *time.Time        `json:"finished_at,omitempty"`
	ExitCode    *int              `json:"exit_code,omitempty"`
	CPUSeconds  float64           `json:"cpu_seconds"`
	MemoryBytes uint64            `json:"memory_bytes"`
	StatsError  string            `json:"stats_error,omitempty"`
	GPUs        []GPUShare        `json:"gpus"`
}

// HostUser is a Unix user with GPU processes outside containers.
type HostUser struct {
	User string     `json:"user"`
	GPUs []GPUShare `json:"gpus"`
}

// GPUsResponse is the body of /api/v1/gpus.
type GPUsResponse struct {
	Node          string    `json:"node"`
	Time          time.Time `json:"time"`
	DriverVersion string    `json:"driver_version"`
	GPUs          []GPU     `json:"gpus"`
}

// ContainersResponse is the body of /api/v1/containers.
type ContainersResponse struct {
	Node       string      `json:"node"`
	Time       time.Time   `json:"time"`
	Containers []Container `json:"containers"`
	HostUsers  []HostUser  `json:"host_users"`
	// Unresolved are shares of processes whose owner could not be found.
	Unresolved []GPUShare `json:"unresolved"`
}

// Error is the body of every error response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func ptr[T any](v T) *T { return &v }

// GPUsFromTick renders the tick's GPUs.
func GPUsFromTick(t *sampler.Tick) GPUsResponse {
	out := GPUsResponse{Node: t.Node, Time: t.Time.UTC(), DriverVersion: t.Sample.DriverVersion, GPUs: []GPU{}}
	owners := map[int][]GPUShare{}
	for i := range t.Usage {
		u := &t.Usage[i]
		owners[u.GPU] = append(owners[u.GPU], share(u))
	}
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		g := GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, Processes: []Process{}, Owners: owners[d.Index]}
		if g.Owners == nil {
			g.Owners = []GPUShare{}
		}
		if d.Err != nil {
			g.Error = d.Err.Error()
			out.GPUs = append(out.GPUs, g)
			continue
		}
		g.MemoryTotalBytes, g.MemoryUsedBytes = d.MemoryTotal, d.MemoryUsed
		if d.Has(gpu.FieldUtil) {
			g.UtilPercent = ptr(d.Util)
		}
		if d.Has(gpu.FieldPower) {
			g.PowerWatts = ptr(d.PowerWatts)
		}
		if d.Has(gpu.FieldTemp) {
			g.TemperatureC = ptr(d.TempC)
		}
		for _, f := range d.Missing {
			g.Unavailable = append(g.Unavailable, string(f))
		}
		g.MIGEnabled = d.MIGEnabled
		for _, mi := range d.MIG {
			g.MIG = append(g.MIG, MIG{GPUInstanceID: mi.GPUInstanceID, UUID: mi.UUID, Profile: mi.Profile, MemoryTotalBytes: mi.MemoryTotal, MemoryUsedBytes: mi.MemoryUsed})
		}
		if i < len(t.GPUs) {
			mg := &t.GPUs[i]
			g.Holders = mg.Holders
			g.UnattributedPct = mg.UnattributedUtil
			g.Totals = GPUTotals{
				MeteredSeconds:      mg.Total.Seconds,
				AllocatedSeconds:    mg.Total.AllocatedSeconds,
				IdleSeconds:         mg.Total.IdleSeconds,
				UnattributedSeconds: mg.Total.UnattributedSeconds,
				EnergyJoules:        mg.Total.EnergyJoules,
				IdleEnergyJoules:    mg.Total.IdleEnergyJoules,
			}
		}
		for j, p := range d.Processes {
			var o container.Owner
			if i < len(t.Owners) && j < len(t.Owners[i]) {
				o = t.Owners[i][j]
			}
			g.Processes = append(g.Processes, Process{PID: p.PID, Type: p.Type.String(), OwnerKind: o.Kind.String(), Owner: o.ID, MemoryBytes: p.MemoryUsed, SMPercent: p.SMUtil})
		}
		out.GPUs = append(out.GPUs, g)
	}
	return out
}

func share(u *meter.Usage) GPUShare {
	return GPUShare{
		OwnerKind:        u.Owner.Kind.String(),
		Owner:            u.Owner.ID,
		GPU:              u.GPU,
		UUID:             u.UUID,
		Share:            u.Share,
		SMPercent:        u.SMUtil,
		MemoryBytes:      u.MemoryBytes,
		Processes:        u.Processes,
		AllocatedSeconds: u.Total.AllocatedSeconds,
		HeldSeconds:      u.Total.HeldSeconds,
		PresentSeconds:   u.Total.PresentSeconds,
		UsedSeconds:      u.Total.UsedSeconds,
		EnergyJoules:     u.Total.EnergyJoules,
		PeakMemoryBytes:  u.Total.PeakMemoryBytes,
	}
}

// ContainersFromTick renders the tick's containers and host users.
func ContainersFromTick(t *sampler.Tick) ContainersResponse {
	out := ContainersResponse{Node: t.Node, Time: t.Time.UTC(), Containers: []Container{}, HostUsers: []HostUser{}, Unresolved: []GPUShare{}}
	index := map[string]int{}
	for i := range t.Containers {
		c := &t.Containers[i]
		jc := Container{
			ID: c.ID, Name: c.Name, Image: c.Image, Labels: c.Labels,
			User: c.User, Team: c.Team, Project: c.Project, Running: c.Running, Resolved: true,
			GPURequest: c.GPUs.String(), CPUSeconds: c.CPUSeconds, MemoryBytes: c.MemoryBytes,
			StatsError: c.StatsErr, GPUs: []GPUShare{},
		}
		if jc.Labels == nil {
			jc.Labels = map[string]string{}
		}
		if !c.StartedAt.IsZero() {
			jc.StartedAt = ptr(c.StartedAt.UTC())
		}
		if !c.Running && !c.FinishedAt.IsZero() {
			jc.FinishedAt = ptr(c.FinishedAt.UTC())
			jc.ExitCode = ptr(c.ExitCode)
		}
		index[c.ID] = len(out.Containers)
		out.Containers = append(out.Containers, jc)
	}
	users := map[string]int{}
	for i := range t.Usage {
		u := &t.Usage[i]
		s := share(u)
		switch u.Owner.Kind {
		case container.OwnerContainer:
			j, ok := index[u.Owner.ID]
			if !ok {
				j = len(out.Containers)
				index[u.Owner.ID] = j
				out.Containers = append(out.Containers, Container{ID: u.Owner.ID, Name: shortID(u.Owner.ID), User: "unresolved", Labels: map[string]string{}, Running: true, GPUs: []GPUShare{}})
			}
			out.Containers[j].GPUs = append(out.Containers[j].GPUs, s)
		case container.OwnerHost:
			j, ok := users[u.Owner.ID]
			if !ok {
				j = len(out.HostUsers)
				users[u.Owner.ID] = j
				out.HostUsers = append(out.HostUsers, HostUser{User: u.Owner.ID})
			}
			out.HostUsers[j].GPUs = append(out.HostUsers[j].GPUs, s)
		default:
			out.Unresolved = append(out.Unresolved, s)
		}
	}
	return out
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
