package config

import (
	"slices"
	"strings"
	"testing"
)

// TestKeyHelp: every key says what it takes and where help lists it, no
// help text holds a backtick (pflag would take the quoted word for the
// flag's placeholder), no help says its own default (help adds one), and
// every example is a value the key takes.
func TestKeyHelp(t *testing.T) {
	for _, k := range Keys() {
		if k.Kind() == "" {
			t.Errorf("%s: no kind", k.Name)
		}
		if !slices.Contains(Sections, k.Section()) {
			t.Errorf("%s: section %q is not one of %v", k.Name, k.Section(), Sections)
		}
		if strings.Contains(k.Help, "`") {
			t.Errorf("%s: help has a backtick: %s", k.Name, k.Help)
		}
		if strings.Contains(k.Help, "(default") {
			t.Errorf("%s: help says its default itself: %s", k.Name, k.Help)
		}
		if ex := k.Example(); ex != "" {
			c := Default()
			if err := c.Set(k.Name, ex); err != nil {
				t.Errorf("%s: example %q: %v", k.Name, ex, err)
			}
		}
	}
}

func TestNearest(t *testing.T) {
	tests := []struct{ in, want string }{
		{"intervl", "interval"},
		{"Interval", "interval"},
		{"lisen", "listen"},
		{"docker.hots", "docker.host"},
		{"ledger-flush-intreval", "ledger.flush_interval"},
		{"LEDGER_FLUSH_INTERVAL", "ledger.flush_interval"},
		{"flush_interval", "ledger.flush_interval"},
		{"colour", ""},
		{"x", ""},
		{"", ""},
	}
	for _, tt := range tests {
		k, ok := Nearest(tt.in)
		if got := k.Name; got != tt.want || ok != (tt.want != "") {
			t.Errorf("Nearest(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

func TestChanged(t *testing.T) {
	a, b := Default(), Default()
	if got := Changed(&a, &b); len(got) != 0 {
		t.Errorf("Changed(defaults, defaults) = %v, want none", got)
	}
	for name, v := range map[string]string{"listen": ":1", "idle_power": "H100=70W", "waste.idle.window": "2h"} {
		if err := b.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := Changed(&a, &b), []string{"listen", "idle_power", "waste.idle.window"}; !slices.Equal(got, want) {
		t.Errorf("Changed = %v, want %v", got, want)
	}
}
