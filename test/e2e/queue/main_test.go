// Package queue holds the end-to-end tests of the GPU job queue: the
// real binary, started with a simulated 4-GPU host whose jobs are real
// containers on the real Docker engine, driven through its API and its
// command line, and killed with SIGKILL to prove restarts safe.
package queue

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
