package report

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/ledger"
)

func TestRequestFilterLabels(t *testing.T) {
	withTeamLabel := &ledger.UsageTotal{OwnerKind: ledger.KindContainer, Container: &ledger.Container{User: "alice", Labels: map[string]string{"team": ""}}}
	without := &ledger.UsageTotal{OwnerKind: ledger.KindContainer, Container: &ledger.Container{User: "alice", Labels: map[string]string{}}}
	host := &ledger.UsageTotal{OwnerKind: ledger.KindHost, OwnerID: "alice"}
	tests := []struct {
		name string
		req  Request
		u    *ledger.UsageTotal
		want bool
	}{
		{"empty label value matches a container that has it", Request{Labels: map[string]string{"team": ""}}, withTeamLabel, true},
		{"empty label value does not match a container without it", Request{Labels: map[string]string{"team": ""}}, without, false},
		{"a label never matches a host process", Request{Labels: map[string]string{"team": ""}}, host, false},
		{"user matches a host process", Request{User: "alice"}, host, true},
		{"user mismatch", Request{User: "bob"}, without, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.req.Filter()(tt.u); got != tt.want {
				t.Errorf("Filter()(%+v) = %v, want %v", tt.u, got, tt.want)
			}
		})
	}
	if (&Request{}).Filter() != nil {
		t.Error("an empty request filters")
	}
}
