package auth

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/config"
)

// TestParseTokenNeverEchoesASecret: a token pasted where its entry belongs
// is refused without being repeated, since the error goes to the log.
func TestParseTokenNeverEchoesASecret(t *testing.T) {
	secret, _, err := NewToken("t", "alice", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range []string{secret, "user=alice role=user " + secret, "user=alice role=user sha256=" + secret} {
		_, err := config.ParseToken("t", entry)
		if err == nil {
			t.Fatalf("ParseToken(%q) accepted a token", entry)
		}
		if strings.Contains(err.Error(), secret[len(config.TokenPrefix):]) {
			t.Errorf("ParseToken error %q repeats the token", err)
		}
	}
}

func TestNewTokenRoundTrip(t *testing.T) {
	for _, expires := range []time.Time{{}, time.Date(2027, 3, 1, 12, 30, 15, 999_000_000, time.FixedZone("CET", 3600))} {
		secret, tok, err := NewToken("alice-laptop", "alice", config.RoleUser, expires)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, config.TokenPrefix) || len(secret) != len(config.TokenPrefix)+43 {
			t.Errorf("secret %q is not gpm_ and 43 base64 characters (256 bits)", secret)
		}
		if tok.Hash != HashToken(secret) {
			t.Errorf("the token's hash is not HashToken(secret)")
		}
		if strings.Contains(tok.Entry(), secret) || strings.Contains(tok.Entry(), secret[len(config.TokenPrefix):]) {
			t.Errorf("the entry %q holds the secret", tok.Entry())
		}
		if !strings.Contains(tok.Entry(), "sha256="+hex.EncodeToString(tok.Hash[:])) {
			t.Errorf("the entry %q does not hold the hash", tok.Entry())
		}
		if want := expires.UTC().Truncate(time.Second); !tok.Expires.Equal(want) || (!want.IsZero() && tok.Expires.Location() != time.UTC) {
			t.Errorf("expires %v, want %v in UTC", tok.Expires, want)
		}
		back, err := config.ParseToken(tok.ID, tok.Entry())
		if err != nil {
			t.Fatalf("ParseToken(%q) = %v", tok.Entry(), err)
		}
		if diff := cmp.Diff(tok, back); diff != "" {
			t.Errorf("the entry does not parse back (-want +got):\n%s", diff)
		}
	}

	s1, _, _ := NewToken("a", "alice", config.RoleUser, time.Time{})
	s2, _, _ := NewToken("a", "alice", config.RoleUser, time.Time{})
	if s1 == s2 {
		t.Errorf("two tokens are the same: %q", s1)
	}

	for _, tt := range []struct {
		id, user string
		role     config.Role
		want     string
	}{
		{"bad id!", "alice", config.RoleUser, `id: "bad id!" is not a name`},
		{"a", "al ice", config.RoleUser, `user "al ice" is not`},
		{"a", "alice", "root", `role "root" is not admin, user or viewer`},
	} {
		if _, _, err := NewToken(tt.id, tt.user, tt.role, time.Time{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewToken(%q, %q, %q) = %v, want an error containing %q", tt.id, tt.user, tt.role, err, tt.want)
		}
	}
}
