package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/units"
)

// Key is one setting: its name in the file, its environment variable and
// flag, and how to parse it.
type Key struct {
	Name string // dotted path in the YAML file, e.g. docker.host
	Help string
	// set parses one value; for map keys, sub is the map key.
	set func(c *Config, sub, v string) error
	get func(c *Config) string
	// isMap marks keys whose YAML value is a mapping of sub-keys.
	isMap bool
	// boolean marks true/false keys.
	boolean bool
	// list marks comma-separated lists, which a file may also write as
	// a YAML sequence.
	list bool
	// kind is what the key takes, as help names it; see Kind.
	kind string
	// defaultText says what an empty default stands for, or how a
	// default is worked out; "" when Default says it all.
	defaultText string
	// example is a value the flag and the environment accept, shown in
	// help.
	example string
	// values are the only values an enum key takes.
	values []string
}

// Env is the environment variable that overrides the key.
func (k Key) Env() string {
	return "GPUMETER_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k.Name))
}

// Flag is the command-line flag that overrides the key.
func (k Key) Flag() string { return strings.ReplaceAll(strings.ReplaceAll(k.Name, ".", "-"), "_", "-") }

// Default renders the key's default value.
func (k Key) Default() string {
	c := Default()
	return k.get(&c)
}

// IsMap reports whether the key takes a mapping (in a file) or
// name=value pairs (in the environment and on the command line).
func (k Key) IsMap() bool { return k.isMap }

// IsBool reports whether the key is true or false, so that a bare flag
// (--ledger-enabled) can mean true.
func (k Key) IsBool() bool { return k.boolean }

// Values lists the values the key takes when it takes only some, for
// shell completion; nil when it takes any of its kind.
func (k Key) Values() []string { return slices.Clone(k.values) }

func stringKey(name, help string, p func(*Config) *string) Key {
	return Key{Name: name, Help: help, kind: "string",
		set: func(c *Config, _, v string) error { *p(c) = v; return nil },
		get: func(c *Config) string { return *p(c) }}
}

func enumKey(name, help string, p func(*Config) *string, allowed ...string) Key {
	return Key{Name: name, Help: help + " (" + strings.Join(allowed, ", ") + ")", kind: "string", values: allowed,
		set: func(c *Config, _, v string) error {
			if !slices.Contains(allowed, v) {
				return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
			}
			*p(c) = v
			return nil
		},
		get: func(c *Config) string { return *p(c) }}
}

func durationKey(name, help string, p func(*Config) *time.Duration) Key {
	return Key{Name: name, Help: help, kind: "duration",
		set: func(c *Config, _, v string) error {
			d, err := units.ParseDuration(v)
			if err != nil {
				return err
			}
			*p(c) = d
			return nil
		},
		get: func(c *Config) string { return units.FormatDuration(*p(c)) }}
}

func boolKey(name, help string, p func(*Config) *bool) Key {
	return Key{Name: name, Help: help, boolean: true, kind: "bool",
		set: func(c *Config, _, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q is not true or false", v)
			}
			*p(c) = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*p(c)) }}
}

func intKey(name, help string, p func(*Config) *int) Key {
	return Key{Name: name, Help: help, kind: "int",
		set: func(c *Config, _, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*p(c)) }}
}

func floatKey(name, help string, p func(*Config) *float64) Key {
	return Key{Name: name, Help: help, kind: "number",
		set: func(c *Config, _, v string) error {
			f, err := parsePrice(v)
			if err != nil {
				return err
			}
			*p(c) = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*p(c), 'f', -1, 64) }}
}

// mapKey is a setting holding name: number pairs; unit is appended when
// the values are rendered. kind names the pair, such as model=power.
func mapKey(name, help, kind string, p func(*Config) *map[string]float64, parse func(string) (float64, error), unit string) Key {
	return Key{Name: name, Help: help, isMap: true, kind: kind,
		set: func(c *Config, sub, v string) error {
			if sub == "" {
				return errors.New("want name=value")
			}
			f, err := parse(v)
			if err != nil {
				return err
			}
			m := p(c)
			if *m == nil {
				*m = map[string]float64{}
			}
			(*m)[sub] = f
			return nil
		},
		get: func(c *Config) string {
			m := *p(c)
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				parts = append(parts, k+"="+strconv.FormatFloat(m[k], 'f', -1, 64)+unit)
			}
			return strings.Join(parts, ",")
		}}
}

// intMapKey is a setting holding name: whole number pairs; Validate, not
// the parser, says which numbers make no sense.
func intMapKey(name, help, kind string, p func(*Config) *map[string]int) Key {
	return Key{Name: name, Help: help, isMap: true, kind: kind,
		set: func(c *Config, sub, v string) error {
			if sub == "" {
				return errors.New("want name=value")
			}
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
			setEntry(p(c), sub, n)
			return nil
		},
		get: func(c *Config) string {
			m := *p(c)
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				parts = append(parts, k+"="+strconv.Itoa(m[k]))
			}
			return strings.Join(parts, ",")
		}}
}

// thresholdKey is a setting holding any finite number: Validate, not the
// parser, says which make no sense, so that every source of a value gets
// the same words.
func thresholdKey(name, help string, p func(*Config) *float64) Key {
	return Key{Name: name, Help: help, kind: "number",
		set: func(c *Config, _, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("%q is not a number", v)
			}
			*p(c) = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*p(c), 'f', -1, 64) }}
}

func sizeKey(name, help string, p func(*Config) *uint64) Key {
	return Key{Name: name, Help: help, kind: "size",
		set: func(c *Config, _, v string) error {
			n, err := units.ParseSize(v)
			if err != nil {
				return err
			}
			if n > math.MaxInt64 {
				return fmt.Errorf("%q is too large", v)
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return units.FormatSize(*p(c)) }}
}

func parsePrice(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number of at least 0", s)
	}
	return f, nil
}

// actionKey is the policy action of one waste rule; outside use has no
// container to stop.
func actionKey(rule string, p func(*Config) *string) Key {
	allowed := []string{ActionReport, ActionNotify, ActionStop}
	if rule == RuleOutside {
		allowed = allowed[:2]
	}
	k := enumKey("policy.rules."+rule+".action", "what is done about "+rule+" findings", p, allowed...)
	get := k.get
	k.get = func(c *Config) string {
		if v := get(c); v != "" {
			return v
		}
		return ActionReport
	}
	return k
}

// listKey is a setting holding a comma-separated list.
func listKey(name, help string, p func(*Config) *[]string) Key {
	return Key{Name: name, Help: help + " (comma-separated)", kind: "list", list: true,
		set: func(c *Config, _, v string) error {
			var out []string
			for _, part := range strings.Split(v, ",") {
				if part = strings.TrimSpace(part); part != "" {
					out = append(out, part)
				}
			}
			*p(c) = out
			return nil
		},
		get: func(c *Config) string { return strings.Join(*p(c), ",") }}
}

// entryKey is a setting holding name: text entries that set parses.
func entryKey(name, help, kind string, set func(c *Config, sub, v string) error, get func(c *Config) map[string]string) Key {
	return Key{Name: name, Help: help, isMap: true, kind: kind,
		set: func(c *Config, sub, v string) error {
			if sub == "" {
				return errors.New("want name=value")
			}
			return set(c, sub, v)
		},
		get: func(c *Config) string {
			m := get(c)
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				parts = append(parts, k+"="+m[k])
			}
			return strings.Join(parts, ",")
		}}
}

func setEntry[T any](m *map[string]T, k string, v T) {
	if *m == nil {
		*m = map[string]T{}
	}
	(*m)[k] = v
}

func entries[T any](m map[string]T, render func(T) string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = render(v)
	}
	return out
}

func lookup(name string) (Key, bool) {
	for _, k := range Keys() {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}
