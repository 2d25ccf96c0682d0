// Package deploy holds the end-to-end tests of what deploy/ ships for a
// host: the systemd unit, checked by systemd-analyze (verify, and the
// offline security score) and its reload command sent to a real agent,
// and the compose stack, validated by docker-compose config (the stack's
// images cannot be pulled here, so it is not started).
package deploy

import (
	"os"
	"testing"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
