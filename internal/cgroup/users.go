package cgroup

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"
)

// usersCheckEvery bounds how often the passwd file is looked at for
// changes: a burst of cold resolves costs one stat, not one each.
const usersCheckEvery = time.Second

// Users maps uids to names from a passwd-format file (normally /etc/passwd;
// /host/etc/passwd when the agent runs in a container), re-read when the
// file's modification time or size changes. Malformed lines are skipped.
// A missing file means every uid shows as its number. A nil *Users knows no
// names. It is safe for concurrent use.
type Users struct {
	path string
	now  func() time.Time

	mu        sync.Mutex
	checked   time.Time
	loaded    bool // path was looked at at least once
	mtime     time.Time
	size      int64
	byUID     map[int]string
	byName    map[string]int
	malformed int // lines skipped in the file as last read
}

// NewUsers returns Users reading the passwd file at passwdPath.
func NewUsers(passwdPath string) *Users {
	return &Users{path: passwdPath, now: time.Now}
}

// Name returns the user name of uid, or uid in decimal when the passwd
// file does not list it.
func (u *Users) Name(uid int) string {
	if u != nil {
		u.mu.Lock()
		u.refresh()
		name, ok := u.byUID[uid]
		u.mu.Unlock()
		if ok {
			return name
		}
	}
	return strconv.Itoa(uid)
}

// UID returns the uid of the named user; ok is false when the passwd file
// does not list it.
func (u *Users) UID(name string) (uid int, ok bool) {
	if u == nil {
		return 0, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.refresh()
	uid, ok = u.byName[name]
	return uid, ok
}

// refresh re-reads the file when it changed. A file that cannot be read
// for another reason than being absent keeps the names last read, so that
// a passing failure does not turn every user into a number.
func (u *Users) refresh() {
	now := u.now()
	if d := now.Sub(u.checked); u.loaded && d >= 0 && d < usersCheckEvery {
		return
	}
	u.checked = now
	u.loaded = true
	fi, err := os.Stat(u.path)
	if errors.Is(err, fs.ErrNotExist) {
		u.mtime, u.size, u.byUID, u.byName, u.malformed = time.Time{}, 0, nil, nil, 0
		return
	}
	if err != nil || (fi.ModTime().Equal(u.mtime) && fi.Size() == u.size && u.byUID != nil) {
		return
	}
	data, err := os.ReadFile(u.path)
	if err != nil {
		return
	}
	u.mtime, u.size = fi.ModTime(), fi.Size()
	u.byUID, u.byName, u.malformed = parsePasswd(data)
}

// parsePasswd reads name:password:uid:... lines (passwd(5)). Blank lines,
// comments and NIS "+"/"-" entries are not users and not errors. The first
// line for a uid or a name wins, as with getpwuid and getpwnam.
func parsePasswd(data []byte) (byUID map[int]string, byName map[string]int, malformed int) {
	byUID = make(map[int]string)
	byName = make(map[string]int)
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		name, rest, ok1 := bytes.Cut(line, []byte(":"))
		_, rest, ok2 := bytes.Cut(rest, []byte(":"))
		uidField, _, _ := bytes.Cut(rest, []byte(":"))
		uid, ok3 := parseDec(uidField)
		if !ok1 || !ok2 || !ok3 || len(name) == 0 || uid > 1<<32-1 {
			malformed++
			continue
		}
		n := string(name)
		if _, dup := byUID[int(uid)]; !dup {
			byUID[int(uid)] = n
		}
		if _, dup := byName[n]; !dup {
			byName[n] = int(uid)
		}
	}
	return byUID, byName, malformed
}
