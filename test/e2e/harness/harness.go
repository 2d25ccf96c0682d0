// Package harness runs the real gpumeter binary for the end-to-end tests
// under test/e2e, as an operator would: it builds the binary (once for
// all the test binaries of a `go test` run, see Binary), starts agents
// and waits for their first sample, runs the command line, reads
// /metrics, and finds the services the tests need (PostgreSQL through
// pgtest, Docker through dockertest, Prometheus, Chromium, setpriv),
// skipping a test without them or failing it when CI is set.
//
// Each area of the tests (test/e2e/metering, .../ledger, ...) is a
// package of its own whose TestMain calls Main; only tests import this
// package.
package harness

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/ledger/pgtest"
)

// What Main sets up for the tests of one test binary.
var (
	goTool string
	root   string // the module's root directory
	// adminToken is the admin token every agent the tests start accepts,
	// unless a test configures tokens of its own; adminTokens is its
	// auth.tokens entry. Both are made afresh for each test binary.
	adminToken, adminTokens string
)

// The binary under test, built by the first test that runs it. lock
// holds its cache entry while this test binary lives.
var binary struct {
	once sync.Once
	path string
	lock *os.File
	err  error
}

// Main finds the module, makes the admin token, runs the tests and stops
// the PostgreSQL server they started, and returns the exit code. Call it
// from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
func Main(m *testing.M) int {
	flag.Parse()
	secret, tok, err := auth.NewToken("e2e-admin", "e2e", config.RoleAdmin, time.Time{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "make the test token:", err)
		return 1
	}
	adminToken, adminTokens = secret, tok.ID+"="+tok.Entry()
	if goTool, root, err = findModule(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return pgtest.Main(m) // runs the tests, then stops their PostgreSQL
}

// Binary is the path of the gpumeter binary under test, built for the
// sources as they are by the first test binary of a go test run that
// asks; the others wait for that build. Every user may run the binary:
// some tests run it as nobody.
func Binary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() { binary.path, binary.lock, binary.err = build(goTool, root) })
	if binary.err != nil {
		t.Fatalf("build gpumeter: %v", binary.err)
	}
	return binary.path
}

// AdminToken is the secret of the admin token that agents started by Serve
// and Launch accept.
func AdminToken() string { return adminToken }

// AdminEnv gives an agent the test admin token, in the environment.
func AdminEnv() string { return "GPUMETER_AUTH_TOKENS=" + adminTokens }

// RepoFile is the absolute path of rel, a path from the module's root,
// such as "testdata/shared.yaml".
func RepoFile(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }

// Testdata is the absolute path of rel in test/e2e/testdata, the
// scenarios and configs that tests of several areas play.
func Testdata(rel string) string { return RepoFile(filepath.Join("test/e2e/testdata", rel)) }

// Environ is the test's environment for a gpumeter command it runs, less
// GPUMETER_LOAD: the switch of the load runs, which the binary, strict
// about its GPUMETER_ variables, would refuse as naming no setting.
func Environ() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GPUMETER_LOAD=") })
}
