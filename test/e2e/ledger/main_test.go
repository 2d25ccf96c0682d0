// Package ledger holds the end-to-end tests of the ledger under the real
// binary: killed while it writes, locked by another process, two agents
// and one lease, the ledger commands, and a ledger an older release wrote.
package ledger

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
