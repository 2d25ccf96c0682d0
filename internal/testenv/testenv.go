// Package testenv decides, for the tests of this module, what a missing
// service means: outside CI a skip that says what is missing, under CI a
// failure, so that CI never passes by skipping. Only tests and test helper
// packages import it.
package testenv

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// InCI reports whether the CI environment variable is set to anything but
// an explicit false.
func InCI() bool {
	v := os.Getenv("CI")
	b, err := strconv.ParseBool(v)
	return b || (err != nil && v != "")
}

// SkipUnlessCI skips the test because what it needs is missing, or fails
// it when InCI.
func SkipUnlessCI(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("CI is set, so this test must run, but %s", why)
	}
	t.Skipf("skipping: %s; with CI=true this fails instead", why)
}
