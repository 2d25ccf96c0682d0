// Package console runs the web console in a real headless Chromium
// against the real agent.
package console

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
