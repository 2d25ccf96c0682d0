package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/units"
)

func newToken() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make API tokens",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreate())
	return cmd
}

// tokenCreated is what token create prints as JSON.
type tokenCreated struct {
	ID    string `json:"id"`
	User  string `json:"user"`
	Role  string `json:"role"`
	Token string `json:"token"`
	// Expires is RFC 3339, or null for a token that never expires.
	Expires *time.Time `json:"expires"`
	// ConfigLine is the line for auth.tokens, without its indentation.
	ConfigLine string `json:"config_line"`
}

func newTokenCreate() *cobra.Command {
	var user, role, id, expires, format string
	cmd := &cobra.Command{
		Use:   "create --user NAME --role admin|user|viewer",
		Short: "Make an API token: the token for the user, and the line for the agent's config",
		Long: `Make an API token for a user. The token is printed once: hand it to the user,
who sets it in GPUMETER_TOKEN or as token: in ~/.config/gpumeter/client.yaml
(mode 600). The agent keeps only the token's SHA-256: add the printed line
under auth.tokens in its config and send it SIGHUP to reload. Nothing else
keeps the token, so a lost one is replaced, not recovered.

Roles: admin does everything; user sees and stops their own containers and
reads their own usage; viewer reads everything and changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format: %q is not text or json", format)
			}
			if user == "" {
				return errors.New("--user: give the user the token is for")
			}
			if err := config.ValidUser(user); err != nil {
				return fmt.Errorf("--user: %w", err)
			}
			r, err := config.ParseRole(role)
			if role == "" {
				err = errors.New("give admin, user or viewer")
			}
			if err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if id == "" {
				var b [3]byte
				if _, err := rand.Read(b[:]); err != nil {
					return err
				}
				id = user + "-" + hex.EncodeToString(b[:])
			} else if err := config.ValidID(id); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			var until time.Time
			if expires != "" {
				d, err := units.ParseDuration(expires)
				if err == nil && d == 0 {
					err = errors.New("must be more than 0; leave --expires out for a token that never expires")
				}
				if err != nil {
					return fmt.Errorf("--expires: %w", err)
				}
				until = time.Now().Add(d)
			}
			secret, tok, err := auth.NewToken(id, user, r, until)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeTokenJSON(cmd.OutOrStdout(), secret, tok)
			}
			return writeTokenText(cmd.OutOrStdout(), secret, tok)
		},
	}
	f := cmd.Flags()
	f.StringVar(&user, "user", "", "the user the token is for (required)")
	f.StringVar(&role, "role", "", "admin, user or viewer (required)")
	f.StringVar(&id, "name", "", "the token's ID in auth.tokens and the audit log (default USER-<6 random hex digits>)")
	f.StringVar(&expires, "expires", "", "how long the token is valid, e.g. 90d or 12h (default: it never expires)")
	f.StringVar(&format, "format", "text", "output: text or json")
	completeValues(cmd, "format", "text", "json")
	return cmd
}

// configLine is the token's line under auth.tokens.
func configLine(t config.Token) string {
	return t.ID + ": " + strconv.Quote(t.Entry())
}

func writeTokenJSON(w io.Writer, secret string, t config.Token) error {
	out := tokenCreated{ID: t.ID, User: t.User, Role: string(t.Role), Token: secret, ConfigLine: configLine(t)}
	if !t.Expires.IsZero() {
		e := t.Expires.UTC()
		out.Expires = &e
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeTokenText(w io.Writer, secret string, t config.Token) error {
	expiry := "it never expires"
	if !t.Expires.IsZero() {
		expiry = "it expires at " + t.Expires.UTC().Format(time.RFC3339)
	}
	_, err := fmt.Fprintf(w, `Token for %s (role %s); %s. It is shown only this once:

  %s

The user sets it in GPUMETER_TOKEN, or as token: in ~/.config/gpumeter/client.yaml (chmod 600).

Add this line under auth.tokens in the agent's config (%s):

  %s

then reload the agent with SIGHUP: systemctl reload gpumeter (deploy/systemd/gpumeter.service),
docker kill --signal HUP gpumeter (the image), or kill -HUP <pid of gpumeter serve>.
`, t.User, t.Role, expiry, secret, defaultConfigPath, configLine(t))
	return err
}
