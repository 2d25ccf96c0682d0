package main

import (
	"flag"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// diffLines shows how a golden file and what a test got differ, as the
// end-to-end tests show it for theirs.
var diffLines = harness.DiffLines
