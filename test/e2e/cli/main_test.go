// Package cli holds the end-to-end tests of what the command line tells a
// person: bad input to serve, report, simulate and waste, serve's help
// and config messages, the data directory's modes and checks, and shell
// completion.
package cli

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
