// Package image holds the end-to-end test of the container image: the
// Dockerfile's final stage built on a real Docker engine from a glibc base
// made here (no registry is needed), run with the README's flags, and
// asked for its metrics, its socket and its version.
package image

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
