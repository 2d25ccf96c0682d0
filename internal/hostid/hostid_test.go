package hostid

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		user string
		want Identity
	}{
		{"alice", Identity{User: "alice", UID: 1001, GID: 1001, Groups: []uint32{44, 109, 999, 3000}, Home: "/home/alice"}},
		// bob's primary group 100 is listed in users too: not twice.
		{"bob", Identity{User: "bob", UID: 1002, GID: 100, Groups: []uint32{44, 109}, Home: "/home/bob"}},
		// The first of carol's two lines counts.
		{"carol", Identity{User: "carol", UID: 1004, GID: 1004, Groups: []uint32{999, 3000}, Home: "/home/carol"}},
		{"root", Identity{User: "root", UID: 0, GID: 0, Home: "/root"}},
		// A numeric name is a name.
		{"1003", Identity{User: "1003", UID: 1003, GID: 1003, Home: "/home/1003"}},
		// The line after an empty one is read.
		{"nobody", Identity{User: "nobody", UID: 65534, GID: 65534, Home: "/nonexistent"}},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			got, err := Lookup("testdata/passwd", "testdata/group", tt.user)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Lookup(%s) (-want +got):\n%s", tt.user, diff)
			}
		})
	}
}

func TestLookupErrors(t *testing.T) {
	tests := []struct{ user, want string }{
		{"mallory", `user "mallory" not in testdata/passwd`},
		// 1002 is bob's uid, not a name.
		{"1002", `user "1002" not in testdata/passwd`},
		{"dave", `testdata/passwd:10: the uid of user "dave": "notanumber" is not a number 0..4294967294`},
		{"erin", `testdata/passwd:11: the line of user "erin" has 6 fields, want 7 (name:password:uid:gid:gecos:home:shell)`},
		// A NIS compat line is no entry.
		{"+nisuser", `user "+nisuser" not in testdata/passwd`},
		{"", "no user name"},
		{"alice:x", `look up user "alice:x" in testdata/passwd: a name may not hold ':'`},
		{"alice,bob", `a name may not hold ','`},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			got, err := Lookup("testdata/passwd", "testdata/group", tt.user)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Lookup(%q) = %+v, %v; want an error containing %q", tt.user, got, err, tt.want)
			}
		})
	}
	_, err := Lookup("testdata/passwd", "testdata/group", "mallory")
	var unknown *UnknownUserError
	if !errors.As(err, &unknown) || unknown.User != "mallory" || unknown.File != "testdata/passwd" {
		t.Errorf("Lookup(mallory) = %v, want an *UnknownUserError", err)
	}
	if _, err := Lookup("testdata/nope", "testdata/group", "alice"); err == nil || !strings.Contains(err.Error(), "testdata/nope") {
		t.Errorf("missing passwd file: %v, want an error naming it", err)
	}
	if _, err := Lookup("testdata/passwd", "testdata/nope", "alice"); err == nil || !strings.Contains(err.Error(), "testdata/nope") {
		t.Errorf("missing group file: %v, want an error naming it", err)
	}
}

// TestGroupLines: a malformed group line is an error when it lists the
// user, and ignored when it does not.
func TestGroupLines(t *testing.T) {
	tests := []struct {
		name, group, user string
		want              []uint32
		err               string
	}{
		{"plain", "video:x:44:alice\n", "alice", []uint32{44}, ""},
		{"primary left out", "alice:x:1001:alice\nvideo:x:44:alice\n", "alice", []uint32{44}, ""},
		{"sorted once", "b:x:9:alice\na:x:5:alice\nc:x:9:alice\n", "alice", []uint32{5, 9}, ""},
		{"prefix is not a member", "video:x:44:alicex,xalice\n", "alice", nil, ""},
		{"crlf", "video:x:44:bob,alice\r\n", "alice", []uint32{44}, ""},
		{"name alone is not membership", "alice:x:7:\n", "alice", nil, ""},
		{"bad gid of another's group ignored", "video:x:nope:bob\nrender:x:109:alice\n", "alice", []uint32{109}, ""},
		{"short line of another ignored", "video:x:44\nrender:x:109:alice\n", "alice", []uint32{109}, ""},
		{"bad gid of the user's group", "ok:x:1:alice\nvideo:x:nope:alice\n", "alice", nil, `g:2: the gid of group "video", which lists user "alice": "nope" is not a number`},
		{"gid -1", "video:x:4294967295:alice\n", "alice", nil, `g:1: the gid of group "video", which lists user "alice": "4294967295" is not a number 0..4294967294`},
		{"short line listing the user", "video:x:alice\n", "alice", nil, `g:1: a line listing user "alice" has 3 fields, want 4`},
		{"long line listing the user", "video:x:44:alice:extra\n", "alice", nil, `g:1: a line listing user "alice" has 5 fields, want 4`},
		{"empty", "", "alice", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseGroup([]byte(tt.group), "g", tt.user, 1001)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("parseGroup() = %v, %v; want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("parseGroup() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestPasswdLines(t *testing.T) {
	tests := []struct {
		name, passwd string
		want         Identity
		err          string
	}{
		{"plain", "alice:x:1:2:A:/h:/bin/sh\n", Identity{User: "alice", UID: 1, GID: 2, Home: "/h"}, ""},
		{"no final newline", "alice:x:1:2:A:/h:/bin/sh", Identity{User: "alice", UID: 1, GID: 2, Home: "/h"}, ""},
		{"another's bad line ignored", "bob:x:y\nalice:x:1:2::/h:\n", Identity{User: "alice", UID: 1, GID: 2, Home: "/h"}, ""},
		{"uid -1", "alice:x:4294967295:2::/h:/bin/sh\n", Identity{}, `p:1: the uid of user "alice": "4294967295" is not a number`},
		{"uid too big", "alice:x:4294967296:2::/h:/bin/sh\n", Identity{}, `p:1: the uid of user "alice"`},
		{"negative gid", "alice:x:1:-2::/h:/bin/sh\n", Identity{}, `p:1: the gid of user "alice": "-2" is not a number`},
		{"empty uid", "alice:x::2::/h:/bin/sh\n", Identity{}, `p:1: the uid of user "alice": "" is not a number`},
		{"too many fields", "alice:x:1:2::/h:/bin/sh:x\n", Identity{}, `p:1: the line of user "alice" has 8 fields`},
		{"name alone", "alice\n", Identity{}, `p:1: the line of user "alice" has 1 fields`},
		{"comment", "#alice:x:1:2::/h:/bin/sh\n", Identity{}, `user "alice" not in p`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePasswd([]byte(tt.passwd), "p", "alice")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("parsePasswd() = %+v, %v; want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil || !cmp.Equal(got, tt.want) {
				t.Errorf("parsePasswd() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestLookupRereads: a user added to the files is found at the next
// call, without a restart.
func TestLookupRereads(t *testing.T) {
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(passwd, "root:x:0:0::/root:/bin/sh\n")
	write(group, "root:x:0:\n")
	if _, err := Lookup(passwd, group, "frank"); err == nil {
		t.Fatal("Lookup(frank) before frank was added: no error")
	}
	write(passwd, "root:x:0:0::/root:/bin/sh\nfrank:x:1500:1500::/home/frank:/bin/sh\n")
	write(group, "root:x:0:\ngpu:x:2000:frank\n")
	got, err := Lookup(passwd, group, "frank")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Identity{User: "frank", UID: 1500, GID: 1500, Groups: []uint32{2000}, Home: "/home/frank"}); !cmp.Equal(got, want) {
		t.Errorf("Lookup(frank) = %+v, want %+v", got, want)
	}
}
