package server_test

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/api/server/servertest"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// smallTmpfs mounts a tmpfs of size at a new directory and unmounts it
// when the test ends, after every cleanup registered later (the ledger's
// close among them).
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipUnlessCI(t, "mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.SkipUnlessCI(t, "mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until its file system has no room left, and
// returns the file's path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{64 << 10, 4 << 10, 1} {
		b := make([]byte, chunk)
		for {
			if _, err := f.Write(b); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill %s: %v", dir, err)
				}
				break
			}
		}
	}
	return path
}

// TestJobSubmitDiskFull: with the data directory's disk full, a submit
// over HTTP answers 507 storage_full naming the directory, both where the
// job's environment file cannot be written and where the ledger's write
// fails; nothing is queued, and once room is made submits work again.
func TestJobSubmitDiskFull(t *testing.T) {
	dir := smallTmpfs(t, "2m")
	f := servertest.NewJobsFixtureIn(t, dir, nil, nil)
	f.Submit(t, servertest.AsAlice, servertest.GoodJob)
	filler := fill(t, dir)
	noEnv := strings.Replace(servertest.GoodJob, `"env":["WANDB_MODE=offline"],`, ``, 1)
	for _, tc := range []struct{ name, body string }{
		{"environment file", servertest.GoodJob},
		{"ledger", noEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := f.Do(t, servertest.AsAlice, http.MethodPost, "/api/v1/jobs", strings.NewReader(tc.body), "")
			var e apitype.Error
			a.Decode(t, &e)
			if a.Status != http.StatusInsufficientStorage || e.Code != apitype.CodeStorageFull {
				t.Fatalf("%d %s, want 507 %s", a.Status, a.Body, apitype.CodeStorageFull)
			}
			if !strings.Contains(e.Message, dir) || !strings.Contains(e.Message, "frees space in the data directory") {
				t.Errorf("message %q does not name the data directory %s and the fix", e.Message, dir)
			}
		})
	}
	if got := listIDs(t, f.Get(t, servertest.AsAdmin, "/api/v1/jobs?all_users=1&all=1")); len(got) != 1 {
		t.Errorf("jobs after the refused submits: %v, want only the first", got)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	f.Submit(t, servertest.AsAlice, noEnv)
}
