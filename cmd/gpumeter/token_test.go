package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
)

// runCmd runs the command line args in this process, as main would.
func runCmd(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// checkConfigLine parses line as the agent's config would, under
// auth.tokens, and checks that it holds the hash of secret.
func checkConfigLine(t *testing.T, line, secret string) config.Token {
	t.Helper()
	var entry map[string]string
	if err := yaml.Unmarshal([]byte(line), &entry); err != nil || len(entry) != 1 {
		t.Fatalf("config line %q is not one YAML key: %v", line, err)
	}
	var tok config.Token
	for id, e := range entry {
		var err error
		if tok, err = config.ParseToken(id, e); err != nil {
			t.Fatalf("config line %q: %v", line, err)
		}
	}
	if tok.Hash != auth.HashToken(secret) {
		t.Errorf("the config line's hash is not the printed token's")
	}
	cfg := config.Default()
	if err := cfg.Parse("gpumeter.yaml", []byte("auth:\n  tokens:\n    "+strings.TrimSpace(line)+"\n")); err != nil {
		t.Fatalf("the agent's config does not take the line: %v", err)
	}
	if got := cfg.Auth.Tokens[tok.ID]; got.Hash != tok.Hash {
		t.Errorf("the agent's config reads token %q as %+v", tok.ID, got)
	}
	return tok
}

func TestTokenCreateJSON(t *testing.T) {
	out, _, err := runCmd(t, "token", "create", "--user", "alice", "--role", "user", "--expires", "90d", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got tokenCreated
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`^alice-[0-9a-f]{6}$`).MatchString(got.ID) || got.User != "alice" || got.Role != "user" || !strings.HasPrefix(got.Token, config.TokenPrefix) {
		t.Errorf("token %+v, want alice-XXXXXX for alice as user with a gpm_ token", got)
	}
	tok := checkConfigLine(t, got.ConfigLine, got.Token)
	if tok.ID != got.ID || tok.User != "alice" || tok.Role != config.RoleUser {
		t.Errorf("config line gives %+v", tok)
	}
	want := time.Now().Add(90 * 24 * time.Hour)
	if got.Expires == nil || got.Expires.Sub(want).Abs() > time.Minute || !tok.Expires.Equal(*got.Expires) {
		t.Errorf("expires %v (config line %v), want about %v", got.Expires, tok.Expires, want)
	}
}

func TestTokenCreateText(t *testing.T) {
	out, _, err := runCmd(t, "token", "create", "--user", "bob", "--role", "admin", "--name", "bob-laptop")
	if err != nil {
		t.Fatal(err)
	}
	secret := regexp.MustCompile(`(?m)^  (gpm_[A-Za-z0-9_-]{43})$`).FindStringSubmatch(out)
	line := regexp.MustCompile(`(?m)^  (bob-laptop: ".*")$`).FindStringSubmatch(out)
	if secret == nil || line == nil {
		t.Fatalf("no token or config line in:\n%s", out)
	}
	tok := checkConfigLine(t, line[1], secret[1])
	if tok.Role != config.RoleAdmin || !tok.Expires.IsZero() {
		t.Errorf("config line gives %+v, want an admin token that never expires", tok)
	}
	for _, w := range []string{"never expires", "auth.tokens", "SIGHUP", "GPUMETER_TOKEN"} {
		if !strings.Contains(out, w) {
			t.Errorf("the output does not say %q:\n%s", w, out)
		}
	}
	// Two tokens are never the same.
	again, _, err := runCmd(t, "token", "create", "--user", "bob", "--role", "admin", "--name", "bob-laptop")
	if err != nil || strings.Contains(again, secret[1]) {
		t.Errorf("a second token repeats the first (err %v)", err)
	}
}

func TestTokenCreateErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--role", "user"}, "--user: give the user"},
		{[]string{"--user", "alice"}, "--role: give admin, user or viewer"},
		{[]string{"--user", "alice", "--role", "root"}, `--role: role "root" is not admin, user or viewer`},
		{[]string{"--user", "al ice", "--role", "user"}, "--user: user"},
		{[]string{"--user", "alice", "--role", "user", "--name", "-x"}, "--name:"},
		{[]string{"--user", "alice", "--role", "user", "--expires", "soon"}, "--expires:"},
		{[]string{"--user", "alice", "--role", "user", "--expires", "0s"}, "--expires: must be more than 0"},
		{[]string{"--user", "alice", "--role", "user", "--format", "yaml"}, `--format: "yaml" is not text or json`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"token", "create"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one saying %q", err, tt.want)
			}
			if strings.Contains(out, config.TokenPrefix) {
				t.Errorf("a token was printed:\n%s", out)
			}
		})
	}
}

// TestUnknownFlagSuggests: every command names the flag meant for one it
// does not know.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--intervall", "1s"}, "unknown flag: --intervall; did you mean --interval?"},
		{[]string{"report", "--bye", "user"}, "unknown flag: --bye; did you mean --by?"},
		{[]string{"jobs", "--al"}, "unknown flag: --al; did you mean --all?"},
		{[]string{"report", "--zzzzzzzz"}, "unknown flag: --zzzzzzzz; see gpumeter report --help"},
	} {
		_, _, err := runCmd(t, tc.args...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
