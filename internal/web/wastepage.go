package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// wastePages is the page of the live waste findings.
func (s *handler) wastePages() []pageDef {
	return []pageDef{
		{path: "/waste", name: PageWaste, title: "Waste", act: auth.ActWasteRead, refresh: 30, view: s.wastePage},
	}
}

func (s *handler) wastePage(r *http.Request, c *Visitor, f Frame) (any, error) {
	if r.URL.RawQuery != "" {
		return nil, badPage("the waste page takes no parameters (it was given %q): it shows the live findings", r.URL.RawQuery)
	}
	v := &Waste{Frame: f}
	if s.cfg.Waste == nil {
		v.Note = "The live waste rules are off on this agent (waste.enabled: false); `gpumeter waste` reads the ledger."
		return v, nil
	}
	rep := s.visibleFindings(c)
	v.From, v.To, v.Currency = rep.From, rep.To, rep.Currency
	// A stop is an admin's, from a session whose CSRF token the script
	// sends, of a container the latest sample shows running, for a
	// finding that holds now.
	mayStop := false
	if ownOnly, err := auth.Authorize(c.ID, auth.ActContainerStop); err == nil && !ownOnly && c.ID.Role == config.RoleAdmin {
		switch {
		case !f.CanAct():
			v.StopNote = "Sign in to the console to stop containers from here."
		case !s.cfg.Stops:
			v.StopNote = "The agent does not manage containers here (docker.enabled: false), so it cannot stop them."
		default:
			mayStop = true
		}
	}
	running := map[string]bool{}
	if t := s.cfg.Ticks.Latest(); t != nil && mayStop {
		for i := range t.Containers {
			if t.Containers[i].Running {
				running[t.Containers[i].ID] = true
			}
		}
	}
	for i := range rep.Findings {
		fd := &rep.Findings[i]
		row := WasteFinding{
			ID: fd.ID, Rule: fd.Rule, Who: findingWho(fd), Owner: fd.Owner, Team: fd.Team, Project: fd.Project,
			Image: fd.Image, ContainerID: fd.ContainerID, Since: fd.Since, Until: fd.Until, Active: fd.Active,
			Summary: waste.Summary(fd), WastedHours: fd.WastedGPUHours, Cost: fd.Cost,
		}
		for _, g := range fd.GPUs {
			row.GPUs = append(row.GPUs, "GPU "+strconv.Itoa(g.Index))
		}
		for _, k := range slices.Sorted(maps.Keys(fd.Evidence)) {
			row.Evidence = append(row.Evidence, Evidence{Key: k, Value: fd.Evidence[k], Rule: fd.Rule})
		}
		// A finding that no longer holds is history, not a reason to stop.
		if mayStop && fd.Active && fd.ContainerID != "" && running[fd.ContainerID] {
			b, err := stopButton(fd)
			if err != nil {
				return nil, err
			}
			row.Stop = b
		}
		v.Findings = append(v.Findings, row)
	}
	for _, t := range rep.Totals {
		v.Totals = append(v.Totals, WasteTotal{Rule: t.Rule, Findings: t.Findings, Active: t.Active,
			WastedHours: t.WastedGPUHours, Cost: t.Cost, Total: t.Rule == waste.TotalKey})
	}
	return v, nil
}

// stopButton stops the finding's container through the API, with the
// rule as the reason the audit log keeps.
func stopButton(fd *waste.Finding) (*Button, error) {
	body, err := json.Marshal(map[string]string{"reason": "waste: " + fd.Rule})
	if err != nil {
		return nil, fmt.Errorf("stop button of %s: %w", fd.ID, err)
	}
	name := cmp.Or(fd.Container, fd.ContainerID)
	return &Button{
		Label: "Stop", Method: http.MethodPost, Path: "/api/v1/containers/" + fd.ContainerID + "/stop", Body: string(body),
		Confirm: fmt.Sprintf("Stop container %s of %s? It is %s (%s).", name, cmp.Or(fd.Owner, "an unknown user"), fd.Rule, waste.Summary(fd)),
		Doing:   "stopping " + name, Done: "stopped " + name, Danger: true,
	}, nil
}

// findingWho names what a finding is about: its container, the host
// user, or what stands for an owner nobody found.
func findingWho(fd *waste.Finding) string {
	switch {
	case fd.Container != "":
		return fd.Container
	case fd.ContainerID != "":
		return fd.ContainerID
	case fd.OwnerKind == waste.OwnerHost:
		return cmp.Or(fd.Owner, "unknown") + " (host)"
	case fd.Evidence[waste.EvUnaccounted] > 0:
		return "memory no process accounts for"
	}
	return "unresolved processes"
}
