// Package policy holds the end-to-end tests of the waste rules and of the
// policy that acts on them: waste found in a ledger and live, warnings to
// a real webhook and stops of real containers, and rules reloaded on
// SIGHUP.
package policy

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
