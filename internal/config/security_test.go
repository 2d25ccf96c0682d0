package config

import (
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The sha256= values of the tokens "hello" and "world".
const (
	helloHash = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	worldHash = "486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"
)

// TestParseSecurityErrors: a bad value under auth, api or tls is refused
// with the file, the line and the key, down to the token or certificate
// at fault.
func TestParseSecurityErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"bad role", "auth:\n  tokens:\n    alice: \"user=alice role=root sha256=" + helloHash + "\"\n",
			`cfg.yaml:3: auth.tokens.alice: role "root" is not admin, user or viewer`},
		{"unknown field in a token", "auth:\n  tokens:\n    alice: \"user=alice role=user sha256=" + helloHash + " team=ml\"\n",
			`cfg.yaml:3: auth.tokens.alice: "team" is not one of user, role, sha256, expires`},
		{"missing hash", "auth:\n  tokens:\n    alice: \"user=alice role=user\"\n",
			"cfg.yaml:3: auth.tokens.alice: sha256= is missing"},
		{"short hash", "auth:\n  tokens:\n    alice: \"user=alice role=user sha256=abc\"\n",
			"cfg.yaml:3: auth.tokens.alice: sha256= is not 64 hex digits"},
		{"bad expiry", "auth:\n  tokens:\n    alice: \"user=alice role=user sha256=" + helloHash + " expires=soon\"\n",
			`cfg.yaml:3: auth.tokens.alice: expires="soon" is not an RFC 3339 time`},
		{"bad token name", "auth:\n  tokens:\n    \"alice laptop\": \"user=alice role=user sha256=" + helloHash + "\"\n",
			`cfg.yaml:3: auth.tokens.alice laptop: "alice laptop" is not a name`},
		{"token twice", "auth:\n  tokens:\n    alice: \"user=alice role=user sha256=" + helloHash + "\"\n    alice: \"user=alice role=admin sha256=" + worldHash + "\"\n",
			"cfg.yaml:4: auth.tokens.alice: set twice"},
		{"tokens not a mapping", "auth:\n  tokens: user=alice\n", "cfg.yaml:2: auth.tokens: want a mapping of name: value"},
		{"token as a list", "auth:\n  tokens:\n    alice: [user=alice]\n", "cfg.yaml:3: auth.tokens.alice: want a single value, got a list"},
		{"certificate without role", "auth:\n  client_certs:\n    ops.lab: \"user=ops\"\n", "cfg.yaml:3: auth.client_certs.ops.lab: role= is missing"},
		{"unknown field in a certificate", "auth:\n  client_certs:\n    ops.lab: \"user=ops role=admin sha256=" + helloHash + "\"\n",
			`cfg.yaml:3: auth.client_certs.ops.lab: "sha256" is not one of user, role`},
		{"anonymous admin", "auth:\n  anonymous: admin\n", `cfg.yaml:2: auth.anonymous: "admin" is not one of none, viewer`},
		{"max body not a size", "api:\n  max_body: lots\n", `cfg.yaml:2: api.max_body: "lots" is not a size`},
		{"negative rate", "api:\n  rate_limit: -1\n", `cfg.yaml:2: api.rate_limit: "-1" is not a number of at least 0`},
		{"burst not a number", "api:\n  rate_burst: many\n", `cfg.yaml:2: api.rate_burst: "many" is not a whole number`},
		{"bad timeout", "api:\n  read_timeout: forever\n", `cfg.yaml:2: api.read_timeout: "forever" is not a duration`},
		{"bad client auth", "tls:\n  client_auth: maybe\n", `cfg.yaml:2: tls.client_auth: "maybe" is not one of optional, required`},
		{"unknown tls key", "tls:\n  cert: x\n", `cfg.yaml:2: unknown key "tls.cert"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			err := c.Parse("cfg.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestParseMapKeysOnce: any map key given twice is an error, not the last
// one silently winning.
func TestParseMapKeysOnce(t *testing.T) {
	c := Default()
	err := c.Parse("cfg.yaml", []byte("idle_power:\n  H100: 70W\n  H100: 60W\n"))
	if err == nil || !strings.Contains(err.Error(), "cfg.yaml:3: idle_power.H100: set twice") {
		t.Errorf("Parse() error = %v, want idle_power.H100 set twice", err)
	}
}

// TestSecurityEnv: tokens and certificates come from the environment as
// they do from a file, and are refused with the same words, naming the
// entry.
func TestSecurityEnv(t *testing.T) {
	c := Default()
	err := c.LoadEnv([]string{
		"GPUMETER_AUTH_TOKENS=alice=user=alice role=user sha256=" + helloHash + ",ci=user=ci role=viewer sha256=" + worldHash + " expires=2027-03-01T00:00:00Z",
		"GPUMETER_AUTH_CLIENT_CERTS=ops.lab=user=ops role=admin",
		"GPUMETER_API_MAX_BODY=16KiB",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Auth{
		Tokens: map[string]Token{
			"alice": {ID: "alice", User: "alice", Role: RoleUser, Hash: sha256.Sum256([]byte("hello"))},
			"ci":    {ID: "ci", User: "ci", Role: RoleViewer, Hash: sha256.Sum256([]byte("world")), Expires: time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)},
		},
		ClientCerts: map[string]CertUser{"ops.lab": {Name: "ops.lab", User: "ops", Role: RoleAdmin}},
		Anonymous:   "none",
	}
	if diff := cmp.Diff(want, c.Auth); diff != "" {
		t.Errorf("auth (-want +got):\n%s", diff)
	}
	if c.API.MaxBodyBytes != 16<<10 {
		t.Errorf("max body %d, want 16KiB", c.API.MaxBodyBytes)
	}

	for env, want := range map[string]string{
		"GPUMETER_AUTH_TOKENS=alice=user=alice role=root sha256=" + helloHash: `environment GPUMETER_AUTH_TOKENS: auth.tokens.alice: role "root" is not admin, user or viewer`,
		"GPUMETER_AUTH_TOKENS=user=alice role=user":                           `auth.tokens.user: "alice" is not key=value`,
		"GPUMETER_AUTH_TOKENS=alice":                                          "auth.tokens: want name=value",
		"GPUMETER_AUTH_CLIENT_CERTS=ops.lab=user=ops":                         "environment GPUMETER_AUTH_CLIENT_CERTS: auth.client_certs.ops.lab: role= is missing",
		"GPUMETER_IDLE_POWER=H100=lots":                                       `idle_power.H100: "lots" is not a power`,
		"GPUMETER_TLS_CLIENT_AUTH=always":                                     `tls.client_auth: "always" is not one of optional, required`,
	} {
		c := Default()
		if err := c.LoadEnv([]string{env}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadEnv(%q) = %v, want it to contain %q", env, err, want)
		}
	}

	// A flag names the entry too.
	c = Default()
	if err := c.Set("auth.tokens", "alice=user=alice role=user"); err == nil || err.Error() != "auth.tokens.alice: sha256= is missing (want user=NAME role=ROLE sha256=HASH [expires=TIME]; `gpumeter token create` prints one)" {
		t.Errorf("Set() = %v", err)
	}
}

// TestValidateSecurity: values that parse but do not fit together are
// refused by Validate, each naming its key.
func TestValidateSecurity(t *testing.T) {
	hello, err := ParseToken("a", "user=alice role=user sha256="+helloHash)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"cert without key", func(c *Config) { c.TLS.CertFile = "/etc/tls/server.crt" }, "tls.cert_file, tls.key_file: set both or neither"},
		{"key without cert", func(c *Config) { c.TLS.KeyFile = "/etc/tls/server.key" }, "tls.cert_file, tls.key_file: set both or neither"},
		{"client CA without cert", func(c *Config) { c.TLS.ClientCAFile = "/etc/tls/ca.pem" }, "tls.client_ca_file: client certificates need HTTPS: set tls.cert_file and tls.key_file too"},
		{"required without CA", func(c *Config) {
			c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ClientAuth = "/etc/tls/server.crt", "/etc/tls/server.key", "required"
		}, "tls.client_auth: required needs tls.client_ca_file"},
		{"client certs without CA", func(c *Config) {
			c.Auth.ClientCerts["ops.lab"] = CertUser{Name: "ops.lab", User: "ops", Role: RoleAdmin}
		}, "auth.client_certs: no client certificate can be verified without tls.client_ca_file"},
		{"max body too small", func(c *Config) { c.API.MaxBodyBytes = 512 }, "api.max_body: 512 is below 1KiB"},
		{"burst 0 with a rate", func(c *Config) { c.API.RateBurst = 0 }, "api.rate_burst: 0 is below 1 while api.rate_limit is on"},
		{"read timeout under the header timeout", func(c *Config) { c.API.ReadTimeout = time.Second },
			"api.read_timeout: 1s is outside api.read_header_timeout..10m"},
		{"read timeout too long", func(c *Config) { c.API.ReadTimeout = time.Hour }, "api.read_timeout: 1h is outside api.read_header_timeout..10m"},
		{"session lifetime too short", func(c *Config) { c.API.SessionLifetime = 30 * time.Second }, "api.session_lifetime: 30s is outside 1m..30d"},
		{"session lifetime too long", func(c *Config) { c.API.SessionLifetime = 31 * 24 * time.Hour }, "api.session_lifetime: 31d is outside 1m..30d"},
		{"no session lifetime", func(c *Config) { c.API.SessionLifetime = 0 }, "api.session_lifetime: 0s is outside 1m..30d"},
		{"header timeout too short", func(c *Config) { c.API.ReadHeaderTimeout = 50 * time.Millisecond }, "api.read_header_timeout: 50ms is outside 100ms..1m"},
		{"report window too short", func(c *Config) { c.API.MaxReportWindow = 30 * time.Minute }, "api.max_report_window: 30m is shorter than an hour"},
		{"no report rows", func(c *Config) { c.API.MaxReportRows = 0 }, "api.max_report_rows: 0 is below 1"},
		{"one token under two names", func(c *Config) {
			b := hello
			b.ID = "b"
			c.Auth.Tokens["a"], c.Auth.Tokens["b"] = hello, b
		}, "auth.tokens.b: the same token as auth.tokens.a; create a new one for each"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}

	for name, mod := range map[string]func(*Config){
		"rate off, burst 0": func(c *Config) { c.API.RateLimit, c.API.RateBurst = 0, 0 },
		"HTTPS with required client certificates": func(c *Config) {
			c.TLS = TLS{CertFile: "s.crt", KeyFile: "s.key", ClientCAFile: "ca.pem", ClientAuth: "required"}
			c.Auth.ClientCerts["ops.lab"] = CertUser{Name: "ops.lab", User: "ops", Role: RoleAdmin}
		},
		"client certificates verified by the web config": func(c *Config) {
			c.WebConfigFile = "web.yml"
			c.Auth.ClientCerts["ops.lab"] = CertUser{Name: "ops.lab", User: "ops", Role: RoleAdmin}
		},
		"read timeout equal to the header timeout": func(c *Config) { c.API.ReadTimeout = c.API.ReadHeaderTimeout },
		"anonymous viewers":                        func(c *Config) { c.Auth.Anonymous = "viewer" },
	} {
		c := Default()
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
}
