package queue

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/dockertest"
	"golang.org/x/sys/unix"
)

// swapperSource is the hostile job's binary. swap DIR exchanges DIR/x
// (a directory) and DIR/x.l (a symlink to /) with renameat2
// RENAME_EXCHANGE as fast as it can until SIGTERM. probe DIR OUTSIDE
// says whether DIR holds the marker that only the real x holds, and
// whether DIR+OUTSIDE (a file that exists only outside the mount root,
// reached through the host's /) exists; it exits 42 when it sees that
// file, 43 when it sees no marker, 0 otherwise.
const swapperSource = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"
)

func exchange(a, b string) error {
	nr := uintptr(316) // amd64
	if runtime.GOARCH == "arm64" {
		nr = 276
	}
	pa, _ := syscall.BytePtrFromString(a)
	pb, _ := syscall.BytePtrFromString(b)
	const atFDCWD = ^uintptr(99) // -100
	_, _, e := syscall.Syscall6(nr, atFDCWD, uintptr(unsafe.Pointer(pa)), atFDCWD, uintptr(unsafe.Pointer(pb)), 2, 0)
	if e != 0 {
		return e
	}
	return nil
}

func main() {
	switch os.Args[1] {
	case "swap":
		dir := os.Args[2]
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		for n := 0; ; n++ {
			select {
			case <-term:
				fmt.Println("swaps", n)
				os.Exit(0)
			default:
			}
			if err := exchange(dir+"/x", dir+"/x.l"); err != nil {
				fmt.Println("swap:", err)
				os.Exit(1)
			}
		}
	case "probe":
		dir, outside := os.Args[2], os.Args[3]
		_, err := os.Stat(dir + "/marker")
		marker := err == nil
		_, err = os.Lstat(dir + outside)
		out := err == nil
		var names []string
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			names = append(names, e.Name())
		}
		fmt.Printf("marker=%v outside=%v entries=%v\n", marker, out, names)
		switch {
		case out:
			os.Exit(42)
		case !marker:
			os.Exit(43)
		}
	}
}
`

// TestQueueMountSwapRace: the race of issue 24, run against the real
// engine. Job 1 of alice mounts ROOT/alice read-write and keeps
// exchanging ROOT/alice/x, a directory, with ROOT/alice/x.l, a symlink to
// /. Jobs 2..N of alice mount ROOT/alice/x at /host, read-only and
// read-write in turn, for at least 30 s and 100 accepted jobs, and say
// what they see. A job may be refused at submit or at start, but none
// that started may ever see a file outside the root: each mount is
// opened beneath the root by descriptor and bound by the agent, so runc
// has no name to re-resolve.
func TestQueueMountSwapRace(t *testing.T) {
	const (
		minRun      = 30 * time.Second
		minAccepted = 100
		inFlight    = 6
	)
	h := newHost(t, "")
	img := dockertest.GoImage(t, h.cli, "gpumeter-test-swapper", swapperSource)
	// Eight GPUs: the swapper and seven probes at once.
	sc := strings.Replace(scenario, "count: 4", "count: 8", 1)
	if err := os.WriteFile(filepath.Join(h.dir, "scenario.yaml"), []byte(sc), 0o644); err != nil {
		t.Fatal(err)
	}

	alice := filepath.Join(h.mountRoot, "alice")
	x, xl := filepath.Join(alice, "x"), filepath.Join(alice, "x.l")
	for _, d := range []string{alice, x} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, aliceUID, aliceUID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(x, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", xl); err != nil {
		t.Fatal(err)
	}
	// A file outside the root, that /host shows only if it is the host's /.
	outsideDir, err := os.MkdirTemp("", "gpumeter-swap-outside")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outsideDir) })
	if err := os.Chmod(outsideDir, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(outsideDir, "outside-marker")
	if err := os.WriteFile(outside, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	a := h.start(t)
	swapReq := h.request(1, "10m", "swap", "/out")
	swapReq.Image = img
	swapReq.Mounts = []string{alice + ":/out"}
	swapper := a.submit(t, h.alice, swapReq)
	a.await(t, swapper.ID, time.Minute, "running")
	// The swap runs: the host sees x both ways.
	seen := map[bool]bool{}
	dockertest.WaitFor(t, time.Minute, "x to be swapped both ways", func() (bool, string) {
		var st unix.Stat_t
		if unix.Lstat(x, &st) == nil {
			seen[st.Mode&unix.S_IFMT == unix.S_IFLNK] = true
		}
		return seen[true] && seen[false], fmt.Sprintf("seen symlink %v, directory %v", seen[true], seen[false])
	})

	type probe struct {
		id   string
		mode string
	}
	var (
		accepted, refusedAtSubmit int
		pending                   []probe
		ended                     = map[string]int{} // "mode outcome" -> count
		breaches                  []string
		began                     = time.Now()
	)
	submit := func() {
		mode := "ro"
		if accepted%2 == 1 {
			mode = "rw"
		}
		req := h.request(1, "2m", "probe", "/host", outside)
		req.Image = img
		req.Mounts = []string{x + ":/host:" + mode}
		status, body := a.call(t, http.MethodPost, "/api/v1/jobs", h.alice, req)
		switch status {
		case http.StatusOK, http.StatusCreated:
			var j struct{ ID string }
			if err := json.Unmarshal(body, &j); err != nil || j.ID == "" {
				t.Fatalf("POST /api/v1/jobs: %v: %s", err, body)
			}
			accepted++
			pending = append(pending, probe{j.ID, mode})
		case http.StatusBadRequest:
			refusedAtSubmit++ // x was the symlink when submit looked
		default:
			t.Fatalf("POST /api/v1/jobs: %d %s", status, body)
		}
	}
	deadline := time.Now().Add(10 * time.Minute)
	for accepted < minAccepted || time.Since(began) < minRun || len(pending) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the probes did not end within 10 minutes: %d accepted, %d pending", accepted, len(pending))
		}
		for len(pending) < inFlight && (accepted < minAccepted || time.Since(began) < minRun) {
			submit()
		}
		var still []probe
		for _, p := range pending {
			j := a.job(t, p.id)
			switch j.State {
			case "succeeded", "failed":
			default:
				still = append(still, p)
				continue
			}
			outcome := "refused at start"
			if j.ContainerID != "" {
				logs := jobLogs(t, a, p.id)
				if strings.Contains(logs, "outside=true") || strings.Contains(j.ReasonText, "code 42") {
					breaches = append(breaches, fmt.Sprintf("%s (%s): %s %s: %s", p.id, p.mode, j.State, j.ReasonText, logs))
				}
				if j.State != "succeeded" || !strings.Contains(logs, "marker=true outside=false") {
					t.Errorf("probe %s (%s) started and ended %s %q, logs %q; want it to see the real x", p.id, p.mode, j.State, j.ReasonText, logs)
				}
				outcome = "started"
			} else if j.Reason != "start_refused" {
				t.Errorf("probe %s (%s) ended %s %s %q without a container; want start_refused", p.id, p.mode, j.State, j.Reason, j.ReasonText)
			}
			ended[p.mode+" "+outcome]++
		}
		pending = still
		time.Sleep(50 * time.Millisecond)
	}
	ran := time.Since(began)
	status, _ := a.post(t, swapper.ID, "cancel", h.alice)
	if status != http.StatusOK {
		t.Errorf("cancel the swapper: %d", status)
	}
	t.Logf("%v: %d probes accepted, %d refused at submit; outcomes %v", ran.Round(time.Second), accepted, refusedAtSubmit, ended)
	for _, b := range breaches {
		t.Errorf("a started job saw outside its root: %s", b)
	}
	for _, mode := range []string{"ro", "rw"} {
		if ended[mode+" started"] == 0 {
			t.Errorf("no %s probe started: the test showed nothing of a started job (outcomes %v)", mode, ended)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the outside marker: %v", err)
	}
}

// jobLogs is job id's output, as its owner reads it.
func jobLogs(t *testing.T, a *agent, id string) string {
	t.Helper()
	status, body := a.call(t, http.MethodGet, "/api/v1/jobs/"+id+"/logs", a.h.alice, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/v1/jobs/%s/logs: %d %s", id, status, body)
	}
	return string(body)
}
