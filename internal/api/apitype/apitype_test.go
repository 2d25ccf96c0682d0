package apitype

import (
	"testing"

	"github.com/gpumeter/gpumeter/internal/config"
)

// TestTokenPrefix: the prefix a client checks a token by is the one the
// agent makes tokens with.
func TestTokenPrefix(t *testing.T) {
	if TokenPrefix != config.TokenPrefix {
		t.Errorf("TokenPrefix %q, config.TokenPrefix %q", TokenPrefix, config.TokenPrefix)
	}
}
