package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Role is what a caller of the API may do, as the entries of auth.tokens
// and auth.client_certs name it; the auth package decides what each role
// may do.
type Role string

// The roles. An admin may do everything; a user sees and acts on their own
// containers and usage; a viewer reads everything and changes nothing.
const (
	RoleAdmin  Role = "admin"
	RoleUser   Role = "user"
	RoleViewer Role = "viewer"
)

// Roles lists the roles, most powerful first.
var Roles = []Role{RoleAdmin, RoleUser, RoleViewer}

// ParseRole parses a role name.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("role %q is not admin, user or viewer", s)
}

// TokenPrefix starts every token, so that a token pasted into the wrong
// place (a log, a chat) is recognisable and can be searched for.
const TokenPrefix = "gpm_"

// Token is one configured API token, an entry of auth.tokens. The secret itself is never kept:
// only its SHA-256, which is safe to store because a token has 256 bits
// of entropy, so no dictionary or brute force can reverse it.
type Token struct {
	ID      string // the name in auth.tokens, shown in the audit log
	User    string
	Role    Role
	Hash    [sha256.Size]byte
	Expires time.Time // zero: never
}

var (
	idPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$`)
	userPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$`)
)

// ValidID checks a token ID or certificate name.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%q is not a name of 1 to 64 letters, digits and _.@- starting with a letter or digit", id)
	}
	return nil
}

// ValidUser checks a user name.
func ValidUser(u string) error {
	if !userPattern.MatchString(u) {
		return fmt.Errorf("user %q is not 1 to 64 letters, digits and _.@-", u)
	}
	return nil
}

// Entry renders the token as the value of its auth.tokens line.
func (t Token) Entry() string {
	s := "user=" + t.User + " role=" + string(t.Role) + " sha256=" + hex.EncodeToString(t.Hash[:])
	if !t.Expires.IsZero() {
		// RFC3339Nano, so that a fraction of a second given in the config
		// is not lost; whole seconds render as RFC 3339 does.
		s += " expires=" + t.Expires.UTC().Format(time.RFC3339Nano)
	}
	return s
}

// ParseToken parses the value of an auth.tokens entry:
//
//	user=alice role=user sha256=<64 hex digits> [expires=2027-03-01T00:00:00Z]
func ParseToken(id, entry string) (Token, error) {
	t := Token{ID: id}
	if err := ValidID(id); err != nil {
		return t, err
	}
	fields, err := parseFields(entry, "user", "role", "sha256", "expires")
	if err != nil {
		return t, err
	}
	for _, need := range []string{"user", "role", "sha256"} {
		if _, ok := fields[need]; !ok {
			return t, fmt.Errorf("%s= is missing (want user=NAME role=ROLE sha256=HASH [expires=TIME]; `gpumeter token create` prints one)", need)
		}
	}
	t.User = fields["user"]
	if err := ValidUser(t.User); err != nil {
		return t, err
	}
	if t.Role, err = ParseRole(fields["role"]); err != nil {
		return t, err
	}
	h, err := hex.DecodeString(fields["sha256"])
	if err != nil || len(h) != sha256.Size {
		return t, errors.New("sha256= is not 64 hex digits (put the hash line `gpumeter token create` printed here, never the token)")
	}
	copy(t.Hash[:], h)
	if e, ok := fields["expires"]; ok {
		if t.Expires, err = time.Parse(time.RFC3339, e); err != nil {
			return t, fmt.Errorf("expires=%q is not an RFC 3339 time like 2027-03-01T00:00:00Z", e)
		}
		// A zero time would mean never, and a year outside 1970..9999 in
		// UTC could not be written back as RFC 3339.
		t.Expires = t.Expires.UTC()
		if y := t.Expires.Year(); y < 1970 || y > 9999 {
			return t, fmt.Errorf("expires=%q is not between the years 1970 and 9999", e)
		}
	}
	return t, nil
}

// CertUser is what a client certificate's common name maps to, an entry
// of auth.client_certs.
type CertUser struct {
	Name string // the certificate's subject common name
	User string
	Role Role
}

// ParseCertUser parses the value of an auth.client_certs entry:
//
//	user=alice role=user
func ParseCertUser(cn, entry string) (CertUser, error) {
	c := CertUser{Name: cn}
	if strings.TrimSpace(cn) == "" || strings.ContainsAny(cn, "\n\r") {
		return c, fmt.Errorf("certificate name %q is empty or has a line break", cn)
	}
	fields, err := parseFields(entry, "user", "role")
	if err != nil {
		return c, err
	}
	for _, need := range []string{"user", "role"} {
		if _, ok := fields[need]; !ok {
			return c, fmt.Errorf("%s= is missing (want user=NAME role=ROLE)", need)
		}
	}
	c.User = fields["user"]
	if err := ValidUser(c.User); err != nil {
		return c, err
	}
	c.Role, err = ParseRole(fields["role"])
	return c, err
}

// Entry renders the mapping as the value of its auth.client_certs line.
func (c CertUser) Entry() string { return "user=" + c.User + " role=" + string(c.Role) }

// parseFields splits "k=v k=v" into a map, refusing unknown and repeated
// keys.
func parseFields(s string, allowed ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || v == "" {
			// Never echo a token, which would put the secret in a log.
			if strings.HasPrefix(f, TokenPrefix) {
				return nil, errors.New("a token is not an entry: put the line `gpumeter token create` printed for auth.tokens here, never the token")
			}
			return nil, fmt.Errorf("%q is not key=value", f)
		}
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, fmt.Errorf("%q is not one of %s", k, strings.Join(allowed, ", "))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s= is given twice", k)
		}
		out[k] = v
	}
	return out, nil
}
