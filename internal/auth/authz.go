package auth

import "fmt"

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
var grants = map[Role]map[Action]permission{
	RoleAdmin:  {ActWhoami: all, ActGPUsRead: all, ActContainersRead: all, ActUsageRead: all, ActWasteRead: all, ActContainerStop: all, ActAuditRead: all},
	RoleViewer: {ActWhoami: all, ActGPUsRead: all, ActContainersRead: all, ActUsageRead: all, ActWasteRead: all},
	RoleUser:   {ActWhoami: all, ActGPUsRead: own, ActContainersRead: own, ActUsageRead: own, ActWasteRead: own, ActContainerStop: own},
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
	return &ForbiddenError{fmt.Sprintf("%s may %s only for their own containers and usage", id.User, act)}
}

// Visible says whether a listing for id may include something owned by
// owner; it is AuthorizeOwner without the error.
func Visible(id Identity, act Action, owner string) bool {
	return AuthorizeOwner(id, act, owner) == nil
}
