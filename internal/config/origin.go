package config

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// setOrigin records where the setting name was set; "" forgets it, for a
// value given where no line can be named (a flag, or code).
func (c *Config) setOrigin(name, where string) {
	if where == "" {
		delete(c.origin, name)
		return
	}
	if c.origin == nil {
		c.origin = map[string]string{}
	}
	c.origin[name] = where
}

// placed puts the file and line (or the variable) of the setting an
// error of Validate names in front of it: "interval: 0s is outside
// 10ms..1h" becomes "gpumeter.yaml:2: interval: ...". An error naming
// several settings takes the place of the first one that has one.
func (c *Config) placed(err error) error {
	msg := err.Error()
	names, _, ok := strings.Cut(msg, ": ")
	if !ok {
		return err
	}
	for _, name := range strings.Split(names, ", ") {
		if where, ok := c.origin[name]; ok {
			return errors.New(where + ": " + msg)
		}
	}
	return err
}

// Changed lists the keys whose values differ between old and new, in the
// order of Keys.
func Changed(old, new *Config) []string {
	var out []string
	for _, k := range Keys() {
		if k.get(old) != k.get(new) {
			out = append(out, k.Name)
		}
	}
	return out
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError is the line a YAML syntax error is on and what is wrong
// there. The parser names the line where the construct it was reading
// began (a mapping lines above the stray key), no line at all for the
// first line, and none for a character YAML does not allow; so the line
// is the first at which the file, cut after it, fails the same way.
func syntaxError(err error, data []byte) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if bytes.Count(data, []byte("\n")) <= maxSyntaxLines {
		end := 0
		for n := 1; end < len(data); n++ {
			i := bytes.IndexByte(data[end:], '\n')
			if i < 0 {
				end = len(data)
			} else {
				end += i + 1
			}
			var doc yaml.Node
			if err := yaml.NewDecoder(bytes.NewReader(data[:end])).Decode(&doc); err != nil && strings.HasSuffix(err.Error(), msg) {
				return n, msg
			}
		}
	}
	if line == 0 {
		line = badCharLine(data)
	}
	return line, msg
}

// maxSyntaxLines bounds the files whose syntax errors are looked for
// line by line: each line read costs a parse of what comes before.
const maxSyntaxLines = 5000

// badCharLine is the line of the first character YAML does not allow, or
// 1 when there is none.
func badCharLine(data []byte) int {
	line := 1
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		switch {
		case r == '\n':
			line++
		case r == utf8.RuneError && n <= 1,
			r < 0x20 && r != '\t' && r != '\r',
			r >= 0x7f && r <= 0x9f && r != 0x85,
			r >= 0xd800 && r <= 0xdfff, r == 0xfffe, r == 0xffff:
			return line
		}
		data = data[n:]
	}
	return 1
}
