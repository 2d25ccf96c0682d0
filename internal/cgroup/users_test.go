package cgroup

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for Users.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func usersWithClock(path string) (*Users, *fakeClock) {
	c := &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	u := NewUsers(path)
	u.now = c.Now
	return u, c
}

func TestUsersName(t *testing.T) {
	u := NewUsers(filepath.Join("testdata", "passwd"))
	tests := []struct {
		uid  int
		want string
	}{
		{0, "root"},
		{1000, "alice"},
		{1001, "bob"},
		{1500, "svc-train"},
		{65534, "nobody"},
		{1002, "1002"},
		{-1, "-1"},
	}
	for _, tt := range tests {
		if got := u.Name(tt.uid); got != tt.want {
			t.Errorf("Name(%d) = %q, want %q", tt.uid, got, tt.want)
		}
	}
	if got := u.malformed; got != 0 {
		t.Errorf("malformed = %d, want 0", got)
	}
}

func TestUsersUID(t *testing.T) {
	u := NewUsers(filepath.Join("testdata", "passwd"))
	tests := []struct {
		name   string
		want   int
		wantOK bool
	}{
		{"root", 0, true},
		{"alice", 1000, true},
		{"svc-train", 1500, true},
		{"mallory", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := u.UID(tt.name)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("UID(%q) = %d, %t; want %d, %t", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestUsersMalformed(t *testing.T) {
	u := NewUsers(filepath.Join("testdata", "passwd-malformed"))
	names := []struct {
		uid  int
		want string
	}{
		{0, "root"},
		{1000, "alice"}, // the first line for a uid wins
		{1006, "frank"}, // lines after bad ones still count
		{1002, "1002"},
		{1003, "1003"},
	}
	for _, tt := range names {
		if got := u.Name(tt.uid); got != tt.want {
			t.Errorf("Name(%d) = %q, want %q", tt.uid, got, tt.want)
		}
	}
	if uid, ok := u.UID("alice2"); uid != 1000 || !ok {
		t.Errorf("UID(alice2) = %d, %t; want 1000, true", uid, ok)
	}
	for _, name := range []string{"carol", "dave", "erin", "+@netgroup", "# a comment is not a user"} {
		if uid, ok := u.UID(name); ok {
			t.Errorf("UID(%q) = %d, true; want not found", name, uid)
		}
	}
	// No colons, a uid that is no number, an empty name, no uid field, a
	// negative uid. Comments, blank lines and NIS entries are not errors.
	if got, want := u.malformed, 5; got != want {
		t.Errorf("malformed = %d, want %d", got, want)
	}
}

func TestUsersMissingFile(t *testing.T) {
	u := NewUsers(filepath.Join(t.TempDir(), "passwd"))
	if got := u.Name(0); got != "0" {
		t.Errorf("Name(0) = %q, want %q", got, "0")
	}
	if uid, ok := u.UID("root"); ok {
		t.Errorf("UID(root) = %d, true; want not found", uid)
	}
}

func TestUsersNil(t *testing.T) {
	var u *Users
	if got := u.Name(1000); got != "1000" {
		t.Errorf("Name(1000) = %q, want %q", got, "1000")
	}
	if _, ok := u.UID("root"); ok {
		t.Error("UID(root) found on nil Users")
	}
}

func TestUsersReread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	mtime := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(content string) {
		t.Helper()
		writeFile(t, path, content)
		mtime = mtime.Add(time.Minute)
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	u, clock := usersWithClock(path)

	if got := u.Name(1000); got != "1000" {
		t.Errorf("before the file exists: Name(1000) = %q, want %q", got, "1000")
	}

	write("alice:x:1000:1000::/home/alice:/bin/bash\n")
	if got := u.Name(1000); got != "1000" {
		t.Errorf("within the check interval: Name(1000) = %q, want %q (not looked at yet)", got, "1000")
	}
	clock.Add(usersCheckEvery)
	if got := u.Name(1000); got != "alice" {
		t.Errorf("once the file exists: Name(1000) = %q, want %q", got, "alice")
	}

	// Same size, new mtime: a rename that a size check alone would miss.
	write("alicx:x:1000:1000::/home/alice:/bin/bash\n")
	clock.Add(usersCheckEvery)
	if got := u.Name(1000); got != "alicx" {
		t.Errorf("after the mtime changed: Name(1000) = %q, want %q", got, "alicx")
	}
	if _, ok := u.UID("alice"); ok {
		t.Error("UID(alice) still found after the file dropped her")
	}

	// Unchanged mtime and size: the file is not read again.
	writeFile(t, path, "alicz:x:1000:1000::/home/alice:/bin/bash\n")
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	clock.Add(usersCheckEvery)
	if got := u.Name(1000); got != "alicx" {
		t.Errorf("unchanged mtime and size: Name(1000) = %q, want %q (not read again)", got, "alicx")
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clock.Add(usersCheckEvery)
	if got := u.Name(1000); got != "1000" {
		t.Errorf("after the file was removed: Name(1000) = %q, want %q", got, "1000")
	}

	// A clock that steps back does not stop the checks.
	write("bob:x:1000:1000::/home/bob:/bin/bash\n")
	clock.Add(-time.Hour)
	if got := u.Name(1000); got != "bob" {
		t.Errorf("after the clock stepped back: Name(1000) = %q, want %q", got, "bob")
	}
}

func BenchmarkUsersName(b *testing.B) {
	u := NewUsers(filepath.Join("testdata", "passwd"))
	b.ReportAllocs()
	for b.Loop() {
		u.Name(1000)
	}
}
