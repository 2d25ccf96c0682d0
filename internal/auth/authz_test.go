package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/config"
)

// actions are every Action of the API.
var actions = []Action{ActWhoami, ActGPUsRead, ActContainersRead, ActUsageRead, ActWasteRead, ActContainerStop, ActAuditRead,
	ActJobSubmit, ActJobRead, ActJobCancel, ActJobHold, ActJobLogs, ActJobRequeue, ActFairShareRead, ActBudgetLift,
	ActNodesRead, ActNodeDrain, ActSessionStart, ActSessionRead, ActSessionEnd}

// TestAuthorizeMatrix spells out the whole policy, so that any change to
// grants has to change this table too.
func TestAuthorizeMatrix(t *testing.T) {
	const (
		no  = "deny"
		own = "own"
		all = "all"
	)
	want := map[config.Role]map[Action]string{
		config.RoleAdmin: {
			ActWhoami: all, ActGPUsRead: all, ActContainersRead: all, ActUsageRead: all,
			ActWasteRead: all, ActContainerStop: all, ActAuditRead: all,
			ActJobSubmit: all, ActJobRead: all, ActJobCancel: all, ActJobHold: all, ActJobLogs: all, ActJobRequeue: all,
			ActFairShareRead: all, ActBudgetLift: all,
			ActNodesRead: all, ActNodeDrain: all,
			ActSessionStart: all, ActSessionRead: all, ActSessionEnd: all,
		},
		config.RoleUser: {
			ActWhoami: all, ActGPUsRead: own, ActContainersRead: own, ActUsageRead: own,
			ActWasteRead: own, ActContainerStop: own, ActAuditRead: no,
			ActJobSubmit: own, ActJobRead: own, ActJobCancel: own, ActJobHold: own, ActJobLogs: own, ActJobRequeue: own,
			// A user sees their own fair-share rows; only an admin lifts a budget.
			ActFairShareRead: own, ActBudgetLift: no,
			// A node has no owner: a user sees every node; only an admin
			// drains one.
			ActNodesRead: all, ActNodeDrain: no,
			// Every role signs in to the page and out of it.
			ActSessionStart: all, ActSessionRead: all, ActSessionEnd: all,
		},
		config.RoleViewer: {
			ActWhoami: all, ActGPUsRead: all, ActContainersRead: all, ActUsageRead: all,
			ActWasteRead: all, ActContainerStop: no, ActAuditRead: no,
			// Logs can hold secrets: a viewer reads jobs, not their logs.
			ActJobSubmit: no, ActJobRead: all, ActJobCancel: no, ActJobHold: no, ActJobLogs: no, ActJobRequeue: no,
			ActFairShareRead: all, ActBudgetLift: no,
			ActNodesRead: all, ActNodeDrain: no,
			ActSessionStart: all, ActSessionRead: all, ActSessionEnd: all,
		},
		"": {
			ActWhoami: no, ActGPUsRead: no, ActContainersRead: no, ActUsageRead: no,
			ActWasteRead: no, ActContainerStop: no, ActAuditRead: no,
			ActJobSubmit: no, ActJobRead: no, ActJobCancel: no, ActJobHold: no, ActJobLogs: no, ActJobRequeue: no,
			ActFairShareRead: no, ActBudgetLift: no,
			ActNodesRead: no, ActNodeDrain: no,
			ActSessionStart: no, ActSessionRead: no, ActSessionEnd: no,
		},
		"root": {
			ActWhoami: no, ActGPUsRead: no, ActContainersRead: no, ActUsageRead: no,
			ActWasteRead: no, ActContainerStop: no, ActAuditRead: no,
			ActJobSubmit: no, ActJobRead: no, ActJobCancel: no, ActJobHold: no, ActJobLogs: no, ActJobRequeue: no,
			ActFairShareRead: no, ActBudgetLift: no,
			ActNodesRead: no, ActNodeDrain: no,
			ActSessionStart: no, ActSessionRead: no, ActSessionEnd: no,
		},
	}
	if len(grants[config.RoleAdmin]) != len(actions) {
		t.Fatalf("the admin is granted %d actions, the test knows %d: add the new action to actions and to this table", len(grants[config.RoleAdmin]), len(actions))
	}
	for role, acts := range want {
		for _, act := range actions {
			id := Identity{User: "alice", Role: role, Method: MethodToken, Name: "t"}
			ownOnly, err := Authorize(id, act)
			got := all
			switch {
			case err != nil:
				got = no
				var fe *ForbiddenError
				if !errors.As(err, &fe) {
					t.Errorf("Authorize(%q, %s) error %T, want *ForbiddenError", role, act, err)
				}
				if !strings.Contains(err.Error(), string(act)) {
					t.Errorf("Authorize(%q, %s) = %q, which does not name the action", role, act, err)
				}
			case ownOnly:
				got = own
			}
			if got != acts[act] {
				t.Errorf("Authorize(%q, %s) = %s, want %s", role, act, got, acts[act])
			}

			// AuthorizeOwner and Visible agree with the grant for the
			// caller's own things and for someone else's.
			errOwn, errOther := AuthorizeOwner(id, act, "alice"), AuthorizeOwner(id, act, "bob")
			wantOwn, wantOther := acts[act] != no, acts[act] == all
			if (errOwn == nil) != wantOwn || (errOther == nil) != wantOther {
				t.Errorf("AuthorizeOwner(%q, %s): own %v, other %v; want allowed %v and %v", role, act, errOwn, errOther, wantOwn, wantOther)
			}
			if Visible(id, act, "alice") != wantOwn || Visible(id, act, "bob") != wantOther {
				t.Errorf("Visible(%q, %s) disagrees with AuthorizeOwner", role, act)
			}
			// Nothing unowned is a user's.
			if acts[act] == own && Visible(id, act, "") {
				t.Errorf("Visible(%q, %s, \"\") = true for something nobody owns", role, act)
			}
		}
	}
	if _, err := Authorize(Identity{Role: config.RoleAdmin}, "containers.delete"); err == nil {
		t.Error("an admin may do an action that does not exist")
	}
}

func TestAuthorizeMessages(t *testing.T) {
	user := Identity{User: "alice", Role: config.RoleUser}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := Authorize(Identity{Role: config.RoleViewer}, ActContainerStop); return err }(), "role viewer may not containers.stop"},
		{func() error { _, err := Authorize(user, ActAuditRead); return err }(), "role user may not audit.read"},
		{func() error { _, err := Authorize(Identity{}, ActWhoami); return err }(), "no role may whoami"},
		{AuthorizeOwner(user, ActContainerStop, "bob"), `alice may containers.stop only for their own containers and usage`},
		{AuthorizeOwner(user, ActJobCancel, "bob"), `alice may jobs.cancel only for their own jobs`},
		{func() error { _, err := Authorize(Identity{Role: config.RoleViewer}, ActJobLogs); return err }(), "role viewer may not jobs.logs"},
	} {
		if tt.err == nil || tt.err.Error() != tt.want {
			t.Errorf("error %v, want %q", tt.err, tt.want)
		}
	}
}
