package client

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/yamlx"
)

// Flags are the settings a command line gave for the agent. There is no
// token among them: a token on the command line shows in ps and in the
// shell's history.
type Flags struct {
	URL    string // --url
	CAFile string // --ca-file
}

// Env is where a client's settings come from besides its flags.
type Env struct {
	Getenv func(string) string
	// ConfigDir is the user's configuration directory (~/.config); ""
	// when there is none, and so no default client config.
	ConfigDir string
	// Socket is the local agent's socket.
	Socket string
	// DemoSocket is the socket a running demo of this user's named in
	// its record (the demo's socket is in a directory of its own, which
	// no config names); "" when there is none.
	DemoSocket string
}

// HostEnv is this process's environment and the user's configuration
// directory, with socket the local agent's socket.
func HostEnv(socket string) Env {
	env := Env{Getenv: os.Getenv, Socket: socket}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		env.ConfigDir = d
	} else if home, err := os.UserHomeDir(); err == nil {
		env.ConfigDir = filepath.Join(home, ".config")
	}
	return env
}

// Settings are a client's options and where they came from.
type Settings struct {
	Options
	// ConfigPath is the client config file read, or the one that would
	// have been; "" when there is no default.
	ConfigPath string
	// TokenFrom names where the token came from; "" when there is none.
	TokenFrom string
	// URLFrom names where the URL came from: --url, GPUMETER_URL, the
	// client config's line, URLFromSocket or URLFromDefault.
	URLFrom string
}

// Where a client's URL came from when nobody named an agent.
const (
	URLFromSocket  = "the local agent's socket"
	URLFromDemo    = "the demo's socket"
	URLFromDefault = "the default"
)

// Named says whether someone named the agent: a flag, the environment
// or the client config, rather than a local socket or the default.
func (s Settings) Named() bool {
	return s.URLFrom != URLFromSocket && s.URLFrom != URLFromDemo && s.URLFrom != URLFromDefault
}

// LocalSocket is the path of the socket Resolve found when nobody named
// an agent: the local agent's or the demo's; "" otherwise.
func (s Settings) LocalSocket() string {
	if s.URLFrom != URLFromSocket && s.URLFrom != URLFromDemo {
		return ""
	}
	return strings.TrimPrefix(s.URL, "unix://")
}

// Resolve works out a client's settings: flags first, then the
// environment (GPUMETER_URL, GPUMETER_TOKEN, GPUMETER_CA_FILE), then the
// client config file (GPUMETER_CLIENT_CONFIG, else gpumeter/client.yaml
// in the configuration directory), then the local agent's socket if it
// exists, then the socket of a demo this user runs, else DefaultURL.
func Resolve(flags Flags, env Env) (Settings, error) {
	var s Settings
	path, mustExist := env.Getenv("GPUMETER_CLIENT_CONFIG"), true
	if path == "" && env.ConfigDir != "" {
		path, mustExist = filepath.Join(env.ConfigDir, "gpumeter", "client.yaml"), false
	}
	s.ConfigPath = path
	var file fileConfig
	if path != "" {
		var err error
		if file, err = loadFileConfig(path, mustExist); err != nil {
			return s, err
		}
	}
	switch {
	case flags.URL != "":
		s.URL, s.URLFrom = flags.URL, "--url"
	case env.Getenv("GPUMETER_URL") != "":
		s.URL, s.URLFrom = env.Getenv("GPUMETER_URL"), "GPUMETER_URL"
	case file.URL != "":
		s.URL, s.URLFrom = file.URL, fmt.Sprintf("%s:%d", path, file.lines["url"])
	}
	s.CAFile = first(flags.CAFile, env.Getenv("GPUMETER_CA_FILE"), file.CAFile)
	s.CertFile, s.KeyFile = file.CertFile, file.KeyFile
	switch {
	case env.Getenv("GPUMETER_TOKEN") != "":
		s.Token, s.TokenFrom = env.Getenv("GPUMETER_TOKEN"), "GPUMETER_TOKEN"
	case file.Token != "":
		s.Token, s.TokenFrom = file.Token, fmt.Sprintf("%s:%d", path, file.lines["token"])
	}
	if s.Token != "" {
		if err := checkTokenShape(s.Token); err != nil {
			return s, fmt.Errorf("%s: %w", s.TokenFrom, err)
		}
	}
	if s.URL == "" {
		s.URL, s.URLFrom = DefaultURL, URLFromDefault
		// A socket this user may not even look at is still the local
		// agent's: connecting to it names the refusal, where the default
		// URL would name some other agent, or none.
		fi, err := os.Stat(env.Socket)
		demo, derr := os.Stat(env.DemoSocket)
		switch {
		case env.Socket != "" && (err == nil && fi.Mode()&fs.ModeSocket != 0 || errors.Is(err, fs.ErrPermission)):
			s.URL, s.URLFrom = "unix://"+env.Socket, URLFromSocket
		case env.DemoSocket != "" && derr == nil && demo.Mode()&fs.ModeSocket != 0:
			// Only where no agent's socket is: a real agent is never
			// passed over for a demo.
			s.URL, s.URLFrom = "unix://"+env.DemoSocket, URLFromDemo
		}
	}
	return s, nil
}

// Explain adds to an error from the agent what the caller can do about
// it: for a refused token, where it came from, or where to put one.
func (s Settings) Explain(err error) error {
	if !IsUnauthorized(err) {
		return err
	}
	if s.TokenFrom != "" {
		return fmt.Errorf("%w; the token came from %s", err, s.TokenFrom)
	}
	where := "token: in the client config"
	if s.ConfigPath != "" {
		where = "token: in " + s.ConfigPath
	}
	return fmt.Errorf("%w; no token was sent: set GPUMETER_TOKEN or %s (an admin makes one with `gpumeter token create`)", err, where)
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

var hexHash = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// checkTokenShape catches the likely mistakes: the hash pasted in place of
// the token, or a token cut short.
func checkTokenShape(tok string) error {
	if strings.ContainsFunc(tok, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return errors.New("the token has spaces, line breaks or characters no token has")
	}
	if hexHash.MatchString(strings.TrimPrefix(tok, "sha256=")) {
		return errors.New("this is a token's hash, which the agent keeps; give the token itself (gpm_...) that `gpumeter token create` printed")
	}
	if !strings.HasPrefix(tok, apitype.TokenPrefix) {
		return fmt.Errorf("not a gpumeter token: tokens start with %s", apitype.TokenPrefix)
	}
	return nil
}

// fileConfig is the client config file:
//
//	url: https://gpu-node-1:9400
//	token: gpm_...
//	ca_file: /etc/gpumeter/ca.pem
//	cert_file: me.pem
//	key_file: me-key.pem
//
// Relative file names are relative to the file's directory.
type fileConfig struct {
	URL, Token, CAFile, CertFile, KeyFile string
	// lines are the line of each key given, for errors found later.
	lines map[string]int
}

var fileConfigKeys = []string{"url", "token", "ca_file", "cert_file", "key_file"}

func (c *fileConfig) field(key string) *string {
	switch key {
	case "url":
		return &c.URL
	case "token":
		return &c.Token
	case "ca_file":
		return &c.CAFile
	case "cert_file":
		return &c.CertFile
	case "key_file":
		return &c.KeyFile
	}
	return nil
}

// loadFileConfig reads the client config at path. A file others may
// read or write is refused, since it holds a token; a missing file is
// an empty config unless mustExist.
func loadFileConfig(path string, mustExist bool) (fileConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !mustExist {
			return fileConfig{}, nil
		}
		return fileConfig{}, fmt.Errorf("client config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileConfig{}, fmt.Errorf("client config: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fileConfig{}, fmt.Errorf("client config %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return fileConfig{}, fmt.Errorf("client config %s: other users may read or write it (mode %04o) and it holds a token: chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return fileConfig{}, fmt.Errorf("client config: %w", err)
	}
	c, err := parseFileConfig(path, data)
	if err != nil {
		return c, err
	}
	for _, p := range []*string{&c.CAFile, &c.CertFile, &c.KeyFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(filepath.Dir(path), *p)
		}
	}
	return c, nil
}

// parseFileConfig reads a client config; name is used in errors. It is
// strict: an unknown key, a key given twice or a value that is not a
// string is an error naming the line, so that a misspelt key never
// silently sends a request without credentials.
func parseFileConfig(name string, data []byte) (fileConfig, error) {
	c := fileConfig{lines: map[string]int{}}
	root, err := yamlx.Document(data)
	var syntax *yamlx.SyntaxError
	var second *yamlx.SecondDocumentError
	switch {
	case errors.As(err, &second):
		return c, fmt.Errorf("%s:%d: a second YAML document; the file holds one", name, second.Line)
	case errors.As(err, &syntax):
		return c, fmt.Errorf("%s: %w", name, syntax.Err)
	case err != nil:
		return c, fmt.Errorf("%s: %w", name, err)
	}
	if root == nil || yamlx.IsNull(root) {
		return c, nil
	}
	if root.Kind != yaml.MappingNode {
		return c, fmt.Errorf("%s:%d: want a mapping of keys (%s), got %s", name, root.Line, strings.Join(fileConfigKeys, ", "), yamlKind(root))
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], root.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			return c, fmt.Errorf("%s:%d: a key must be a name, not %s", name, kn.Line, yamlKind(kn))
		}
		dst := c.field(kn.Value)
		if dst == nil {
			return c, fmt.Errorf("%s:%d: unknown key %q (want %s)", name, kn.Line, kn.Value, strings.Join(fileConfigKeys, ", "))
		}
		if _, dup := c.lines[kn.Value]; dup {
			return c, fmt.Errorf("%s:%d: %s: set twice", name, kn.Line, kn.Value)
		}
		c.lines[kn.Value] = vn.Line
		switch {
		case vn.Kind == yaml.ScalarNode && vn.ShortTag() == "!!null":
			// An empty value leaves the setting to the defaults.
		case vn.Kind == yaml.ScalarNode && vn.ShortTag() == "!!str":
			*dst = vn.Value
		case vn.Kind == yaml.ScalarNode:
			return c, fmt.Errorf("%s:%d: %s: want a string, got %s (put it in quotes)", name, vn.Line, kn.Value, yamlKind(vn))
		default:
			return c, fmt.Errorf("%s:%d: %s: want a string, got %s", name, vn.Line, kn.Value, yamlKind(vn))
		}
	}
	return c, nil
}

// yamlKind is yamlx.Kind with the type of a scalar that is not a string,
// which is what a value that wants quotes is told.
func yamlKind(n *yaml.Node) string {
	if t := n.ShortTag(); n.Kind == yaml.ScalarNode && t != "!!str" {
		return fmt.Sprintf("%s %q", strings.TrimPrefix(t, "!!"), n.Value)
	}
	return yamlx.Kind(n)
}
