package report

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/ledger"
)

// keyer returns the grouping key of a record. Container names are keyed
// over every record, not only those a filter keeps, so that a filter does
// not rename rows.
func keyer(by string, usage []ledger.UsageTotal) func(*ledger.UsageTotal) string {
	switch by {
	case ByUser, ByTeam, ByProject, ByImage:
		return func(u *ledger.UsageTotal) string {
			switch u.OwnerKind {
			case ledger.KindNone:
				return KeyUnattributed
			case ledger.KindHost:
				if by == ByUser {
					return u.OwnerID
				}
				if by == ByImage {
					return KeyHost
				}
				return KeyNone
			}
			var s string
			if c := u.Container; c != nil {
				switch by {
				case ByUser:
					s = c.User
				case ByTeam:
					s = c.Team
				case ByProject:
					s = c.Project
				case ByImage:
					s = c.Image
				}
			}
			return cmp.Or(s, KeyNone)
		}
	case ByGPU:
		return func(u *ledger.UsageTotal) string {
			if u.GPU.UUID == "" {
				return KeyNoGPU
			}
			g := u.GPU
			g.Node = u.Node
			return gpuName(g)
		}
	case ByNode:
		return func(u *ledger.UsageTotal) string { return u.Node }
	case ByJob:
		return jobKeyer(usage)
	}
	return containerKeyer(usage)
}

// containerKeyer keys containers by name, adding the short ID where two
// containers share a name and the node where that is not enough either.
func containerKeyer(usage []ledger.UsageTotal) func(*ledger.UsageTotal) string {
	type ctr struct{ node, id string }
	var ctrs []ctr
	names := map[ctr]string{}
	for i := range usage {
		u := &usage[i]
		c := ctr{u.Node, u.OwnerID}
		if _, ok := names[c]; u.OwnerKind == ledger.KindContainer && !ok {
			names[c] = containerName(u)
			ctrs = append(ctrs, c)
		}
	}
	count := func(key func(ctr) string) map[string]int {
		n := map[string]int{}
		for _, c := range ctrs {
			n[key(c)]++
		}
		return n
	}
	name := func(c ctr) string { return names[c] }
	withID := func(c ctr) string { return names[c] + " (" + container.ShortID(c.id) + ")" }
	byName, byID := count(name), count(withID)
	keys := make(map[ctr]string, len(ctrs))
	for _, c := range ctrs {
		switch {
		case byName[name(c)] < 2:
			keys[c] = name(c)
		case byID[withID(c)] < 2:
			keys[c] = withID(c)
		default:
			keys[c] = c.node + "/" + withID(c)
		}
	}
	return func(u *ledger.UsageTotal) string {
		switch u.OwnerKind {
		case ledger.KindNone:
			return KeyUnattributed
		case ledger.KindHost:
			// A host user's processes, named as ps, top and the console
			// name them.
			return u.OwnerID + " (host)"
		}
		return keys[ctr{u.Node, u.OwnerID}]
	}
}

// gpuName names a GPU "<node>/<index> <model>", or by its UUID when the
// ledger knows nothing more of it.
func gpuName(g ledger.GPU) string {
	if g.Index < 0 {
		return g.UUID
	}
	return g.Node + "/" + strconv.Itoa(g.Index) + " " + g.Model
}

// containerName is a container's name without Docker's leading slash, or
// its short ID when the ledger has no name.
func containerName(u *ledger.UsageTotal) string {
	if u.Container != nil && u.Container.Name != "" {
		return strings.TrimPrefix(u.Container.Name, "/")
	}
	return container.ShortID(u.OwnerID)
}
