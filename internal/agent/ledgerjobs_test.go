package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/ledger/sqlite"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/spec"
	"github.com/gpumeter/gpumeter/internal/testenv"
)

// simConfig is the config of an agent on a scenario of one GPU, its
// data directory (and so its SQLite ledger) in dir.
func simConfig(t *testing.T, dir, node string) config.Config {
	t.Helper()
	file := filepath.Join(dir, "s.yaml")
	scenario := "version: 1\nnode: " + node + "\nduration: 1h\ngpus:\n  - count: 1\n    model: Test GPU\n    memory: 80GiB\n    idle_power: 60W\n    max_power: 300W\n"
	if err := os.WriteFile(file, []byte(scenario), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Source, cfg.SimFile, cfg.DataDir, cfg.Hostname = "sim", file, dir, node
	cfg.API.Socket = "none"
	return cfg
}

// writeLedger makes the SQLite ledger of cfg with n jobs and closes it.
func writeLedger(t *testing.T, cfg config.Config, n int) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), cfg.LedgerPath())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range n {
		j := queue.Job{Node: cfg.Hostname, User: "alice", State: "succeeded", GPUsRequested: 1, Image: "img:1",
			Command: []string{"train", strings.Repeat("x", 200)}}
		if _, err := s.SubmitJob(context.Background(), j, audit.Event{Kind: "api", Action: "jobs.submit", Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewRefusesADamagedLedger: an agent whose SQLite ledger has a page
// overwritten in the middle, or is cut short, does not start, and says
// which file and how to fix it; an empty file (the first start) starts.
func TestNewRefusesADamagedLedger(t *testing.T) {
	for _, tc := range []struct {
		name    string
		harm    func(t *testing.T, path string, size int64)
		refused bool
	}{
		{"page in the middle overwritten", func(t *testing.T, path string, size int64) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := make([]byte, 4096)
			_, _ = rand.Read(b)
			if _, err := f.WriteAt(b, size/4096/2*4096); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"truncated", func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, size/2); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"zero length", func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := simConfig(t, dir, "damaged")
			writeLedger(t, cfg, 300)
			fi, err := os.Stat(cfg.LedgerPath())
			if err != nil {
				t.Fatal(err)
			}
			tc.harm(t, cfg.LedgerPath(), fi.Size())
			a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
			if !tc.refused {
				if err != nil {
					t.Fatalf("New = %v, want a start on an empty ledger", err)
				}
				a.Close()
				return
			}
			if err == nil {
				a.Close()
				t.Fatal("New = nil error, want a refusal of the damaged ledger")
			}
			if !errors.Is(err, ledger.ErrDamaged) {
				t.Errorf("New error %q does not wrap ledger.ErrDamaged", err)
			}
			for _, want := range []string{cfg.LedgerPath(), "gpumeter ledger check", "gpumeter ledger backup"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New error %q does not say %q", err, want)
				}
			}
		})
	}
}

// queueConfig is simConfig with the queue on, on the machine's engine.
func queueConfig(t *testing.T, dir, node string) config.Config {
	cfg := simConfig(t, dir, node)
	cfg.DockerEnabled = true
	cfg.Queue.Enabled = true
	cfg.Queue.GPUPassing = "env"
	cfg.Queue.Images = []string{"gpumeter-test-sleeper:*"}
	return cfg
}

// jobContainer runs (or, exited, has run) a sleeper labelled as job id
// of node, as the queue's launcher labels its containers.
func jobContainer(t *testing.T, cli *client.Client, node, id string, exited bool) string {
	t.Helper()
	// No network: the jobs need none, and the test needs no bridge.
	s := dockertest.Spec{Name: node + "-" + id, Labels: map[string]string{spec.JobLabel: id, spec.NodeLabel: node},
		HostConfig: &mcontainer.HostConfig{NetworkMode: "none"}}
	if exited {
		s.Cmd = []string{"exit-after", "0s", "0"}
	}
	cid, _ := dockertest.Container(t, cli, s)
	if exited {
		dockertest.WaitFor(t, time.Minute, "the container to exit", func() (bool, string) {
			st := dockertest.Inspect(t, cli, cid).State
			return st != nil && st.Status == "exited", string(st.Status)
		})
	}
	return cid
}

// uniqueNode is a node name no other test on the engine uses.
func uniqueNode(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// TestNewRefusesALostLedger: job containers of the node exist while the
// ledger has no jobs (a zero-length file, as after a loss): the agent
// does not start, names the count, the node and the command that would
// remove them, and leaves them running.
func TestNewRefusesALostLedger(t *testing.T) {
	cli := dockertest.Client(t)
	node := uniqueNode("lost")
	running := jobContainer(t, cli, node, "j-000007", false)
	exited := jobContainer(t, cli, node, "j-000005", true)
	for _, tc := range []struct {
		name string
		lose func(path string) error
	}{
		{"zero length", func(path string) error { return os.Truncate(path, 0) }},
		{"missing", os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := queueConfig(t, dir, node)
			writeLedger(t, cfg, 7)
			if err := tc.lose(cfg.LedgerPath()); err != nil {
				t.Fatal(err)
			}
			a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
			if err == nil {
				a.Close()
				t.Fatal("New = nil error, want a refusal: the node's job containers exist and the ledger has no jobs")
			}
			for _, want := range []string{
				"2 job containers of node " + node + " exist but the ledger (" + cfg.LedgerPath() + ") has no jobs",
				"restore the ledger", "gpumeter ledger backup",
				"docker rm -f $(docker ps -aq --filter label=gpumeter.job --filter label=gpumeter.node=" + node + ")",
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New error %q does not say %q", err, want)
				}
			}
			for _, id := range []string{running, exited} {
				if st := dockertest.Inspect(t, cli, id).State; st == nil || (id == running && !st.Running) {
					t.Errorf("container %.12s after the refusal: %+v, want it as it was", id, st)
				}
			}
		})
	}
}

// TestNewRefusesAnOlderLedger: a container that runs for a job the
// ledger does not have (the ledger restored from an older copy) is
// refused too, by job ID, and left running.
func TestNewRefusesAnOlderLedger(t *testing.T) {
	cli := dockertest.Client(t)
	node := uniqueNode("older")
	running := jobContainer(t, cli, node, "j-000009", false)
	jobContainer(t, cli, node, "j-000002", true)
	cfg := queueConfig(t, t.TempDir(), node)
	writeLedger(t, cfg, 3)
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err == nil {
		a.Close()
		t.Fatal("New = nil error, want a refusal: a running job container's job is not in the ledger")
	}
	want := "1 job containers of node " + node + " that run or are about to belong to jobs the ledger (" + cfg.LedgerPath() + ") does not have (j-000009)"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("New error %q does not say %q", err, want)
	}
	if st := dockertest.Inspect(t, cli, running).State; st == nil || !st.Running {
		t.Errorf("container after the refusal: %+v, want it running", st)
	}
}

// TestNewRaisesTheJobSequence: a ledger that has jobs but forgot those of
// ended containers (restored from an older copy) starts, and the next job
// ID is above the highest gpumeter.job label of the node's containers.
func TestNewRaisesTheJobSequence(t *testing.T) {
	cli := dockertest.Client(t)
	node := uniqueNode("floor")
	jobContainer(t, cli, node, "j-000041", true)
	jobContainer(t, cli, node, "j-000017", true)
	cfg := queueConfig(t, t.TempDir(), node)
	writeLedger(t, cfg, 3) // j-000001..3
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	js := a.store
	j, err := js.SubmitJob(context.Background(), queue.Job{Node: node, User: "bob", State: "queued"}, audit.Event{Kind: "api", Action: "jobs.submit", Outcome: "ok"})
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != "j-000042" {
		t.Errorf("next job ID %s, want j-000042 (above the containers' j-000041)", j.ID)
	}
}

// TestNewStartsWithTheEngineAway: an engine that cannot be reached at
// start is no reason to refuse the ledger: the agent starts, and the
// queue waits for the engine.
func TestNewStartsWithTheEngineAway(t *testing.T) {
	dir := t.TempDir()
	cfg := queueConfig(t, dir, uniqueNode("away"))
	cfg.DockerHost = "unix://" + filepath.Join(dir, "no-docker.sock")
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatalf("New: %v, want a start with the engine away", err)
	}
	a.Close()
}

// TestSubmitWithTheDataDirFull: an agent whose data_dir is a 2 MiB tmpfs,
// filled up, answers a job submitted over HTTP with 507 storage_full
// naming the data directory, and takes it once room is made.
func TestSubmitWithTheDataDirFull(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipUnlessCI(t, "mounting a tmpfs needs root")
	}
	top := t.TempDir()
	dir := filepath.Join(top, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.SkipUnlessCI(t, "mount a tmpfs: %v: %s", err, out)
	}
	// Registered first, so run last: after the agent has closed its files.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	cfg := queueConfig(t, top, uniqueNode("full"))
	cfg.DataDir = dir
	cfg.DockerHost = "unix://" + filepath.Join(top, "no-docker.sock") // jobs stay queued
	cfg.Listen = "127.0.0.1:0"
	cfg.PasswdFile = filepath.Join(top, "passwd")
	cfg.GroupFile = filepath.Join(top, "group")
	if err := os.WriteFile(cfg.PasswdFile, []byte("alice:x:2001:2001::/home/alice:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.GroupFile, []byte("alice:x:2001:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret, tok, err := auth.NewToken("alice-laptop", "alice", config.RoleUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth.Tokens = map[string]config.Token{tok.ID: tok}
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := a.Listen()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	submit := func() (int, apitype.Error) {
		body := `{"gpus":1,"time_limit":"1h","image":"gpumeter-test-sleeper:1","command":["sleep","60"]}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr.String()+"/api/v1/jobs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e apitype.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	// Fill the disk, to the last byte.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{64 << 10, 4 << 10, 1} {
		b := make([]byte, chunk)
		for {
			if _, err := f.Write(b); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	f.Close()
	status, e := submit()
	if status != http.StatusInsufficientStorage || e.Code != apitype.CodeStorageFull {
		t.Fatalf("submit on a full data_dir: %d %+v, want 507 %s", status, e, apitype.CodeStorageFull)
	}
	if !strings.Contains(e.Message, dir) {
		t.Errorf("message %q does not name the data directory %s", e.Message, dir)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if status, e := submit(); status != http.StatusOK || e.State != "queued" {
		t.Errorf("submit once room is made: %d %+v, want 200 and the job queued", status, e)
	}
}
