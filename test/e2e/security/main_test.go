// Package security holds the end-to-end tests of who may call the agent:
// tokens, roles and client certificates over real TLS, the limits, slow
// clients and floods, the local socket, and containers stopped through
// the API.
package security

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
