package harness

import (
	"bytes"
	"database/sql"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	_ "modernc.org/sqlite" // the driver OpenSQLite opens files with
)

// WriteText writes text to path and returns path.
func WriteText(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteFile writes text to path with exactly mode, whatever the umask,
// and returns path.
func WriteFile(t *testing.T, path, text string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// LockedBuffer is a bytes.Buffer that a process's output copier and the
// test may use at once.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CloseTo reports whether got is within rel (relative) or 1e-9 of want.
func CloseTo(got, want, rel float64) bool {
	d := math.Abs(got - want)
	return d <= 1e-9 || d <= rel*math.Abs(want)
}

// DiffLines lists the lines of want that got lacks ("- ") and those of
// got that want lacks ("+ ").
func DiffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// OpenSQLite opens a SQLite file for the test's own queries; it is closed
// when the test ends.
func OpenSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
