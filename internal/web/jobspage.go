package web

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// jobsPages is the page of the queue.
func (s *handler) jobsPages() []pageDef {
	return []pageDef{
		{path: "/jobs", name: PageJobs, title: "Jobs", act: auth.ActJobRead, refresh: 15, view: s.jobsPage},
	}
}

// jobsPage lists the jobs as GET /api/v1/jobs does, with all_users=1 for
// the roles that see everyone's: a user's own, everyone's for admins and
// viewers. It takes the API's state and all parameters.
func (s *handler) jobsPage(r *http.Request, c *Visitor, f Frame) (any, error) {
	q, err := apitype.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = apitype.OnlyParams(q, "all", "state")
	}
	var all bool
	if err == nil {
		all, err = apitype.FlagParam(q.Get("all"), "all")
	}
	var states []queue.State
	if err == nil {
		if states, err = queue.ParseStates(q["state"]); err != nil {
			err = fmt.Errorf("state: %w", err)
		}
	}
	if err != nil {
		return nil, badPage("the jobs page cannot show that: %v", err)
	}
	v := &Jobs{Frame: f, Everyone: !c.OwnOnly, States: queue.StateNames(states), All: all}
	v.Filters = jobFilters(q)
	if s.cfg.Jobs == nil {
		v.Note = "The GPU job queue is off on this agent; an admin turns it on with queue.enabled: true."
		return v, nil
	}
	jf := ledger.JobFilter{States: states, IncludeEnded: all}
	if c.OwnOnly {
		jf.User = c.ID.User
	}
	jobs, err := s.cfg.Jobs.Jobs(r.Context(), jf)
	if err != nil {
		return nil, err
	}
	names := gpuNames{}
	if t := s.cfg.Ticks.Latest(); t != nil {
		for _, d := range t.Sample.Devices {
			names[d.UUID] = "GPU " + strconv.Itoa(d.Index)
		}
	}
	if s.cfg.Nodes != nil {
		v.Fleet = true
		// A job on another node holds that node's GPUs: named by its
		// registration, since this node's tick does not know them.
		views, err := s.cfg.Nodes.Nodes(r.Context())
		if err != nil {
			s.cfg.Logger.Warn("jobs page: the fleet's nodes", "err", err)
		}
		for _, n := range views {
			for _, g := range n.GPUs {
				if _, ok := names[g.UUID]; !ok {
					names[g.UUID] = "GPU " + strconv.Itoa(g.Index)
				}
			}
		}
	}
	v.Jobs = make([]JobRow, 0, len(jobs))
	for _, j := range jobs {
		v.Jobs = append(v.Jobs, jobRow(s.cfg.API.Job(j), names, c, f.CanAct()))
	}
	s.gpuUseHints(r, v.Jobs, f.Now)
	return v, nil
}

// gpuUseHints says on the rows of jobs that held several GPUs how many
// they computed on, from the ledger's minutes of the last week.
func (s *handler) gpuUseHints(r *http.Request, rows []JobRow, now time.Time) {
	if s.cfg.WhatIf == nil {
		return
	}
	var from time.Time
	for _, row := range rows {
		if row.Started != nil && len(row.GPUs) > 1 && row.containerID != "" && (from.IsZero() || row.Started.Before(from)) {
			from = *row.Started
		}
	}
	if from.IsZero() {
		return
	}
	use, err := s.cfg.WhatIf.GPUUse(r.Context(), from, now)
	if err != nil {
		s.cfg.Logger.Warn("jobs page: GPU use", "err", err)
		return
	}
	for i := range rows {
		if u, ok := use[rows[i].containerID]; ok && u.Held > 1 && u.Used < u.Held {
			rows[i].Use = &GPUUseHint{Used: u.Used, Held: u.Held}
		}
	}
}

// jobFilters are the page's filter links; the one q asks for is marked.
func jobFilters(q url.Values) []NavItem {
	cur := url.Values{}
	for k, vs := range q {
		cur[k] = slices.Clone(vs)
	}
	items := []NavItem{
		{Path: "/jobs", Label: "Waiting and running"},
		{Path: "/jobs?state=queued", Label: "Queued"},
		{Path: "/jobs?state=running", Label: "Running"},
		{Path: "/jobs?all=1", Label: "All, with ended"},
	}
	enc := cur.Encode()
	for i := range items {
		_, raw, _ := strings.Cut(items[i].Path, "?")
		items[i].Current = raw == enc
	}
	return items
}

// gpuNames names this node's GPUs by UUID: "GPU 3".
type gpuNames map[string]string

// name is the GPU's name, or its UUID when the node does not know it.
func (n gpuNames) name(uuid string) string {
	if s, ok := n[uuid]; ok {
		return s
	}
	return uuid
}

// replace writes every UUID of the node's GPUs in text by its name.
func (n gpuNames) replace(text string) string {
	if !strings.Contains(text, "GPU-") {
		return text
	}
	for u, s := range n {
		text = strings.ReplaceAll(text, u, s)
	}
	return text
}

// jobRow is a job as the page shows it, with the buttons the caller may
// use on it now: the role as AuthorizeOwner decides for the job's owner,
// and the state as the queue's state machine allows.
func jobRow(j apitype.Job, names gpuNames, c *Visitor, canAct bool) JobRow {
	row := JobRow{
		ID: j.ID, Name: j.Name, User: j.User, Team: j.Team, State: j.State, Held: j.Held, Node: j.Node,
		Reason: j.Reason, ReasonText: names.replace(j.ReasonText), GPUsRequested: j.GPUsRequested, GPUMemory: j.GPUMemoryRequested,
		Image: j.Image, Command: j.Command, TimeLimit: j.TimeLimit, Class: j.Class,
		Submitted: j.SubmittedAt, Started: j.StartedAt, Ended: j.EndedAt, Estimated: j.EstimatedStart, ExitCode: j.ExitCode,
		containerID: j.ContainerID,
	}
	for _, u := range j.GPUs {
		row.GPUs = append(row.GPUs, JobGPU{Name: names.name(u), UUID: u})
	}
	// The queue says where a job runs by UUID ("running on GPU-…"); the
	// GPUs column names them already.
	if st := queue.State(j.State); (st == queue.Starting || st == queue.Running) && len(j.GPUs) > 0 &&
		(strings.HasPrefix(j.ReasonText, "running on ") || strings.HasPrefix(j.ReasonText, "starting on ")) {
		row.ReasonText = ""
	}
	if j.Position != nil {
		row.Position = *j.Position
	}
	if !canAct {
		return row
	}
	st := queue.State(j.State)
	label := j.ID
	if j.Name != "" {
		label += " (" + j.Name + ")"
	}
	button := func(verb, doing, done string, danger bool) Button {
		return Button{
			Label: strings.ToUpper(verb[:1]) + verb[1:], Method: http.MethodPost, Path: "/api/v1/jobs/" + url.PathEscape(j.ID) + "/" + verb,
			Confirm: strings.ToUpper(verb[:1]) + verb[1:] + " job " + label + " of " + j.User + "?",
			Doing:   doing + " " + j.ID, Done: done + " " + j.ID, Danger: danger,
		}
	}
	if auth.AuthorizeOwner(c.ID, auth.ActJobCancel, j.User) == nil && queue.CanTransition(st, queue.Cancelled) {
		row.Buttons = append(row.Buttons, button("cancel", "cancelling", "cancelled", true))
	}
	// Hold and release keep a job queued: they only set its held flag.
	if auth.AuthorizeOwner(c.ID, auth.ActJobHold, j.User) == nil && st == queue.Queued {
		if j.Held {
			row.Buttons = append(row.Buttons, button("release", "releasing", "released", false))
		} else {
			row.Buttons = append(row.Buttons, button("hold", "holding", "held", false))
		}
	}
	return row
}
