package config

import (
	"errors"
	"strings"
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
