// Package api holds the end-to-end tests of the agent's API and of its
// clients: the usage endpoints, oversized requests, where report, waste
// and audit read, the CLI's credentials, and the live page in a real
// browser.
package api

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
