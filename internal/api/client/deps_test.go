package client

import (
	"os/exec"
	"strings"
	"testing"
)

// serverSide are the packages of the agent that a client has no use for:
// the API server, what it serves from, and the domain types it converts
// to apitype's wire shapes. A name ending in / stands for the packages
// under it only.
var serverSide = []string{
	"internal/agent",
	"internal/api/server",
	"internal/audit",
	"internal/auth",
	"internal/cgroup",
	"internal/config",
	"internal/cost",
	"internal/docker",
	"internal/exporter",
	"internal/ledger",
	"internal/ledger/",
	"internal/meter",
	"internal/nvml",
	"internal/policy",
	"internal/queue/",
	"internal/record",
	"internal/report",
	"internal/sampler",
	"internal/sim",
	"internal/waste",
}

// TestNoServerCode: the client links no code of the server's or the
// domain's, so that a tool built on it carries only the wire types and
// what they are made of.
func TestNoServerCode(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the client's imports: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/gpumeter/gpumeter/"
	for _, pkg := range strings.Fields(string(out)) {
		rel, ours := strings.CutPrefix(pkg, module)
		if !ours {
			continue
		}
		for _, bad := range serverSide {
			if rel == bad || strings.HasPrefix(rel, strings.TrimSuffix(bad, "/")+"/") {
				t.Errorf("the client links %s", pkg)
			}
		}
	}
}
