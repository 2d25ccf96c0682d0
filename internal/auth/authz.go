package auth

import (
	"fmt"

	"github.com/gpumeter/gpumeter/internal/config"
)

// Action is something a caller asks the agent to do.
type Action string

// The actions of the API. Reads of live data and usage are open to every
// role, with what a user sees narrowed to their own; stopping a
// container is an admin's or its owner's; the audit log is an admin's.
const (
	ActWhoami         Action = "whoami"
	ActGPUsRead       Action = "gpus.read"
	ActContainersRead Action = "containers.read"
	ActUsageRead      Action = "usage.read"
	ActWasteRead      Action = "waste.read"
	ActContainerStop  Action = "containers.stop"
	ActAuditRead      Action = "audit.read"
	// The GPU queue's actions. A user submits and acts on their own jobs;
	// a viewer reads every job but not its logs, which can hold secrets;
	// jobs.hold covers both hold and release; jobs.requeue makes a new
	// job of an ended one.
	ActJobSubmit Action = "jobs.submit"
	ActJobRead   Action = "jobs.read"
	ActJobCancel Action = "jobs.cancel"
	ActJobHold   Action = "jobs.hold"
	ActJobLogs   Action = "jobs.logs"
	// ActJobRequeue is gpumeter requeue: an owner's or an admin's, as hold.
	ActJobRequeue Action = "jobs.requeue"
	// The fair share: every role reads it, a user their own rows only;
	// only an admin lifts a team's budget.
	ActFairShareRead Action = "fairshare.read"
	ActBudgetLift    Action = "budget.lift"
	// The fleet's nodes: every role reads them (a node has no owner);
	// only an admin drains or undrains one.
	ActNodesRead Action = "nodes.read"
	ActNodeDrain Action = "nodes.drain"
	// The console's sign-in: every role opens, reads and ends its own
	// session.
	ActSessionStart Action = "session.start"
	ActSessionRead  Action = "session.read"
	ActSessionEnd   Action = "session.end"
)

// permission is what a role may do with an action: not at all, on its
// own things, or on everyone's.
type permission int

const (
	deny permission = iota
	own
	all
)

// grants is the whole authorisation policy.
var grants = map[config.Role]map[Action]permission{
	config.RoleAdmin: {ActWhoami: all, ActSessionStart: all, ActSessionRead: all, ActSessionEnd: all, ActGPUsRead: all, ActContainersRead: all, ActUsageRead: all, ActWasteRead: all, ActContainerStop: all, ActAuditRead: all,
		ActJobSubmit: all, ActJobRead: all, ActJobCancel: all, ActJobHold: all, ActJobLogs: all, ActJobRequeue: all,
		ActFairShareRead: all, ActBudgetLift: all, ActNodesRead: all, ActNodeDrain: all},
	config.RoleViewer: {ActWhoami: all, ActSessionStart: all, ActSessionRead: all, ActSessionEnd: all, ActGPUsRead: all, ActContainersRead: all, ActUsageRead: all, ActWasteRead: all,
		ActJobRead: all, ActFairShareRead: all, ActNodesRead: all},
	config.RoleUser: {ActWhoami: all, ActSessionStart: all, ActSessionRead: all, ActSessionEnd: all, ActGPUsRead: own, ActContainersRead: own, ActUsageRead: own, ActWasteRead: own, ActContainerStop: own,
		ActJobSubmit: own, ActJobRead: own, ActJobCancel: own, ActJobHold: own, ActJobLogs: own, ActJobRequeue: own,
		ActFairShareRead: own, ActNodesRead: all},
}

// ForbiddenError is a refused authorisation.
type ForbiddenError struct {
	Msg string
}

func (e *ForbiddenError) Error() string { return e.Msg }

// Authorize says whether id may do act at all: on everything, or on its
// own things only (own is then true and every target must pass Owns).
func Authorize(id Identity, act Action) (ownOnly bool, err error) {
	switch grants[id.Role][act] {
	case all:
		return false, nil
	case own:
		return true, nil
	}
	if id.Role == "" {
		return false, &ForbiddenError{"no role may " + string(act)}
	}
	return false, &ForbiddenError{fmt.Sprintf("role %s may not %s", id.Role, act)}
}

// AuthorizeOwner says whether id may do act on something owned by owner.
func AuthorizeOwner(id Identity, act Action, owner string) error {
	ownOnly, err := Authorize(id, act)
	if err != nil || !ownOnly || owner == id.User {
		return err
	}
	// The owner is not named: a user must not learn whose a container is.
	return &ForbiddenError{fmt.Sprintf("%s may %s only for their own %s", id.User, act, ownThings(act))}
}

// Visible says whether a listing for id may include something owned by
// owner; it is AuthorizeOwner without the error.
func Visible(id Identity, act Action, owner string) bool {
	return AuthorizeOwner(id, act, owner) == nil
}

// ownThings names what a user owns for act, for a refusal.
func ownThings(act Action) string {
	switch act {
	case ActJobSubmit, ActJobRead, ActJobCancel, ActJobHold, ActJobLogs, ActJobRequeue:
		return "jobs"
	case ActFairShareRead:
		return "fair-share rows"
	}
	return "containers and usage"
}
