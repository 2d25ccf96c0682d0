package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/api/client"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
)

// clientFlags are the flags of the commands that talk to an agent. There
// is no --token: a token on the command line shows in ps and in the
// shell's history.
type clientFlags struct {
	url, caFile string
}

func (cf *clientFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&cf.url, "url", "", "agent: http(s)://HOST:PORT or unix:///path/api.sock (default $GPUMETER_URL, else url: in the client config, else the local agent's socket if there is one, else "+client.DefaultURL+" for ps, stop and whoami, while report, waste and audit read the ledger)")
	f.StringVar(&cf.caFile, "ca-file", "", "CA bundle (PEM) an https agent's certificate is checked against (default $GPUMETER_CA_FILE, else ca_file: in the client config)")
}

// clientEnv is where a client's settings come from besides its flags.
type clientEnv struct {
	getenv func(string) string
	// configDir is the user's configuration directory (~/.config); ""
	// when there is none, and so no default client config.
	configDir string
	// socket is the local agent's socket.
	socket string
}

// hostEnv is the environment of this process.
func hostEnv() clientEnv {
	env := clientEnv{getenv: os.Getenv}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		env.configDir = d
	} else if home, err := os.UserHomeDir(); err == nil {
		env.configDir = filepath.Join(home, ".config")
	}
	// The socket the agent would listen on if started here: its config
	// file and environment, as serve reads them. A config this user may
	// not read still leaves the defaults and the two settings that move
	// the socket.
	cfg, err := fileConfig("")
	if err != nil {
		cfg = config.Default()
		for k, env := range map[string]string{"data_dir": "GPUMETER_DATA_DIR", "api.socket": "GPUMETER_API_SOCKET"} {
			if v := os.Getenv(env); v != "" {
				_ = cfg.Set(k, v)
			}
		}
	}
	env.socket = cfg.SocketPath()
	return env
}

// clientSettings are a client's options and where its token came from.
type clientSettings struct {
	client.Options
	// ConfigPath is the client config file read, or the one that would
	// have been; "" when there is no default.
	ConfigPath string
	// TokenFrom names where the token came from; "" when there is none.
	TokenFrom string
	// URLFrom names where the URL came from: --url, GPUMETER_URL, the
	// client config's line, urlFromSocket or urlFromDefault.
	URLFrom string
}

// Where a client's URL came from when nobody named an agent.
const (
	urlFromSocket  = "the local agent's socket"
	urlFromDefault = "the default"
)

// named says whether someone named the agent: a flag, the environment
// or the client config, rather than the local socket or the default.
func (s clientSettings) named() bool {
	return s.URLFrom != urlFromSocket && s.URLFrom != urlFromDefault
}

// resolveClient works out a client's settings: flags first, then the
// environment (GPUMETER_URL, GPUMETER_TOKEN, GPUMETER_CA_FILE), then the
// client config file, then the local agent's socket if it exists, else
// client.DefaultURL.
func resolveClient(flags clientFlags, env clientEnv) (clientSettings, error) {
	var s clientSettings
	path, mustExist := env.getenv("GPUMETER_CLIENT_CONFIG"), true
	if path == "" && env.configDir != "" {
		path, mustExist = filepath.Join(env.configDir, "gpumeter", "client.yaml"), false
	}
	s.ConfigPath = path
	var file clientConfig
	if path != "" {
		var err error
		if file, err = loadClientConfig(path, mustExist); err != nil {
			return s, err
		}
	}
	switch {
	case flags.url != "":
		s.URL, s.URLFrom = flags.url, "--url"
	case env.getenv("GPUMETER_URL") != "":
		s.URL, s.URLFrom = env.getenv("GPUMETER_URL"), "GPUMETER_URL"
	case file.URL != "":
		s.URL, s.URLFrom = file.URL, fmt.Sprintf("%s:%d", path, file.lines["url"])
	}
	s.CAFile = first(flags.caFile, env.getenv("GPUMETER_CA_FILE"), file.CAFile)
	s.CertFile, s.KeyFile = file.CertFile, file.KeyFile
	switch {
	case env.getenv("GPUMETER_TOKEN") != "":
		s.Token, s.TokenFrom = env.getenv("GPUMETER_TOKEN"), "GPUMETER_TOKEN"
	case file.Token != "":
		s.Token, s.TokenFrom = file.Token, fmt.Sprintf("%s:%d", path, file.lines["token"])
	}
	if s.Token != "" {
		if err := checkTokenShape(s.Token); err != nil {
			return s, fmt.Errorf("%s: %w", s.TokenFrom, err)
		}
	}
	if s.URL == "" {
		s.URL, s.URLFrom = client.DefaultURL, urlFromDefault
		// A socket this user may not even look at is still the local
		// agent's: connecting to it names the refusal, where the default
		// URL would name some other agent, or none.
		fi, err := os.Stat(env.socket)
		if env.socket != "" && (err == nil && fi.Mode()&fs.ModeSocket != 0 || errors.Is(err, fs.ErrPermission)) {
			s.URL, s.URLFrom = "unix://"+env.socket, urlFromSocket
		}
	}
	return s, nil
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
	if !strings.HasPrefix(tok, auth.TokenPrefix) {
		return fmt.Errorf("not a gpumeter token: tokens start with %s", auth.TokenPrefix)
	}
	return nil
}

// agentClient is the API client and where its settings came from, so that
// a refusal can say which token was refused.
type agentClient struct {
	*client.Client
	settings clientSettings
	// node is the node the agent's last answer named.
	node string
}

// client builds the client for the agent the flags, the environment and
// the client config name. The agent's warnings go to cmd's stderr.
func (cf *clientFlags) client(cmd *cobra.Command) (*agentClient, error) {
	s, err := resolveClient(*cf, hostEnv())
	if err != nil {
		return nil, err
	}
	return newAgentClient(cmd, s)
}

func newAgentClient(cmd *cobra.Command, s clientSettings) (*agentClient, error) {
	c, err := client.New(s.Options)
	if err != nil {
		return nil, err
	}
	ac := &agentClient{Client: c, settings: s}
	c.Answered = func(a client.Answer) {
		ac.node = a.Node
		for _, w := range a.Warnings {
			if s.TokenFrom != "" {
				w += "; the token came from " + s.TokenFrom
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "gpumeter: warning:", w)
		}
	}
	return ac, nil
}

// announce says on stderr which agent was read, for the commands that
// could read a ledger instead.
func (c *agentClient) announce(cmd *cobra.Command) {
	line := "reading the agent at " + c.settings.URL
	if c.node != "" {
		line += " (node " + c.node + ")"
	}
	fmt.Fprintln(cmd.ErrOrStderr(), line)
}

// explain adds to an error from the agent what the caller can do about
// it.
func (c *agentClient) explain(err error) error {
	if !client.IsUnauthorized(err) {
		return err
	}
	if c.settings.TokenFrom != "" {
		return fmt.Errorf("%w; the token came from %s", err, c.settings.TokenFrom)
	}
	where := "token: in the client config"
	if c.settings.ConfigPath != "" {
		where = "token: in " + c.settings.ConfigPath
	}
	return fmt.Errorf("%w; no token was sent: set GPUMETER_TOKEN or %s (an admin makes one with `gpumeter token create`)", err, where)
}

// clientConfig is the client config file:
//
//	url: https://gpu-node-1:9400
//	token: gpm_...
//	ca_file: /etc/gpumeter/ca.pem
//	cert_file: me.pem
//	key_file: me-key.pem
//
// Relative file names are relative to the file's directory.
type clientConfig struct {
	URL, Token, CAFile, CertFile, KeyFile string
	// lines are the line of each key given, for errors found later.
	lines map[string]int
}

var clientConfigKeys = []string{"url", "token", "ca_file", "cert_file", "key_file"}

func (c *clientConfig) field(key string) *string {
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

// loadClientConfig reads the client config at path. A file others may
// read or write is refused, since it holds a token; a missing file is
// an empty config unless mustExist.
func loadClientConfig(path string, mustExist bool) (clientConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !mustExist {
			return clientConfig{}, nil
		}
		return clientConfig{}, fmt.Errorf("client config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return clientConfig{}, fmt.Errorf("client config: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return clientConfig{}, fmt.Errorf("client config %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return clientConfig{}, fmt.Errorf("client config %s: other users may read or write it (mode %04o) and it holds a token: chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return clientConfig{}, fmt.Errorf("client config: %w", err)
	}
	c, err := parseClientConfig(path, data)
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

// parseClientConfig reads a client config; name is used in errors. It is
// strict: an unknown key, a key given twice or a value that is not a
// string is an error naming the line, so that a misspelt key never
// silently sends a request without credentials.
func parseClientConfig(name string, data []byte) (clientConfig, error) {
	c := clientConfig{lines: map[string]int{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		return c, fmt.Errorf("%s: %w", name, err)
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return c, fmt.Errorf("%s: %w", name, err)
	default:
		return c, fmt.Errorf("%s:%d: a second YAML document; the file holds one", name, more.Line)
	}
	if len(doc.Content) == 0 {
		return c, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return c, nil
	}
	if root.Kind != yaml.MappingNode {
		return c, fmt.Errorf("%s:%d: want a mapping of keys (%s), got %s", name, root.Line, strings.Join(clientConfigKeys, ", "), yamlKind(root))
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], root.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			return c, fmt.Errorf("%s:%d: a key must be a name, not %s", name, kn.Line, yamlKind(kn))
		}
		dst := c.field(kn.Value)
		if dst == nil {
			return c, fmt.Errorf("%s:%d: unknown key %q (want %s)", name, kn.Line, kn.Value, strings.Join(clientConfigKeys, ", "))
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

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if t := n.ShortTag(); t != "!!str" {
		return fmt.Sprintf("%s %q", strings.TrimPrefix(t, "!!"), n.Value)
	}
	return fmt.Sprintf("%q", n.Value)
}
