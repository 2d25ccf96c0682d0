package apitype

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/waste"
)

// TestTokenPrefix: the prefix a client checks a token by is the one the
// agent makes tokens with.
func TestTokenPrefix(t *testing.T) {
	if TokenPrefix != config.TokenPrefix {
		t.Errorf("TokenPrefix %q, config.TokenPrefix %q", TokenPrefix, config.TokenPrefix)
	}
}

// TestDomainWords: the words the wire spells out for a client are the
// ones the agent writes, which this package cannot import.
func TestDomainWords(t *testing.T) {
	for _, tt := range []struct{ name, wire, domain string }{
		{"OutcomeAllowed", OutcomeAllowed, audit.OutcomeAllowed},
		{"OutcomeDenied", OutcomeDenied, audit.OutcomeDenied},
		{"OutcomeRejected", OutcomeRejected, audit.OutcomeRejected},
		{"OutcomeFailed", OutcomeFailed, audit.OutcomeFailed},
		{"AuditKindAPI", AuditKindAPI, audit.KindAPI},
		{"OwnerContainer", OwnerContainer, waste.OwnerContainer},
		{"OwnerHost", OwnerHost, waste.OwnerHost},
		{"OwnerNone", OwnerNone, waste.OwnerNone},
		{"OwnerContainer", OwnerContainer, container.OwnerContainer.String()},
		{"OwnerHost", OwnerHost, container.OwnerHost.String()},
		{"OwnerNone", OwnerNone, container.OwnerNone.String()},
		{"WasteTotalKey", WasteTotalKey, waste.TotalKey},
	} {
		if tt.wire != tt.domain {
			t.Errorf("%s is %q, the agent writes %q", tt.name, tt.wire, tt.domain)
		}
	}
}
