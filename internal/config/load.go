package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/yamlx"
)

// Set parses value into the setting named name, as a flag or environment
// variable gives it. A map key takes sub=value.
func (c *Config) Set(name, value string) error {
	k, ok := lookup(name)
	if !ok {
		return fmt.Errorf("unknown setting %q", name)
	}
	if k.isMap {
		sub, v, found := strings.Cut(value, "=")
		if !found {
			return fmt.Errorf("%s: want name=value, got %q", name, value)
		}
		sub = strings.TrimSpace(sub)
		c.setOrigin(name+"."+sub, "")
		if err := k.set(c, sub, strings.TrimSpace(v)); err != nil {
			// Name the entry, as a file's error does: one variable may
			// hold several.
			if sub != "" {
				name += "." + sub
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	c.setOrigin(name, "")
	if err := k.set(c, "", value); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// LoadFile reads a YAML config file over c. Unknown keys, wrong shapes and
// bad values are errors that name the file, line and key.
func (c *Config) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	return c.Parse(path, data)
}

// Parse reads YAML config data over c; name is used in errors.
func (c *Config) Parse(name string, data []byte) error {
	root, err := yamlx.Document(data)
	var syntax *yamlx.SyntaxError
	var second *yamlx.SecondDocumentError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("%s:%d: %s", name, syntax.Line(), syntax.Msg)
	case errors.As(err, &second):
		return fmt.Errorf("%s:%d: a second YAML document; the file holds one", name, second.Line)
	case err != nil:
		return fmt.Errorf("%s: %w", name, err)
	}
	if root == nil || yamlx.IsNull(root) {
		return nil // an empty file changes nothing
	}
	return c.walk(name, "", root)
}

func (c *Config) walk(file, prefix string, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		where := prefix
		if where == "" {
			where = "top level"
		}
		return fmt.Errorf("%s:%d: %s: want a mapping of keys, got %s", file, n.Line, where, yamlx.Kind(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		name := kn.Value
		if prefix != "" {
			name = prefix + "." + kn.Value
		}
		if seen[name] {
			return fmt.Errorf("%s:%d: %s: set twice", file, kn.Line, name)
		}
		seen[name] = true
		if k, ok := lookup(name); ok {
			if err := c.setNode(file, k, vn); err != nil {
				return err
			}
			continue
		}
		if isSection(name) {
			if err := c.walk(file, name, vn); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("%s:%d: unknown key %q%s", file, kn.Line, name, suggest(name))
	}
	return nil
}

func (c *Config) setNode(file string, k Key, vn *yaml.Node) error {
	if k.isMap {
		if vn.Kind != yaml.MappingNode {
			return fmt.Errorf("%s:%d: %s: want a mapping of name: value, got %s", file, vn.Line, k.Name, yamlx.Kind(vn))
		}
		// A mapping node keeps both of two equal keys, and setting them
		// in turn would let the last win unseen: a second token or price
		// under one name is a mistake to report.
		seen := map[string]bool{}
		for i := 0; i+1 < len(vn.Content); i += 2 {
			sk, sv := vn.Content[i], vn.Content[i+1]
			if seen[sk.Value] {
				return fmt.Errorf("%s:%d: %s.%s: set twice", file, sk.Line, k.Name, sk.Value)
			}
			seen[sk.Value] = true
			if sv.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s:%d: %s.%s: want a single value, got %s", file, sv.Line, k.Name, sk.Value, yamlx.Kind(sv))
			}
			if err := k.set(c, sk.Value, sv.Value); err != nil {
				return fmt.Errorf("%s:%d: %s.%s: %w", file, sv.Line, k.Name, sk.Value, err)
			}
			c.setOrigin(k.Name+"."+sk.Value, fmt.Sprintf("%s:%d", file, sv.Line))
		}
		return nil
	}
	value := vn.Value
	switch {
	case k.list && vn.Kind == yaml.SequenceNode:
		v, err := sequence(file, k, vn)
		if err != nil {
			return err
		}
		value = v
	case vn.Kind != yaml.ScalarNode:
		return fmt.Errorf("%s:%d: %s: want a single value, got %s", file, vn.Line, k.Name, yamlx.Kind(vn))
	}
	if err := k.set(c, "", value); err != nil {
		return fmt.Errorf("%s:%d: %s: %w", file, vn.Line, k.Name, err)
	}
	c.setOrigin(k.Name, fmt.Sprintf("%s:%d", file, vn.Line))
	return nil
}

// sequence is a YAML sequence of a list key as the comma-separated text
// the key parses. An item holding a comma would come back as two, so it
// is refused.
func sequence(file string, k Key, vn *yaml.Node) (string, error) {
	items := make([]string, 0, len(vn.Content))
	for _, item := range vn.Content {
		if item.Kind != yaml.ScalarNode {
			return "", fmt.Errorf("%s:%d: %s: want a list of single values, got %s in it", file, item.Line, k.Name, yamlx.Kind(item))
		}
		if strings.Contains(item.Value, ",") {
			return "", fmt.Errorf("%s:%d: %s: %q holds a comma; a list item may not", file, item.Line, k.Name, item.Value)
		}
		if strings.TrimSpace(item.Value) == "" {
			return "", fmt.Errorf("%s:%d: %s: an empty item", file, item.Line, k.Name)
		}
		items = append(items, item.Value)
	}
	return strings.Join(items, ","), nil
}

func isSection(name string) bool {
	for _, k := range Keys() {
		if strings.HasPrefix(k.Name, name+".") {
			return true
		}
	}
	return false
}

// suggest names the known key nearest to name, if one is near.
func suggest(name string) string {
	if k, ok := Nearest(name); ok {
		return fmt.Sprintf("; did you mean %q?", k.Name)
	}
	return ""
}

// LoadEnv applies GPUMETER_* variables from environ (as os.Environ gives
// them). A variable that names no setting is an error, so a typo is not
// silently ignored.
func (c *Config) LoadEnv(environ []string) error {
	byEnv := map[string]Key{}
	for _, k := range Keys() {
		byEnv[k.Env()] = k
	}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "GPUMETER_") || envNotSettings[name] || strings.HasPrefix(name, "GPUMETER_TEST_") {
			continue
		}
		k, ok := byEnv[name]
		if !ok {
			if near, ok := Nearest(strings.TrimPrefix(name, "GPUMETER_")); ok {
				return fmt.Errorf("environment: %s names no setting; did you mean %s?", name, near.Env())
			}
			return fmt.Errorf("environment: %s names no setting", name)
		}
		if k.isMap {
			for _, part := range strings.Split(value, ",") {
				if strings.TrimSpace(part) == "" {
					continue
				}
				if err := c.Set(k.Name, part); err != nil {
					return fmt.Errorf("environment %s: %w", name, err)
				}
				sub, _, _ := strings.Cut(part, "=")
				c.setOrigin(k.Name+"."+strings.TrimSpace(sub), "environment "+name)
			}
			continue
		}
		if err := c.Set(k.Name, value); err != nil {
			return fmt.Errorf("environment %s: %w", name, err)
		}
		c.setOrigin(k.Name, "environment "+name)
	}
	return nil
}

// envNotSettings are GPUMETER_* variables that are not settings: the
// config file path and the API client's address. GPUMETER_TEST_* are the
// test suites' own (a PostgreSQL DSN, say), left set in a developer's
// shell while the binary runs.
var envNotSettings = map[string]bool{
	"GPUMETER_CONFIG": true, "GPUMETER_URL": true, "GPUMETER_TOKEN": true,
	"GPUMETER_CLIENT_CONFIG": true, "GPUMETER_CA_FILE": true,
}

// DefaultFile is the config file Load reads when none is named and
// $GPUMETER_CONFIG is not set, if it exists.
const DefaultFile = "/etc/gpumeter/gpumeter.yaml"

// Sources are where Load reads settings from.
type Sources struct {
	// File is the config file; "" means $GPUMETER_CONFIG (from Environ),
	// else DefaultFile if it exists, else none.
	File string
	// Environ is the environment, as os.Environ gives it.
	Environ []string
	// Flags are the values the command line gave the key, in order, nil
	// when it gave none; a nil Flags gives none for every key.
	Flags func(Key) []string
}

// Load builds the settings: the defaults, then the config file, then the
// GPUMETER_* environment, then the flags, each overriding the one before.
// An error names the file and line, the variable or the flag (--name) the
// bad value came from.
func Load(s Sources) (Config, error) {
	cfg := Default()
	path := s.File
	if path == "" {
		path = lookupEnv(s.Environ, "GPUMETER_CONFIG")
	}
	if path == "" {
		if _, err := os.Stat(DefaultFile); err == nil {
			path = DefaultFile
		}
	}
	if path != "" {
		if err := cfg.LoadFile(path); err != nil {
			return cfg, err
		}
	}
	if err := cfg.LoadEnv(s.Environ); err != nil {
		return cfg, err
	}
	if s.Flags == nil {
		return cfg, nil
	}
	for _, k := range Keys() {
		for _, v := range s.Flags(k) {
			if err := cfg.Set(k.Name, v); err != nil {
				return cfg, fmt.Errorf("--%s: %w", k.Flag(), err)
			}
		}
	}
	return cfg, nil
}

// lookupEnv is the value of the variable name in environ, "" when it is
// not there; the first of two wins, as in os.Getenv.
func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}
