//go:build race

package harness

// Race says that the tests run under the race detector, and so
// does the binary they build. Figures of speed (no missed tick under a
// flood) are only asserted without it: the detector slows the agent
// several times over, and the plain run checks them.
const Race = true
