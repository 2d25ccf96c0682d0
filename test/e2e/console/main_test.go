// Package console holds the end-to-end tests of the web console: its
// pages in a real headless Chromium against a real agent.
package console

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
