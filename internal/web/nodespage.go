package web

import (
	"errors"
	"net/http"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// fleetOffNote is what the nodes pages say on an agent that is not in a
// fleet, as the API's fleet_off does.
const fleetOffNote = "This agent is not in a fleet: it needs queue.fleet: true, with ledger.dsn on the PostgreSQL that the fleet's agents share."

// nodesPages are the fleet's nodes and the drill-down to one node's GPUs.
func (s *handler) nodesPages() []pageDef {
	return []pageDef{
		{path: "/nodes", name: PageNodes, title: "Nodes", act: auth.ActNodesRead, refresh: 10, view: s.nodesPage},
		{path: "/nodes/{node}", name: PageNode, title: "Node", act: auth.ActNodesRead, refresh: 10, view: s.nodePage},
	}
}

// nodesPage shows every node of the fleet as GET /api/v1/nodes does,
// with the jobs running on each.
func (s *handler) nodesPage(r *http.Request, c *Visitor, f Frame) (any, error) {
	if r.URL.RawQuery != "" {
		return nil, badPage("the nodes page takes no parameters (it was given %q)", r.URL.RawQuery)
	}
	v := &FleetNodes{Frame: f}
	if s.cfg.Nodes == nil {
		v.Note = fleetOffNote
		return v, nil
	}
	tiles, err := s.nodeTiles(r, c)
	if err != nil {
		return nil, err
	}
	v.Nodes = tiles
	return v, nil
}

// nodePage shows one node's GPUs and the jobs that hold them.
func (s *handler) nodePage(r *http.Request, c *Visitor, f Frame) (any, error) {
	name := r.PathValue("node")
	if r.URL.RawQuery != "" {
		return nil, badPage("a node's page takes no parameters (it was given %q)", r.URL.RawQuery)
	}
	f.Title = "Node " + name
	if s.cfg.Nodes == nil {
		return nil, &pageError{http.StatusNotFound, fleetOffNote}
	}
	tiles, err := s.nodeTiles(r, c)
	if err != nil {
		return nil, err
	}
	for _, t := range tiles {
		if t.Name == name {
			return &NodeDetail{Frame: f, Tile: t}, nil
		}
	}
	return nil, &pageError{http.StatusNotFound, queue.NodeNotFound(name) + ", as /nodes does"}
}

// nodeTiles are the fleet's nodes, with the jobs that hold their GPUs as
// the reader may see them.
func (s *handler) nodeTiles(r *http.Request, c *Visitor) ([]NodeTile, error) {
	views, err := s.cfg.Nodes.Nodes(r.Context())
	if errors.Is(err, ledger.ErrUnavailable) {
		// Nothing is wrong with the agent: the page comes back with the
		// database.
		return nil, &pageError{http.StatusServiceUnavailable, "the fleet's database cannot be reached; try again in a few seconds"}
	}
	if err != nil {
		return nil, err
	}
	jobs := map[string]queue.Job{}
	running := map[string]int{}
	// Who holds a GPU is seen as the jobs are: a user sees their own.
	ownJobs, err := auth.Authorize(c.ID, auth.ActJobRead)
	if err != nil {
		ownJobs = true
	}
	if s.cfg.Jobs != nil {
		active, err := s.cfg.Jobs.Jobs(r.Context(), ledger.JobFilter{States: []queue.State{queue.Starting, queue.Running}})
		if err != nil {
			return nil, err
		}
		for _, j := range active {
			jobs[j.ID] = j
			running[j.Node]++
		}
	}
	out := make([]NodeTile, 0, len(views))
	for _, v := range views {
		t := NodeTile{Name: v.Node, State: string(v.State), LeaseAge: v.LeaseAge.Seconds(), AgentVersion: v.AgentVersion,
			Score: v.Score, SMUtil: v.SMUtil, Running: running[v.Node], GPUs: make([]NodeGPU, 0, len(v.GPUs))}
		for _, g := range v.GPUs {
			ng := NodeGPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryBytes: g.MemoryBytes, State: string(g.State)}
			switch g.State {
			case queue.GPUFree:
				t.Free++
			case queue.GPUHeld:
				t.Held++
			case queue.GPUOutside:
				t.Outside++
			}
			if g.Job != "" {
				ng.Job = nodeJob(g.Job, jobs, c.ID.User, ownJobs)
			}
			t.GPUs = append(t.GPUs, ng)
		}
		out = append(out, t)
	}
	return out, nil
}

// nodeJob is the job id as user may see it: its id, name and user when
// it is theirs to see (ownOnly: they see only their own jobs), "another
// user's" otherwise.
func nodeJob(id string, jobs map[string]queue.Job, user string, ownOnly bool) *NodeJob {
	j, ok := jobs[id]
	if !ok {
		// Held by a job that ended since the nodes were read.
		if ownOnly {
			return &NodeJob{User: anotherUser}
		}
		return &NodeJob{ID: id}
	}
	if ownOnly && j.User != user {
		return &NodeJob{User: anotherUser}
	}
	return &NodeJob{ID: j.ID, Name: j.Name, User: j.User}
}
