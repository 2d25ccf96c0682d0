// Package hostid looks a user up in the host's passwd and group files,
// for the uid, gid and supplementary groups a job runs with.
//
// The files are the ones given (a container sees the host's under a
// mount), read again on every call: they are small, and a user added
// since the last job is found at the next. Only the standard library is
// used, and no name service is asked: the agent runs in a container
// whose own libc knows nothing of the host's users.
//
// A malformed line is an error only when it is the user's: a passwd line
// whose first field is the user's name, or a group line that lists the
// user as a member. Other malformed lines are ignored, as the C
// library's files service ignores them, so that one bad line in a shared
// file does not keep every other user's jobs from starting. Empty lines,
// comments (#) and NIS compat lines (+ or - first) are no entries. When a
// user has two passwd lines the first one counts, as for the C library.
package hostid

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Identity is who a job runs as.
type Identity struct {
	User string
	UID  uint32
	GID  uint32
	// Groups are the supplementary groups: the gids of the group lines
	// that list the user as a member, sorted, each once, without GID.
	Groups []uint32
	Home   string
}

// UnknownUserError is Lookup's error for a user the passwd file does not
// list.
type UnknownUserError struct {
	User string
	File string
}

func (e *UnknownUserError) Error() string {
	return fmt.Sprintf("user %q not in %s", e.User, e.File)
}

// Lookup finds user by name in passwdFile, and the groups that list them
// as a member in groupFile. A numeric name is a name, never a uid.
func Lookup(passwdFile, groupFile, user string) (Identity, error) {
	if user == "" {
		return Identity{}, fmt.Errorf("look up a user in %s: no user name", passwdFile)
	}
	if i := strings.IndexAny(user, ":,\n\r"); i >= 0 {
		return Identity{}, fmt.Errorf("look up user %q in %s: a name may not hold %q", user, passwdFile, user[i])
	}
	passwd, err := os.ReadFile(passwdFile)
	if err != nil {
		return Identity{}, fmt.Errorf("read the passwd file: %w", err)
	}
	id, err := parsePasswd(passwd, passwdFile, user)
	if err != nil {
		return Identity{}, err
	}
	group, err := os.ReadFile(groupFile)
	if err != nil {
		return Identity{}, fmt.Errorf("read the group file: %w", err)
	}
	if id.Groups, err = parseGroup(group, groupFile, user, id.GID); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// parsePasswd is the first entry of user in the passwd file data, whose
// name errors give.
func parsePasswd(data []byte, file, user string) (Identity, error) {
	for n, line := range lines(data) {
		name, _, _ := strings.Cut(line, ":")
		if name != user {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 7 {
			return Identity{}, fmt.Errorf("%s:%d: the line of user %q has %d fields, want 7 (name:password:uid:gid:gecos:home:shell)", file, n, user, len(f))
		}
		uid, err := parseID(f[2])
		if err != nil {
			return Identity{}, fmt.Errorf("%s:%d: the uid of user %q: %w", file, n, user, err)
		}
		gid, err := parseID(f[3])
		if err != nil {
			return Identity{}, fmt.Errorf("%s:%d: the gid of user %q: %w", file, n, user, err)
		}
		return Identity{User: user, UID: uid, GID: gid, Home: f[5]}, nil
	}
	return Identity{}, &UnknownUserError{User: user, File: file}
}

// parseGroup is the gids of the group lines in data that list user as a
// member, sorted, each once, without primary.
func parseGroup(data []byte, file, user string, primary uint32) ([]uint32, error) {
	var gids []uint32
	for n, line := range lines(data) {
		f := strings.Split(line, ":")
		if len(f) != 4 {
			if slices.ContainsFunc(f[1:], func(field string) bool { return lists(field, user) }) {
				return nil, fmt.Errorf("%s:%d: a line listing user %q has %d fields, want 4 (name:password:gid:members)", file, n, user, len(f))
			}
			continue
		}
		if !lists(f[3], user) {
			continue
		}
		gid, err := parseID(f[2])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: the gid of group %q, which lists user %q: %w", file, n, f[0], user, err)
		}
		if gid != primary {
			gids = append(gids, gid)
		}
	}
	slices.Sort(gids)
	return slices.Compact(gids), nil
}

// lists says whether the comma-separated members name user.
func lists(members, user string) bool {
	for m := range strings.SplitSeq(members, ",") {
		if m == user {
			return true
		}
	}
	return false
}

// parseID reads a uid or gid. 4294967295 is (uid_t)-1, which the kernel
// takes for "leave it as it is", never a user's id.
func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("%q is not a number 0..4294967294", s)
	}
	return uint32(n), nil
}

// lines yields the entry lines of a passwd or group file with their line
// numbers (from 1): not empty lines, comments or NIS compat lines. A
// line's \r is dropped, for a file written on Windows.
func lines(data []byte) func(yield func(int, string) bool) {
	return func(yield func(int, string) bool) {
		n := 0
		for raw := range bytes.SplitSeq(data, []byte("\n")) {
			n++
			line := strings.TrimSuffix(string(raw), "\r")
			if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
				continue
			}
			if !yield(n, line) {
				return
			}
		}
	}
}
