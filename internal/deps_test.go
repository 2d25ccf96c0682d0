// Package internal_test keeps the data flow one way in the imports. Every
// package of ours has a floor; a package imports only packages on lower
// floors, so no import runs back up and no cycle can form. A new package
// needs a floor here and a line in docs/design.md's package map, or the
// tests below fail.
package internal_test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpumeter/gpumeter/"

// floors gives each package its floor. Floor 1 holds what is built on
// nothing of ours; each floor above imports only from those below it.
var floors = map[string]int{
	// 1: plain types, grammars and leaves: built on nothing of ours.
	"internal/audit": 1, "internal/cgroup": 1, "internal/container": 1, "internal/doctor": 1,
	"internal/gpu": 1, "internal/hostid": 1, "internal/listener": 1, "internal/queue": 1,
	"internal/queue/stage": 1, "internal/retry": 1, "internal/testenv": 1, "internal/units": 1,
	"internal/yamlx": 1,
	// 2: settings, the wire shapes, the ledger's records, the meter's
	// math, the GPU sources and the job request's checks.
	"internal/api/apitype": 2, "internal/config": 2, "internal/dockertest": 2, "internal/ledger": 2,
	"internal/ledger/pgtest": 2, "internal/meter": 2, "internal/nvml": 2, "internal/queue/spec": 2,
	"internal/sim": 2,
	// 3: what reads settings or the engine: auth, cost, the Docker
	// client, the SQL shared by the ledgers, fair share, the sampler,
	// and the API's client and top, which read wire shapes only.
	"internal/api/client": 3, "internal/auth": 3, "internal/cost": 3, "internal/docker": 3,
	"internal/ledger/ledgertest": 3, "internal/ledger/sqlledger": 3, "internal/queue/fairshare": 3,
	"internal/sampler": 3, "internal/top": 3,
	// 4: the sinks of the tick and the ledgers themselves, the queue's
	// runtime, and what reads the ledger's history (reports, waste, the
	// what-if replay).
	"internal/exporter": 4, "internal/gpuhistory": 4, "internal/ledger/postgres": 4,
	"internal/ledger/sqlite": 4, "internal/queue/run": 4, "internal/record": 4, "internal/report": 4,
	"internal/sampler/samplertest": 4, "internal/waste": 4, "internal/whatif": 4,
	// 5: what acts on findings, the backend chooser, the console.
	"internal/ledger/backend": 5, "internal/policy": 5, "internal/web": 5,
	// 6: the API server, which mounts the console.
	"internal/api/server": 6,
	// 7: the agent, which wires everything below, and the API server's
	// test fixture, which serves it for the server's and the console's
	// tests.
	"internal/agent": 7, "internal/api/server/servertest": 7,
	// 8: the command line.
	"cmd/gpumeter": 8,
}

// only narrows what a few packages may import, directly or not, to the
// packages listed: the ones other tools or the rest of the tree depend on
// staying small.
var only = map[string][]string{
	"internal/units":  {},
	"internal/yamlx":  {},
	"internal/config": {"internal/queue", "internal/units", "internal/yamlx"},
	"internal/cost":   {"internal/config", "internal/queue", "internal/units", "internal/yamlx"},
	"internal/meter":  {"internal/container", "internal/gpu", "internal/units"},
	// The ledger stores the audit log's events and the queue's jobs, of
	// their own packages' types.
	"internal/audit":  {},
	"internal/ledger": {"internal/audit", "internal/queue", "internal/units"},
	"internal/queue":  {},
	"internal/hostid": {},
	// The GPUs' last hour reads ticks and keeps no wire shapes.
	"internal/gpuhistory": {"internal/audit", "internal/container", "internal/gpu", "internal/ledger", "internal/meter", "internal/queue", "internal/sampler", "internal/units"},
	// The API's wire shapes are a leaf: a tool built on them links no
	// domain code.
	"internal/api/apitype": {"internal/units"},
	// The simulator is a source: it feeds the sampler and builds none.
	"internal/sim": {"internal/container", "internal/gpu", "internal/units", "internal/yamlx"},
	// The console draws what the API server lets it read, through the
	// interface it hands in: the domain and wire packages, never the
	// server itself, the queue's runtime, a source or the agent.
	"internal/web": {"internal/api/apitype", "internal/audit", "internal/auth", "internal/config", "internal/container",
		"internal/cost", "internal/gpu", "internal/ledger", "internal/meter", "internal/queue", "internal/report",
		"internal/sampler", "internal/units", "internal/waste", "internal/whatif", "internal/yamlx"},
}

// testOnly are packages for tests: no package but another of them (or a
// test) imports them.
var testOnly = []string{"internal/testenv", "internal/dockertest", "internal/ledger/ledgertest", "internal/ledger/pgtest",
	"internal/api/server/servertest"}

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	Deps       []string
}

// packages runs go list over internal/ and cmd/ and returns our packages
// by their path below the module.
func packages(t *testing.T) map[string]listed {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the imports: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-json", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		path, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || len(p.GoFiles)+len(p.CgoFiles) == 0 || !(strings.HasPrefix(path, "internal/") || strings.HasPrefix(path, "cmd/")) {
			continue
		}
		pkgs[path] = p
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list found no package under internal/ or cmd/:\n%s", out)
	}
	return pkgs
}

func ours(paths []string) []string {
	var r []string
	for _, p := range paths {
		if q, ok := strings.CutPrefix(p, module); ok {
			r = append(r, q)
		}
	}
	return r
}

// TestEveryPackageHasAFloor fails for a package without a floor and for a
// floor whose package is gone.
func TestEveryPackageHasAFloor(t *testing.T) {
	pkgs := packages(t)
	for path := range pkgs {
		if _, ok := floors[path]; !ok {
			t.Errorf("%s has no floor in internal/deps_test.go: give it one above everything it imports", path)
		}
	}
	for path := range floors {
		if _, ok := pkgs[path]; !ok {
			t.Errorf("floors lists %s, which go list does not find", path)
		}
	}
}

// TestImportsFlowDown fails on an import of a package on the same floor
// or higher, on a package importing more than only allows, and on a
// non-test package importing a test helper.
func TestImportsFlowDown(t *testing.T) {
	for path, p := range packages(t) {
		floor, ok := floors[path]
		if !ok {
			continue // TestEveryPackageHasAFloor says so
		}
		for _, dep := range ours(p.Imports) {
			if f, ok := floors[dep]; ok && f >= floor {
				t.Errorf("%s (floor %d) imports %s (floor %d): imports go down only", path, floor, dep, f)
			}
			if slices.Contains(testOnly, dep) && !slices.Contains(testOnly, path) {
				t.Errorf("%s imports %s, which is for tests only", path, dep)
			}
		}
		allowed, narrowed := only[path]
		if !narrowed {
			continue
		}
		for _, dep := range ours(p.Deps) {
			if !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s, directly or not (allowed: %s)", path, dep, strings.Join(allowed, ", "))
			}
		}
	}
}

// TestDesignMapNamesEveryPackage fails for a package docs/design.md's
// package map does not name.
func TestDesignMapNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Package map\n")
	if !ok {
		t.Fatal(`docs/design.md has no "## Package map" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	for path := range packages(t) {
		if !strings.Contains(section, "`"+path+"`") {
			t.Errorf("docs/design.md's package map does not name `%s`", path)
		}
	}
}
