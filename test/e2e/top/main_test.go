// Package top holds the end-to-end tests of `gpumeter top`: the real
// binary against a real `gpumeter serve --demo`, once through --once and
// once in a real terminal under tmux.
package top

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
