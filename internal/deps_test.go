// Package internal_test keeps the data flow one way in the imports: the
// low packages, which the rest is built on, import none of the packages
// built on them.
package internal_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpumeter/gpumeter/"

// lowerOf lists, for each low package, the packages of ours it may
// import, directly or not. Everything else of ours is higher: a source, a
// sink, the agent or cmd, which import these and never the other way.
var lowerOf = map[string][]string{
	"internal/units":  {},
	"internal/yamlx":  {},
	"internal/config": {"internal/units", "internal/yamlx"},
	"internal/cost":   {"internal/config", "internal/units", "internal/yamlx"},
	"internal/meter":  {"internal/container", "internal/gpu", "internal/units"},
	// The ledger stores the audit log's events and the queue's jobs, of
	// their own packages' types.
	"internal/audit":  {},
	"internal/ledger": {"internal/audit", "internal/queue", "internal/units"},
	"internal/queue":  {},
	"internal/hostid": {},
	// The GPUs' last hour reads ticks and keeps no wire shapes.
	"internal/gpuhistory": {"internal/audit", "internal/container", "internal/gpu", "internal/ledger", "internal/meter", "internal/queue", "internal/sampler", "internal/units"},
	// The simulator is a source: it feeds the sampler and builds none.
	"internal/sim": {"internal/container", "internal/gpu", "internal/units", "internal/yamlx"},
	// The console draws what the API server lets it read, through the
	// interface it hands in: the domain and wire packages, never the
	// server itself, the queue's runtime, a source or the agent.
	"internal/web": {"internal/api/apitype", "internal/audit", "internal/auth", "internal/config", "internal/container",
		"internal/cost", "internal/gpu", "internal/ledger", "internal/meter", "internal/queue", "internal/report",
		"internal/sampler", "internal/units", "internal/waste", "internal/yamlx"},
}

// TestImportsFlowDown runs go list -deps on each low package and fails on
// any package of ours it pulls in that its row of lowerOf does not allow.
func TestImportsFlowDown(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the imports: %v", err)
	}
	for pkg, allowed := range lowerOf {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		var seen bool
		for _, dep := range strings.Fields(string(out)) {
			ours, ok := strings.CutPrefix(dep, module)
			if !ok {
				continue
			}
			if ours == pkg {
				seen = true
				continue
			}
			if !slices.Contains(allowed, ours) {
				t.Errorf("%s imports %s, which is not below it (allowed: %s)", pkg, ours, strings.Join(allowed, ", "))
			}
		}
		if !seen {
			t.Errorf("go list -deps %s did not list the package itself:\n%s", pkg, out)
		}
	}
}
