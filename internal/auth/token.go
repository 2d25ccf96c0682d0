// Package auth says who is calling the agent's API and what they may do:
// bearer tokens stored as hashes, client certificates and Unix socket
// peers become an Identity; Authorize is the one place that decides.
// The entries tokens and certificates are configured by, and their
// roles, are settings: config parses and checks them.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/config"
)

// Role is what a caller may do.
type Role = config.Role

// The roles. An admin may do everything; a user sees and acts on their own
// containers and usage; a viewer reads everything and changes nothing.
const (
	RoleAdmin  = config.RoleAdmin
	RoleUser   = config.RoleUser
	RoleViewer = config.RoleViewer
)

// TokenPrefix starts every token, so that a token pasted into the wrong
// place (a log, a chat) is recognisable and can be searched for.
const TokenPrefix = config.TokenPrefix

// Token is one configured API token: only its hash is kept.
type Token = config.Token

// CertUser is what a client certificate's common name maps to.
type CertUser = config.CertUser

// NewToken makes a token for user with role: the secret, to be handed to
// the user once, and the entry to keep in the config.
func NewToken(id, user string, role Role, expires time.Time) (secret string, t Token, err error) {
	if err := config.ValidID(id); err != nil {
		return "", Token{}, fmt.Errorf("id: %w", err)
	}
	if err := config.ValidUser(user); err != nil {
		return "", Token{}, err
	}
	if _, err := config.ParseRole(string(role)); err != nil {
		return "", Token{}, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", Token{}, err
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Token{ID: id, User: user, Role: role, Hash: HashToken(secret), Expires: expires.UTC().Truncate(time.Second)}, nil
}

// HashToken is the hash a token is stored and looked up by.
func HashToken(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }
