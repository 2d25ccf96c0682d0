package config

import (
	"strings"
)

// defaultIs sets what help says the default is, for a default worked out
// at run time or an empty one that stands for something.
func (k Key) defaultIs(text string) Key { k.defaultText = text; return k }

// exampleIs sets a value help shows, in the form flags and the
// environment take.
func (k Key) exampleIs(v string) Key { k.example = v; return k }

// Kind is what the key takes, for a flag's placeholder: string, bool,
// int, number, duration, size, list, or name=value pairs such as
// model=power for a map.
func (k Key) Kind() string { return k.kind }

// DefaultText is the default as help shows it: what an empty default
// stands for, else the default value ("" when there is none).
func (k Key) DefaultText() string {
	if k.defaultText != "" {
		return k.defaultText
	}
	return k.Default()
}

// Example is a value the key's flag and variable accept, or "".
func (k Key) Example() string { return k.example }

// Sections are the headings help groups keys under, in order.
var Sections = []string{"General", "GPU source", "Host", "Containers", "Ledger", "Cost", "Waste rules", "Policy", "Queue", "API and security"}

// Section is the heading of Sections the key belongs under.
func (k Key) Section() string {
	first, _, _ := strings.Cut(k.Name, ".")
	switch first {
	case "source", "sim_file", "nvml_library", "idle_power":
		return "GPU source"
	case "host":
		return "Host"
	case "docker", "labels":
		return "Containers"
	case "data_dir", "data_group", "ledger":
		return "Ledger"
	case "cost":
		return "Cost"
	case "waste":
		return "Waste rules"
	case "policy":
		return "Policy"
	case "queue":
		return "Queue"
	case "auth", "api", "tls", "web":
		return "API and security"
	}
	return "General"
}

// Nearest is the key whose name is closest to name, a file's key, a
// variable's or a flag's name, or false when none is close enough to be
// what was meant. Case, dashes and underscores do not count; a letter
// left out, added, changed or two swapped count one each.
func Nearest(name string) (Key, bool) {
	norm := func(s string) string { return strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToLower(s)) }
	want := norm(name)
	var (
		best  Key
		bestD = -1
	)
	for _, k := range Keys() {
		kn := norm(k.Name)
		if kn == want {
			return k, true
		}
		if d := Distance(want, kn); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	// Two edits in a short name make another word; a long one takes more.
	if bestD >= 0 && bestD <= max(1, min(3, len(want)/4)) {
		return best, true
	}
	// A key written without its section: flush_interval for
	// ledger.flush_interval.
	suffix := "." + strings.ReplaceAll(strings.ToLower(name), "-", "_")
	for _, k := range Keys() {
		if strings.HasSuffix(k.Name, suffix) {
			return k, true
		}
	}
	return Key{}, false
}

// Distance is the optimal string alignment distance between a and b: the
// edits (insert, delete, replace, swap two neighbours) that turn a into b.
func Distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
