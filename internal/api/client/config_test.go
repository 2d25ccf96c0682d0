package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/testenv"
)

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestResolveClient(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, "gpumeter")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	def := testenv.WriteFile(t, dir, "client.yaml", "url: https://file:9400\ntoken: gpm_file\nca_file: ca.pem\ncert_file: /etc/me.pem\nkey_file: me-key.pem\n", 0o600)
	other := testenv.WriteFile(t, t.TempDir(), "other.yaml", "# only a token\n\ntoken: gpm_other\n", 0o640)
	_, socket := testenv.ListenUnix(t)
	_, demo := testenv.ListenUnix(t)
	noSocket := filepath.Join(t.TempDir(), "api.sock")

	tests := []struct {
		name      string
		flags     Flags
		env       map[string]string
		configDir string
		socket    string
		demo      string // the socket a demo's record names
		want      Settings
	}{
		{
			name: "nothing set, a demo running", configDir: t.TempDir(), socket: noSocket, demo: demo,
			want: Settings{Options: Options{URL: "unix://" + demo}, URLFrom: URLFromDemo},
		},
		{
			name: "nothing set, a demo's record left behind", configDir: t.TempDir(), socket: noSocket, demo: noSocket,
			want: Settings{Options: Options{URL: DefaultURL}, URLFrom: URLFromDefault},
		},
		{
			name: "the local socket over a demo", configDir: t.TempDir(), socket: socket, demo: demo,
			want: Settings{Options: Options{URL: "unix://" + socket}, URLFrom: URLFromSocket},
		},
		{
			name: "GPUMETER_URL over a demo", configDir: t.TempDir(), socket: noSocket, demo: demo,
			env:  map[string]string{"GPUMETER_URL": "http://env:1"},
			want: Settings{Options: Options{URL: "http://env:1"}, URLFrom: "GPUMETER_URL"},
		},
		{
			name: "nothing set, no socket", configDir: t.TempDir(), socket: noSocket,
			want: Settings{Options: Options{URL: DefaultURL}, URLFrom: URLFromDefault},
		},
		{
			name: "nothing set, the local socket", configDir: t.TempDir(), socket: socket,
			want: Settings{Options: Options{URL: "unix://" + socket}, URLFrom: URLFromSocket},
		},
		{
			name: "no config directory", socket: noSocket,
			want: Settings{Options: Options{URL: DefaultURL}, URLFrom: URLFromDefault},
		},
		{
			name: "the default file", configDir: home, socket: socket,
			want: Settings{
				Options:   Options{URL: "https://file:9400", Token: "gpm_file", CAFile: filepath.Join(dir, "ca.pem"), CertFile: "/etc/me.pem", KeyFile: filepath.Join(dir, "me-key.pem")},
				TokenFrom: def + ":2",
				URLFrom:   def + ":1",
			},
		},
		{
			name: "environment over the file", configDir: home, socket: socket,
			env: map[string]string{"GPUMETER_URL": "http://env:1", "GPUMETER_TOKEN": "gpm_env", "GPUMETER_CA_FILE": "/env/ca.pem"},
			want: Settings{
				Options:   Options{URL: "http://env:1", Token: "gpm_env", CAFile: "/env/ca.pem", CertFile: "/etc/me.pem", KeyFile: filepath.Join(dir, "me-key.pem")},
				TokenFrom: "GPUMETER_TOKEN",
				URLFrom:   "GPUMETER_URL",
			},
		},
		{
			name: "flags over the environment", configDir: home, socket: socket,
			flags: Flags{URL: "unix:///flag.sock", CAFile: "/flag/ca.pem"},
			env:   map[string]string{"GPUMETER_URL": "http://env:1", "GPUMETER_CA_FILE": "/env/ca.pem"},
			want: Settings{
				Options:   Options{URL: "unix:///flag.sock", Token: "gpm_file", CAFile: "/flag/ca.pem", CertFile: "/etc/me.pem", KeyFile: filepath.Join(dir, "me-key.pem")},
				TokenFrom: def + ":2",
				URLFrom:   "--url",
			},
		},
		{
			name: "GPUMETER_CLIENT_CONFIG over the default file", configDir: home, socket: noSocket,
			env: map[string]string{"GPUMETER_CLIENT_CONFIG": other},
			want: Settings{
				Options:   Options{URL: DefaultURL, Token: "gpm_other"},
				TokenFrom: other + ":3",
				URLFrom:   URLFromDefault,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.flags, Env{Getenv: mapEnv(tt.env), ConfigDir: tt.configDir, Socket: tt.socket, DemoSocket: tt.demo})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Settings{}, "ConfigPath")); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveClientErrors(t *testing.T) {
	tests := []struct {
		name string
		file string // the client config's text; "" for none
		mode os.FileMode
		env  map[string]string
		want []string // {file} stands for the client config's path
	}{
		{name: "readable by others", file: "token: gpm_x\n", mode: 0o644, want: []string{"{file}", "mode 0644", "chmod 600 {file}"}},
		{name: "writable by others", file: "url: http://x:1\n", mode: 0o602, want: []string{"chmod 600 {file}"}},
		{name: "strict", file: "url: http://x:1\ntokn: gpm_x\n", mode: 0o600, want: []string{`{file}:2: unknown key "tokn"`}},
		{name: "hash for a token", file: "token: sha256=" + strings.Repeat("ab", 32) + "\n", mode: 0o600, want: []string{"{file}:1:", "hash"}},
		{name: "not a token", file: "token: hunter2\n", mode: 0o600, want: []string{"{file}:1:", "not a gpumeter token", "gpm_"}},
		{name: "bad token in the environment", env: map[string]string{"GPUMETER_TOKEN": "gpm_a b"}, want: []string{"GPUMETER_TOKEN:", "spaces"}},
		{name: "named file missing", env: map[string]string{"GPUMETER_CLIENT_CONFIG": "/nonexistent/client.yaml"}, want: []string{"/nonexistent/client.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = testenv.WriteFile(t, t.TempDir(), "client.yaml", tt.file, tt.mode)
				tt.env = map[string]string{"GPUMETER_CLIENT_CONFIG": path}
			}
			_, err := Resolve(Flags{}, Env{Getenv: mapEnv(tt.env), ConfigDir: t.TempDir()})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "{file}", path); !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
}

func TestParseClientConfig(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       fileConfig
		wantErr    string
	}{
		{name: "empty", yaml: ""},
		{name: "comments only", yaml: "# nothing yet\n"},
		{name: "null", yaml: "~\n"},
		{name: "all keys", yaml: "url: https://a:1\ntoken: 'gpm_x'\nca_file: \"c.pem\"\ncert_file: d.pem\nkey_file: e.pem\n",
			want: fileConfig{URL: "https://a:1", Token: "gpm_x", CAFile: "c.pem", CertFile: "d.pem", KeyFile: "e.pem"}},
		{name: "empty value", yaml: "url:\ntoken: gpm_x\n", want: fileConfig{Token: "gpm_x"}},
		{name: "unknown key", yaml: "url: http://a:1\n\nURL: http://b:1\n", wantErr: `c.yaml:3: unknown key "URL" (want url, token, ca_file, cert_file, key_file)`},
		{name: "twice", yaml: "token: gpm_a\ntoken: gpm_b\n", wantErr: "c.yaml:2: token: set twice"},
		{name: "number", yaml: "url: http://a:1\ntoken: 12345\n", wantErr: `c.yaml:2: token: want a string, got int "12345" (put it in quotes)`},
		{name: "bool", yaml: "ca_file: true\n", wantErr: `c.yaml:1: ca_file: want a string, got bool "true"`},
		{name: "list", yaml: "url:\n  - http://a:1\n", wantErr: "c.yaml:2: url: want a string, got a list"},
		{name: "mapping", yaml: "url: {host: a}\n", wantErr: "c.yaml:1: url: want a string, got a mapping"},
		{name: "alias", yaml: "url: &u http://a:1\ntoken: *u\n", wantErr: "c.yaml:2: token: want a string, got an alias"},
		{name: "tagged", yaml: "token: !!binary Z3BtX3g=\n", wantErr: `c.yaml:1: token: want a string, got binary`},
		{name: "not a mapping", yaml: "- url\n", wantErr: "c.yaml:1: want a mapping of keys"},
		{name: "two documents", yaml: "url: http://a:1\n---\ntoken: gpm_x\n", wantErr: "c.yaml:2: a second YAML document"},
		{name: "syntax", yaml: "url: \"http://a\n", wantErr: "c.yaml: yaml: line 2"},
		{name: "key not a name", yaml: "[a]: b\n", wantErr: "c.yaml:1: a key must be a name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFileConfig("c.yaml", []byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one starting %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreUnexported(fileConfig{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzClientConfig: the parser never panics, names the file in every
// error, and what it reads is what it reads back once written out again.
func FuzzClientConfig(f *testing.F) {
	for _, s := range []string{
		"", "url: http://a:1\ntoken: gpm_x\n", "url: [a]\n", "token: 1\n", "a: &x b\nurl: *x\n",
		"url: '~'\nca_file: \"null\"\n", "url: |\n  multi\n  line\n", "---\n...\n", "{url: x, token: y}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := parseFileConfig("c.yaml", []byte(text))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "c.yaml") {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		out := map[string]string{}
		for _, k := range fileConfigKeys {
			if v := *got.field(k); v != "" {
				out[k] = v
			}
		}
		data, err := yaml.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseFileConfig("c.yaml", data)
		if err != nil {
			t.Fatalf("written out as %q, it does not read back: %v", data, err)
		}
		if diff := cmp.Diff(got, again, cmpopts.IgnoreUnexported(fileConfig{})); diff != "" {
			t.Errorf("read back from %q (-first +again):\n%s", data, diff)
		}
	})
}

func TestLocalSocket(t *testing.T) {
	for _, tt := range []struct {
		s     Settings
		local string
		named bool
	}{
		{Settings{Options: Options{URL: "unix:///run/a.sock"}, URLFrom: URLFromSocket}, "/run/a.sock", false},
		{Settings{Options: Options{URL: "unix:///tmp/d/api.sock"}, URLFrom: URLFromDemo}, "/tmp/d/api.sock", false},
		{Settings{Options: Options{URL: "unix:///flag.sock"}, URLFrom: "--url"}, "", true},
		{Settings{Options: Options{URL: DefaultURL}, URLFrom: URLFromDefault}, "", false},
	} {
		if got := tt.s.LocalSocket(); got != tt.local {
			t.Errorf("%s from %s: LocalSocket() = %q, want %q", tt.s.URL, tt.s.URLFrom, got, tt.local)
		}
		if got := tt.s.Named(); got != tt.named {
			t.Errorf("%s from %s: Named() = %v, want %v", tt.s.URL, tt.s.URLFrom, got, tt.named)
		}
	}
}
