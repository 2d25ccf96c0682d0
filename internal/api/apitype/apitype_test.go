package apitype

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/auth"
)

// TestTokenPrefix: the prefix a client checks a token by is the one the
// agent makes tokens with.
func TestTokenPrefix(t *testing.T) {
	if TokenPrefix != auth.TokenPrefix {
		t.Errorf("TokenPrefix %q, auth.TokenPrefix %q", TokenPrefix, auth.TokenPrefix)
	}
}
