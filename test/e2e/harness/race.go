//go:build race

package harness

// raceEnabled says that the tests run under the race detector, and so
// does the binary they build.
const raceEnabled = true
