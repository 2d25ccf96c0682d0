// Package metering holds the end-to-end tests of what the agent meters
// and how it shows it: its scrape against a golden file, its API and ps,
// the shares of real Docker containers, a real Prometheus's queries, and
// simulate and report against figures worked out by hand.
package metering

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
