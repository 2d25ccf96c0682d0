package audit_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/audit"
)

// t0 is in the past, so that events stamped by the Log come after it.
var t0 = time.Date(2024, 11, 2, 10, 0, 0, 123456000, time.UTC)

// fullEvent sets every field, so that a field added to Event and left out
// of the file's JSON shows up.
func fullEvent() audit.Event {
	return audit.Event{
		Time: t0, Kind: audit.KindAPI, Rule: "idle", FindingID: "idle-1", Node: "n1", ContainerID: "abc", Container: "nb",
		Owner: "carol", Evidence: map[string]float64{"sm_percent": 0.5}, DryRun: true, Outcome: audit.OutcomeDenied,
		Attempts: 2, Error: "role viewer may not stop containers", Caller: "alice (token alice-laptop)", Role: "viewer",
		Source: "192.0.2.7:51234", Action: "containers.stop", Target: "abc", Status: 403, Count: 3,
	}
}

// TestFullEvent checks that fullEvent sets every field, so that the tests
// that write it pin them all.
func TestFullEvent(t *testing.T) {
	v := reflect.ValueOf(fullEvent())
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("fullEvent leaves %s zero", v.Type().Field(i).Name)
		}
	}
}

// TestEventJSON pins the field names of the audit file, which people
// read and scripts parse.
func TestEventJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    audit.Event
		want string
	}{
		{"Policy", audit.Event{Time: t0, Kind: "stop", Rule: "idle", FindingID: "idle-1", ContainerID: "abc", Owner: "carol", Outcome: "stopped"},
			`{"time":"2024-11-02T10:00:00.123456Z","kind":"stop","rule":"idle","finding_id":"idle-1","container_id":"abc","owner":"carol","dry_run":false,"outcome":"stopped"}`},
		{"API", fullEvent(),
			`{"time":"2024-11-02T10:00:00.123456Z","kind":"api","rule":"idle","finding_id":"idle-1","node":"n1","container_id":"abc","container":"nb","owner":"carol",` +
				`"evidence":{"sm_percent":0.5},"dry_run":true,"outcome":"denied","attempts":2,"error":"role viewer may not stop containers",` +
				`"caller":"alice (token alice-laptop)","role":"viewer","source":"192.0.2.7:51234","action":"containers.stop","target":"abc","status":403,"count":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			f, err := audit.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Audit(context.Background(), tc.e); err != nil {
				t.Fatal(err)
			}
			f.Close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != tc.want+"\n" {
				t.Errorf("file = %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestFileAppends: each event is one line, appended.
func TestFileAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	f, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"sent", "stopped"} {
		if err := f.Audit(context.Background(), audit.Event{Time: time.Unix(0, 0).UTC(), Kind: "stop", Rule: "idle", Container: "x", Outcome: o}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], `{"time":"1970-01-01T00:00:00Z","kind":"stop","rule":"idle"`) || !strings.Contains(lines[1], `"outcome":"stopped"`) {
		t.Errorf("audit file:\n%s", b)
	}
}

func TestOpenFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	f, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode = %v, want -rw-------", got)
	}
	if got := f.Path(); got != path {
		t.Errorf("Path() = %q, want %q", got, path)
	}
	if _, err := audit.OpenFile(filepath.Join(path, "no")); err == nil {
		t.Error("OpenFile under a file succeeded")
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	f, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var events []audit.Event
	// Out of order, as two writers appending at once may leave them.
	for _, d := range []int{0, 2, 1, 3} {
		e := fullEvent()
		e.Time = t0.Add(time.Duration(d) * time.Second)
		e.Target = strconv.Itoa(d)
		events = append(events, e)
		if err := f.Audit(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	for _, tc := range []struct {
		name     string
		from, to time.Time
		want     []audit.Event
	}{
		{"All", time.Time{}, time.Time{}, []audit.Event{events[0], events[2], events[1], events[3]}},
		{"From", t0.Add(time.Second), time.Time{}, []audit.Event{events[2], events[1], events[3]}},
		{"To", time.Time{}, t0.Add(2 * time.Second), []audit.Event{events[0], events[2]}},
		{"Window", t0.Add(time.Second), t0.Add(3 * time.Second), []audit.Event{events[2], events[1]}},
		{"Empty", t0.Add(time.Hour), time.Time{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := audit.ReadFile(path, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadFile (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadFileErrors(t *testing.T) {
	good := `{"time":"2026-11-02T10:00:00Z","kind":"stop","rule":"idle","finding_id":"f","owner":"o","dry_run":false,"outcome":"stopped"}`
	for _, tc := range []struct {
		name, content, says string
	}{
		{"Corrupt", good + "\n" + good + "\n" + `{"time":"2026-11-02T10:00:01Z","kind":` + "\n" + good + "\n", "line 3: "},
		{"TornLastLine", good + "\n" + `{"time":"2026-11-02T10:00:01Z","ki`, "line 2: "},
		{"Null", "null\n", "line 1: not a JSON object"},
		{"Blank", good + "\n\n" + good + "\n", "line 2: not a JSON object"},
		{"NoTime", good + "\n" + `{"kind":"stop"}` + "\n", "line 2: no time"},
		{"BadTime", `{"time":"yesterday"}` + "\n", "line 1: "},
		{"Trailing", good + " x\n", "line 1: "},
		{"TooLong", good + "\n" + `{"error":"` + strings.Repeat("x", 2<<20) + `"}` + "\n", "line 2: longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := audit.ReadFile(path, time.Time{}, time.Time{})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ReadFile = %d events, %v; want an error naming %s and saying %q", len(got), err, path, tc.says)
			}
		})
	}
	t.Run("Missing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "none.jsonl")
		if _, err := audit.ReadFile(path, time.Time{}, time.Time{}); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("ReadFile(missing) = %v, want an error naming %s", err, path)
		}
	})
}

var lineNumber = regexp.MustCompile(`: line ([0-9]+): `)

// FuzzReadFile: whatever the file holds, ReadFile does not panic; it
// returns either one event per line, oldest first, or an error naming the
// file and a line that exists.
func FuzzReadFile(f *testing.F) {
	good := `{"time":"2026-11-02T10:00:00Z","kind":"stop","rule":"idle","finding_id":"f","owner":"o","dry_run":false,"outcome":"stopped"}`
	for _, seed := range []string{
		"",
		good + "\n",
		good + "\n" + `{"time":"2026-11-02T09:00:00Z","kind":"api","action":"containers.stop","status":403,"evidence":{"x":1}}` + "\r\n",
		good + "\n{",
		"null\n",
		"\n",
		`{"time":"2026-11-02T10:00:00Z","evidence":{"x":"y"}}`,
		`{"time":"0001-01-01T00:00:00Z"}`,
		`[1,2]` + "\n" + good,
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "audit.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		lines := bytes.Count(data, []byte("\n"))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			lines++
		}
		got, err := audit.ReadFile(path, time.Time{}, time.Time{})
		if err != nil {
			m := lineNumber.FindStringSubmatch(err.Error())
			if !strings.Contains(err.Error(), path) || m == nil {
				t.Fatalf("ReadFile = %v, want an error naming %s and a line", err, path)
			}
			if n, _ := strconv.Atoi(m[1]); n < 1 || n > lines+1 {
				t.Fatalf("ReadFile = %v, names line %d of a file of %d lines", err, n, lines)
			}
			return
		}
		if len(got) != lines {
			t.Fatalf("ReadFile = %d events from %d lines", len(got), lines)
		}
		if !slices.IsSortedFunc(got, func(a, b audit.Event) int { return a.Time.Compare(b.Time) }) {
			t.Fatal("ReadFile did not return the events oldest first")
		}
	})
}

// TestFileReopen: after the log is renamed away and reopened, new events
// go to a new file at the path and the renamed one keeps the old ones.
func TestFileReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	f, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	if err := f.Audit(context.Background(), audit.Event{Time: at, Kind: audit.KindAPI, Outcome: audit.OutcomeDenied}); err != nil {
		t.Fatal(err)
	}
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := f.Reopen(); err != nil {
		t.Fatal(err)
	}
	if err := f.Audit(context.Background(), audit.Event{Time: at.Add(time.Second), Kind: audit.KindAPI, Outcome: audit.OutcomeAllowed}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{rotated: audit.OutcomeDenied, path: audit.OutcomeAllowed} {
		got, err := audit.ReadFile(p, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Outcome != want {
			t.Errorf("%s holds %+v, want one %s event", p, got, want)
		}
	}
}
