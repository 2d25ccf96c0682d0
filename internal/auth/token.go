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

// NewToken makes a token for user with role: the secret, to be handed to
// the user once, and the entry to keep in the config.
func NewToken(id, user string, role config.Role, expires time.Time) (secret string, t config.Token, err error) {
	if err := config.ValidID(id); err != nil {
		return "", config.Token{}, fmt.Errorf("id: %w", err)
	}
	if err := config.ValidUser(user); err != nil {
		return "", config.Token{}, err
	}
	if _, err := config.ParseRole(string(role)); err != nil {
		return "", config.Token{}, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", config.Token{}, err
	}
	secret = config.TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, config.Token{ID: id, User: user, Role: role, Hash: HashToken(secret), Expires: expires.UTC().Truncate(time.Second)}, nil
}

// HashToken is the hash a token is stored and looked up by.
func HashToken(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }
