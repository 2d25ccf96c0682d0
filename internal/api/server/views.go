package server

import (
	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/gpu"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

func ptr[T any](v T) *T { return &v }

// GPUsFromTick renders the tick's GPUs.
func GPUsFromTick(t *sampler.Tick) apitype.GPUsResponse {
	out := apitype.GPUsResponse{Node: t.Node, Time: t.Time.UTC(), DriverVersion: t.Sample.DriverVersion, GPUs: []apitype.GPU{}}
	owners := map[int][]apitype.GPUShare{}
	for i := range t.Usage {
		u := &t.Usage[i]
		owners[u.GPU] = append(owners[u.GPU], share(u))
	}
	for i := range t.Sample.Devices {
		d := &t.Sample.Devices[i]
		g := apitype.GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, Processes: []apitype.Process{}, Owners: owners[d.Index]}
		if g.Owners == nil {
			g.Owners = []apitype.GPUShare{}
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
			g.MIG = append(g.MIG, apitype.MIG{GPUInstanceID: mi.GPUInstanceID, UUID: mi.UUID, Profile: mi.Profile, MemoryTotalBytes: mi.MemoryTotal, MemoryUsedBytes: mi.MemoryUsed})
		}
		if i < len(t.GPUs) {
			mg := &t.GPUs[i]
			g.Holders = mg.Holders
			g.UnattributedPct = mg.UnattributedUtil
			g.Totals = apitype.GPUTotals{
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
			g.Processes = append(g.Processes, apitype.Process{PID: p.PID, Type: p.Type.String(), OwnerKind: o.Kind.String(), Owner: o.ID, MemoryBytes: p.MemoryUsed, SMPercent: p.SMUtil})
		}
		out.GPUs = append(out.GPUs, g)
	}
	return out
}

func share(u *meter.Usage) apitype.GPUShare {
	return apitype.GPUShare{
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
func ContainersFromTick(t *sampler.Tick) apitype.ContainersResponse {
	out := apitype.ContainersResponse{Node: t.Node, Time: t.Time.UTC(), Containers: []apitype.Container{}, HostUsers: []apitype.HostUser{}, Unresolved: []apitype.GPUShare{}}
	index := map[string]int{}
	for i := range t.Containers {
		c := &t.Containers[i]
		jc := apitype.Container{
			ID: c.ID, Name: c.Name, Image: c.Image, Labels: c.Labels,
			User: c.User, Team: c.Team, Project: c.Project, Running: c.Running, Resolved: true,
			GPURequest: c.GPUs.String(), CPUSeconds: c.CPUSeconds, MemoryBytes: c.MemoryBytes,
			StatsError: c.StatsErr, GPUs: []apitype.GPUShare{},
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
				out.Containers = append(out.Containers, apitype.Container{ID: u.Owner.ID, Name: container.ShortID(u.Owner.ID), User: "unresolved", Labels: map[string]string{}, Running: true, GPUs: []apitype.GPUShare{}})
			}
			out.Containers[j].GPUs = append(out.Containers[j].GPUs, s)
		case container.OwnerHost:
			j, ok := users[u.Owner.ID]
			if !ok {
				j = len(out.HostUsers)
				users[u.Owner.ID] = j
				out.HostUsers = append(out.HostUsers, apitype.HostUser{User: u.Owner.ID})
			}
			out.HostUsers[j].GPUs = append(out.HostUsers[j].GPUs, s)
		default:
			out.Unresolved = append(out.Unresolved, s)
		}
	}
	return out
}
