package client

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// ours are the packages of ours the client may link: the wire types and
// the grammars it reads flags and its config file with.
var ours = []string{
	"internal/api/apitype",
	"internal/api/client",
	"internal/units",
	"internal/yamlx",
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
		if rel, mine := strings.CutPrefix(pkg, module); mine && !slices.Contains(ours, rel) {
			t.Errorf("the client links %s", pkg)
		}
	}
}
