package sqlite_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// pageSize is the page size of a new ledger, SQLite's default.
const pageSize = 4096

// ledgerWithJobs writes a ledger of n jobs at path and closes it, its
// WAL checkpointed into the file: the file is then all there is.
func ledgerWithJobs(t testing.TB, path string, n int) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		j := queue.Job{Node: "n", User: "alice", State: "queued", GPUsRequested: 1, Image: "img:1",
			Command: []string{"train", strings.Repeat("x", 200)}}
		if _, err := s.SubmitJob(context.Background(), j, audit.Event{Kind: "api", Action: "jobs.submit", Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatalf("%s-wal is left after Close; the damage below would miss the pages in it", path)
	}
}

// damage overwrites page n (counting from 1) of the file with random bytes.
func damage(t testing.TB, path string, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, pageSize)
	_, _ = rand.Read(b)
	if _, err := f.WriteAt(b, (n-1)*pageSize); err != nil {
		t.Fatal(err)
	}
}

// TestQuickCheck: a ledger with a page in the middle overwritten, or cut
// short, fails the check with ledger.ErrDamaged, an error naming the
// file and the fix; a sound, an empty and a missing file pass, and so
// does a file that is not SQLite at all (Open refuses that one).
func TestQuickCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, path string) // the ledger with 400 jobs is there
		damaged bool
	}{
		{"sound", func(*testing.T, string) {}, false},
		{"page in the middle", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			damage(t, path, fi.Size()/pageSize/2)
		}, true},
		{"truncated to half", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()/pageSize/2*pageSize); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"truncated within a page", func(t *testing.T, path string) {
			if err := os.Truncate(path, 3*pageSize+1000); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"truncated within the header", func(t *testing.T, path string) {
			if err := os.Truncate(path, 10); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"zero length", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"missing", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"not SQLite", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("name,gpu_hours\nalice,3\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			ledgerWithJobs(t, path, 400)
			tc.prepare(t, path)
			err := sqlite.QuickCheck(context.Background(), path)
			if !tc.damaged {
				if err != nil {
					t.Fatalf("QuickCheck = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ledger.ErrDamaged) {
				t.Fatalf("QuickCheck = %v, want an error wrapping ledger.ErrDamaged", err)
			}
			for _, want := range []string{path, "gpumeter ledger check --db " + path, "gpumeter ledger backup"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("QuickCheck error %q does not say %q", err, want)
				}
			}
		})
	}
}
