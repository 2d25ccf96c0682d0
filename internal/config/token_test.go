package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
)

// TestTokenNeverInErrors: a token pasted in place of its entry is refused
// without the error, which is logged, repeating it.
func TestTokenNeverInErrors(t *testing.T) {
	secret, _, err := auth.NewToken("alice", "alice", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	err = c.Parse("cfg.yaml", []byte("auth:\n  tokens:\n    alice: "+secret+"\n"))
	if err == nil || !strings.Contains(err.Error(), "cfg.yaml:3: auth.tokens.alice: a token is not an entry") {
		t.Errorf("Parse() error = %v, want one saying a token is not an entry", err)
	}
	if err != nil && strings.Contains(err.Error(), secret[len(config.TokenPrefix):]) {
		t.Errorf("error %q repeats the token", err)
	}
	c = config.Default()
	if err := c.LoadEnv([]string{"GPUMETER_AUTH_TOKENS=alice=" + secret}); err == nil || strings.Contains(err.Error(), secret[len(config.TokenPrefix):]) {
		t.Errorf("LoadEnv() error = %v, want a refusal that does not repeat the token", err)
	}
}
