package hostid

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func seed(f *testing.F, file string, extra ...string) {
	data, err := os.ReadFile(file)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data, "alice")
	f.Add(data, "carol")
	f.Add(data, "dave")
	for _, s := range extra {
		f.Add([]byte(s), "alice")
	}
}

// FuzzParsePasswd: any file and name give an identity of that name or an
// error naming the file, and an identity comes from a line that holds it.
func FuzzParsePasswd(f *testing.F) {
	seed(f, "testdata/passwd", "", "alice", "alice:x:1:2:::\r\n", "alice:x:4294967295:0:::", ":::::::\n\n#\n+")
	f.Fuzz(func(t *testing.T, data []byte, user string) {
		id, err := parsePasswd(data, "fuzz", user)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") && !strings.HasSuffix(err.Error(), " not in fuzz") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		if id.User != user {
			t.Errorf("parsePasswd(%q) = %+v", user, id)
		}
		if id.UID == 1<<32-1 || id.GID == 1<<32-1 {
			t.Errorf("parsePasswd gave (uid_t)-1: %+v", id)
		}
		if !strings.Contains(string(data), user+":") {
			t.Errorf("parsePasswd(%q) found %+v in a file without the name", user, id)
		}
	})
}

// FuzzParseGroup: any file gives sorted, distinct gids without the
// primary one, or an error naming the file and a line.
func FuzzParseGroup(f *testing.F) {
	seed(f, "testdata/group", "", "video:x:44:alice", "a:x:1:alice\na:x:1:alice,alice", "video:x:alice\n", "::::\n,,,")
	f.Fuzz(func(t *testing.T, data []byte, user string) {
		const primary = 1001
		gids, err := parseGroup(data, "fuzz", user, primary)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Errorf("error %q does not name the file and line", err)
			}
			return
		}
		if !slices.IsSorted(gids) || len(slices.Compact(slices.Clone(gids))) != len(gids) {
			t.Errorf("gids %v are not sorted and distinct", gids)
		}
		if slices.Contains(gids, primary) {
			t.Errorf("gids %v hold the primary gid", gids)
		}
		if len(gids) > 0 && !strings.Contains(string(data), user) {
			t.Errorf("gids %v for %q from a file without the name", gids, user)
		}
	})
}
