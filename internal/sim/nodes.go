package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/units"
	"github.com/gpumeter/gpumeter/internal/yamlx"
)

// fields is a mapping's entries by key.
type fields map[string]*yaml.Node

func (f fields) get(key string) (*yaml.Node, bool) {
	n, ok := f[key]
	return n, ok
}

// require is get, reporting a missing key on the mapping's line.
func (f fields) require(d *decoder, mapping *yaml.Node, path, key string) (*yaml.Node, bool) {
	n, ok := f[key]
	if !ok {
		d.errorf(mapping.Line, join(path, key), "required")
	}
	return n, ok
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolve follows aliases to the node they stand for.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		d.aliases++
		if d.aliases > maxAliases {
			return &yaml.Node{Kind: yaml.AliasNode, Line: n.Line}
		}
		n = n.Alias
	}
	return n
}

// kind names n for a message; an alias left standing is one resolve
// could not follow.
func kind(n *yaml.Node) string {
	if n.Kind == yaml.AliasNode {
		return "an alias that resolves to nothing (or too many aliases)"
	}
	return yamlx.Kind(n)
}

// mapping returns the entries of a mapping node, reporting a node that is no
// mapping, keys that are not among allowed and keys given twice. It records
// each key's line under its path.
func (d *decoder) mapping(n *yaml.Node, path string, allowed []string) (fields, bool) {
	n = d.resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want a mapping (keys %s), got %s", strings.Join(allowed, ", "), kind(n))
		return nil, false
	}
	if path != "" {
		d.pos.lines[path] = n.Line
	}
	f := make(fields, len(allowed))
	lines := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, path, "want a key, got %s", kind(k))
			continue
		}
		key := join(path, k.Value)
		if prev, ok := lines[k.Value]; ok {
			d.errorf(k.Line, key, "given twice (first at line %d)", prev)
			continue
		}
		lines[k.Value] = k.Line
		if !contains(allowed, k.Value) {
			d.errorf(k.Line, key, "unknown key (want one of %s)%s", strings.Join(allowed, ", "), unknownHint(path, k.Value))
			continue
		}
		d.pos.lines[key] = k.Line
		f[k.Value] = v
	}
	return f, true
}

func unknownHint(path, key string) string {
	if path == "" && key == "seed" {
		return "; version 1 has no randomness"
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sequence returns the items of a list; an empty value is an empty list.
// It records each item's line under path[i].
func (d *decoder) sequence(n *yaml.Node, path string) []*yaml.Node {
	n = d.resolve(n)
	if yamlx.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, path, "want a list, got %s", kind(n))
		return nil
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, item := range n.Content {
		item = d.resolve(item)
		items[i] = item
		d.pos.lines[fmt.Sprintf("%s[%d]", path, i)] = item.Line
	}
	return items
}

// scalar returns the text of a scalar node that holds a value.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	n = d.resolve(n)
	if n.Kind != yaml.ScalarNode || yamlx.IsNull(n) {
		d.errorf(n.Line, path, "want %s, got %s", want, kind(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	return d.scalar(n, path, "a string")
}

func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	n = d.resolve(n)
	s, ok := d.scalar(n, path, "a whole number")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n.ShortTag() != "!!int" {
		d.errorf(n.Line, path, "want a whole number, got %q", s)
		return 0, false
	}
	return v, true
}

func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	n = d.resolve(n)
	s, ok := d.scalar(n, path, "a number")
	if !ok {
		return 0, false
	}
	tag := n.ShortTag()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || (tag != "!!int" && tag != "!!float") || math.IsNaN(v) || math.IsInf(v, 0) {
		d.errorf(n.Line, path, "want a number, got %q", s)
		return 0, false
	}
	return v, true
}

// duration, size and power read values in the units grammar, as the
// config does: 1d and a bare 70 (watts) mean the same in both.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	return unit(d, n, path, "a duration", units.ParseDuration)
}

func (d *decoder) size(n *yaml.Node, path string) (uint64, bool) {
	return unit(d, n, path, "a size", units.ParseSize)
}

func (d *decoder) power(n *yaml.Node, path string) (float64, bool) {
	return unit(d, n, path, "a power", units.ParsePower)
}

func unit[T any](d *decoder, n *yaml.Node, path, want string, parse func(string) (T, error)) (T, bool) {
	var zero T
	n = d.resolve(n)
	s, ok := d.scalar(n, path, want)
	if !ok {
		return zero, false
	}
	v, err := parse(s)
	if err != nil {
		d.errorf(n.Line, path, "%v", err)
		return zero, false
	}
	return v, true
}

// ints reads a list of GPU indexes.
func (d *decoder) ints(n *yaml.Node, path string) []int {
	items := d.sequence(n, path)
	var out []int
	if items != nil {
		out = make([]int, 0, len(items))
	}
	for i, item := range items {
		if v, ok := d.integer(item, fmt.Sprintf("%s[%d]", path, i)); ok {
			out = append(out, clampInt(v))
		}
	}
	return out
}

func (d *decoder) labels(n *yaml.Node, path string) map[string]string {
	n = d.resolve(n)
	if yamlx.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want a mapping of label keys to values, got %s", kind(n))
		return nil
	}
	out := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), d.resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || yamlx.IsNull(k) {
			d.errorf(k.Line, path, "want a label key, got %s", kind(k))
			continue
		}
		key := path + "." + k.Value
		if _, ok := out[k.Value]; ok {
			d.errorf(k.Line, key, "given twice")
			continue
		}
		d.pos.lines[key] = k.Line
		switch {
		case yamlx.IsNull(v):
			out[k.Value] = ""
		case v.Kind == yaml.ScalarNode:
			out[k.Value] = v.Value
		default:
			d.errorf(v.Line, key, "want a label value, got %s", kind(v))
		}
	}
	return out
}

// clampInt keeps an index that does not fit an int out of range without
// wrapping it into range.
func clampInt(v int64) int {
	const maxInt = int64(^uint(0) >> 1)
	if v > maxInt {
		return int(maxInt)
	}
	if v < -maxInt {
		return int(-maxInt)
	}
	return int(v)
}
