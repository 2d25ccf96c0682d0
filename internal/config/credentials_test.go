package config

import (
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// hashHex is the sha256= value of the token "hello".
const hashHex = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

func TestParseToken(t *testing.T) {
	expires := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	good := []struct {
		name, id, entry string
		want            Token
	}{
		{"plain", "alice-laptop", "user=alice role=user sha256=" + hashHex,
			Token{ID: "alice-laptop", User: "alice", Role: RoleUser, Hash: sha256.Sum256([]byte("hello"))}},
		{"expiring", "ops", "user=ops role=admin sha256=" + hashHex + " expires=2027-03-01T00:00:00Z",
			Token{ID: "ops", User: "ops", Role: RoleAdmin, Hash: sha256.Sum256([]byte("hello")), Expires: expires}},
		{"fields in any order and spacing", "g", "  sha256=" + hashHex + "\trole=viewer   user=grafana ",
			Token{ID: "g", User: "grafana", Role: RoleViewer, Hash: sha256.Sum256([]byte("hello"))}},
		{"upper-case hex", "g", "user=g role=viewer sha256=" + strings.ToUpper(hashHex),
			Token{ID: "g", User: "g", Role: RoleViewer, Hash: sha256.Sum256([]byte("hello"))}},
		{"an offset is kept as the same instant", "ops", "user=ops role=admin sha256=" + hashHex + " expires=2027-03-01T02:00:00+02:00",
			Token{ID: "ops", User: "ops", Role: RoleAdmin, Hash: sha256.Sum256([]byte("hello")), Expires: expires}},
		{"user with dots and at", "a.b@lab", "user=a.b@lab role=user sha256=" + hashHex,
			Token{ID: "a.b@lab", User: "a.b@lab", Role: RoleUser, Hash: sha256.Sum256([]byte("hello"))}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseToken(tt.id, tt.entry)
			if err != nil {
				t.Fatalf("ParseToken(%q, %q) = %v", tt.id, tt.entry, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("token (-want +got):\n%s", diff)
			}
		})
	}

	// Each error must name what is wrong, so that the config error it
	// becomes (auth.tokens.ID: ...) says what to fix.
	bad := []struct {
		name, id, entry, want string
	}{
		{"empty id", "", "user=a role=user sha256=" + hashHex, `"" is not a name of 1 to 64`},
		{"id with a space", "my token", "user=a role=user sha256=" + hashHex, `"my token" is not a name`},
		{"id starting with a dash", "-x", "user=a role=user sha256=" + hashHex, `"-x" is not a name`},
		{"id too long", strings.Repeat("a", 65), "user=a role=user sha256=" + hashHex, "is not a name of 1 to 64"},
		{"empty entry", "t", "", "user= is missing"},
		{"no role", "t", "user=a sha256=" + hashHex, "role= is missing"},
		{"no hash", "t", "user=a role=user", "sha256= is missing"},
		{"not key=value", "t", "user=a role=user sha256=" + hashHex + " admin", `"admin" is not key=value`},
		{"empty value", "t", "user= role=user sha256=" + hashHex, `"user=" is not key=value`},
		{"unknown key", "t", "user=a role=user sha256=" + hashHex + " team=ml", `"team" is not one of user, role, sha256, expires`},
		{"repeated key", "t", "user=a user=b role=user sha256=" + hashHex, "user= is given twice"},
		{"bad user", "t", "user=al/ice role=user sha256=" + hashHex, `user "al/ice" is not 1 to 64`},
		{"bad role", "t", "user=a role=root sha256=" + hashHex, `role "root" is not admin, user or viewer`},
		{"role in capitals", "t", "user=a role=Admin sha256=" + hashHex, `role "Admin" is not admin, user or viewer`},
		{"short hash", "t", "user=a role=user sha256=abcd", "sha256= is not 64 hex digits"},
		{"hash not hex", "t", "user=a role=user sha256=" + strings.Repeat("zz", 32), "sha256= is not 64 hex digits"},
		{"token instead of hash", "t", "user=a role=user sha256=gpm_abc", "sha256= is not 64 hex digits"},
		{"bad expiry", "t", "user=a role=user sha256=" + hashHex + " expires=2027-03-01", `expires="2027-03-01" is not an RFC 3339 time`},
		{"zero expiry", "t", "user=a role=user sha256=" + hashHex + " expires=0001-01-01T00:00:00Z", "is not between the years 1970 and 9999"},
		{"expiry past 9999 in UTC", "t", "user=a role=user sha256=" + hashHex + " expires=9999-12-31T23:00:00-02:00", "is not between the years 1970 and 9999"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseToken(tt.id, tt.entry)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseToken(%q, %q) = %+v, %v; want an error containing %q", tt.id, tt.entry, got, err, tt.want)
			}
		})
	}
}

func TestParseCertUser(t *testing.T) {
	good := []struct {
		name, cn, entry string
		want            CertUser
	}{
		{"plain", "ops.lab", "user=ops role=admin", CertUser{Name: "ops.lab", User: "ops", Role: RoleAdmin}},
		{"a name with spaces", "Alice Smith", "role=user user=alice", CertUser{Name: "Alice Smith", User: "alice", Role: RoleUser}},
		{"viewer", "grafana", " user=grafana  role=viewer ", CertUser{Name: "grafana", User: "grafana", Role: RoleViewer}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCertUser(tt.cn, tt.entry)
			if err != nil {
				t.Fatalf("ParseCertUser(%q, %q) = %v", tt.cn, tt.entry, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("mapping (-want +got):\n%s", diff)
			}
		})
	}
	bad := []struct {
		name, cn, entry, want string
	}{
		{"empty name", "", "user=a role=user", `certificate name "" is empty or has a line break`},
		{"blank name", "  ", "user=a role=user", `certificate name "  " is empty`},
		{"line break", "a\nb", "user=a role=user", `certificate name "a\nb" is empty or has a line break`},
		{"no user", "c", "role=user", "user= is missing (want user=NAME role=ROLE)"},
		{"no role", "c", "user=a", "role= is missing"},
		{"a token's key", "c", "user=a role=user sha256=" + hashHex, `"sha256" is not one of user, role`},
		{"repeated", "c", "user=a role=user role=admin", "role= is given twice"},
		{"bad user", "c", "user=a:b role=user", `user "a:b" is not`},
		{"bad role", "c", "user=a role=owner", `role "owner" is not admin, user or viewer`},
		{"not key=value", "c", "user=a role=user x", `"x" is not key=value`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCertUser(tt.cn, tt.entry)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseCertUser(%q, %q) = %+v, %v; want an error containing %q", tt.cn, tt.entry, got, err, tt.want)
			}
		})
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("alice-laptop", "user=alice role=user sha256="+hashHex)
	f.Add("ops", "user=ops role=admin sha256="+hashHex+" expires=2027-03-01T00:00:00Z")
	f.Add("ops", "user=ops role=admin sha256="+hashHex+" expires=2027-03-01T00:00:00.25+05:30")
	f.Add("g", "sha256="+strings.ToUpper(hashHex)+" role=viewer user=g")
	f.Add("x", "user=a=b role==user sha256=")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, id, entry string) {
		tok, err := ParseToken(id, entry)
		if err != nil {
			return
		}
		back, err := ParseToken(id, tok.Entry())
		if err != nil {
			t.Fatalf("ParseToken(%q, %q) accepted, but its entry %q does not parse: %v", id, entry, tok.Entry(), err)
		}
		if diff := cmp.Diff(tok, back); diff != "" {
			t.Errorf("ParseToken(%q, %q): entry %q parses to something else (-first +again):\n%s", id, entry, tok.Entry(), diff)
		}
		if back.Entry() != tok.Entry() {
			t.Errorf("entry %q renders again as %q", tok.Entry(), back.Entry())
		}
	})
}

func FuzzParseCertUser(f *testing.F) {
	f.Add("ops.lab", "user=ops role=admin")
	f.Add("Alice Smith", "role=user user=alice")
	f.Add("a\nb", "user=a role=user")
	f.Add("c", "user=a role=user role=admin")
	f.Fuzz(func(t *testing.T, cn, entry string) {
		c, err := ParseCertUser(cn, entry)
		if err != nil {
			return
		}
		back, err := ParseCertUser(cn, c.Entry())
		if err != nil {
			t.Fatalf("ParseCertUser(%q, %q) accepted, but its entry %q does not parse: %v", cn, entry, c.Entry(), err)
		}
		if diff := cmp.Diff(c, back); diff != "" {
			t.Errorf("ParseCertUser(%q, %q): entry %q parses to something else (-first +again):\n%s", cn, entry, c.Entry(), diff)
		}
	})
}
