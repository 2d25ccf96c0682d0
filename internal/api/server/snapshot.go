package server

import (
	"net/http"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// snapshot answers GET /api/v1/snapshot: the GPUs, containers, live waste
// findings and queue of one tick, in one call, for a live view that
// redraws every second. The route is let in as a GPU read; every other
// part is authorised and filtered as its own route does it, so that the
// snapshot never shows a caller more than the routes would.
func (s *server) snapshot(w http.ResponseWriter, r *http.Request, c *call) {
	t := s.latest(w, r)
	if t == nil {
		return
	}
	out := apitype.Snapshot{Node: t.Node, Time: t.Time.UTC(), DriverVersion: t.Sample.DriverVersion,
		GPUs: []apitype.GPU{}, Containers: []apitype.Container{}, HostUsers: []apitype.HostUser{}, Unresolved: []apitype.GPUShare{}}
	gpus := GPUsFromTick(t)
	if c.ownOnly {
		filterGPUs(&gpus, t, c)
	}
	out.GPUs = gpus.GPUs
	if cc, ok := c.as(auth.ActContainersRead); ok {
		ctrs := ContainersFromTick(t)
		if cc.ownOnly {
			filterContainers(&ctrs, cc)
		}
		out.Containers, out.HostUsers, out.Unresolved = ctrs.Containers, ctrs.HostUsers, ctrs.Unresolved
	}
	if cw, ok := c.as(auth.ActWasteRead); ok && s.cfg.Waste != nil {
		out.Waste = WasteFromReport(filterWaste(s.cfg.Waste.Report(), cw))
	}
	if cj, ok := c.as(auth.ActJobRead); ok && s.cfg.Jobs != nil {
		q, err := s.queueSummary(r, cj)
		if err != nil {
			s.jobError(w, r, c, "", err)
			return
		}
		out.Queue = q
	}
	writeJSON(w, out)
}

// as is c as it would be for act: whether the caller may do it at all,
// and on whose things. A part of the snapshot the caller may not read is
// left out rather than refused, so that a role without one part still
// sees the rest.
func (c *call) as(act auth.Action) (*call, bool) {
	ownOnly, err := auth.Authorize(c.id, act)
	if err != nil {
		return nil, false
	}
	cc := *c
	cc.ownOnly, cc.act = ownOnly, act
	return &cc, true
}

// queueSummary counts the jobs that have not ended which c may list, as
// /api/v1/jobs lists them for c with all_users=1 where c may ask for it,
// and lists the first of them.
func (s *server) queueSummary(r *http.Request, c *call) (*apitype.QueueSummary, error) {
	user, err := jobsUser(c, !c.ownOnly)
	if err != nil {
		return nil, err
	}
	// As GET /api/v1/jobs without all=1: the jobs that have not ended.
	jobs, err := s.cfg.Jobs.Jobs(r.Context(), ledger.JobFilter{User: user})
	if err != nil {
		return nil, err
	}
	out := &apitype.QueueSummary{Counts: map[string]int{}, Jobs: []apitype.JobBrief{}}
	for _, j := range jobs {
		if j.State.Ended() {
			continue
		}
		out.Counts[string(j.State)]++
		if len(out.Jobs) == apitype.SnapshotJobs {
			out.Truncated = true
			continue
		}
		out.Jobs = append(out.Jobs, apitype.JobBrief{
			ID: j.ID, Name: j.Name, User: j.User, State: string(j.State), Reason: string(j.Reason),
			GPUsRequested: j.GPUsRequested, GPUs: nonNil(j.GPUs), ContainerID: j.ContainerID,
			SubmittedAt: utcOrNil(j.SubmittedAt), StartedAt: utcOrNil(j.StartedAt),
		})
	}
	return out, nil
}
