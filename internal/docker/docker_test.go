package docker

// Helpers for the tests that run against a real Docker engine, on top of
// internal/dockertest: an inventory run for the test, its containers by ID,
// and a ProcReader over this machine's /proc.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/container"
	"github.com/gpumeter/gpumeter/internal/dockertest"
)

// settle is how long an event-driven change may take to show.
const settle = 10 * time.Second

// newClient returns a client of the daemon at host ("": the default),
// logging to the test, closed when the test ends.
func newClient(t testing.TB, host string) *Client {
	t.Helper()
	cli, err := NewClient(host, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newJobs returns the job containers of node on the daemon at host, over
// a client of their own.
func newJobs(t testing.TB, host, node string) *Jobs {
	t.Helper()
	return NewJobs(newClient(t, host), node, nil)
}

// startInventory runs an inventory of the daemon at host for cfg until
// the test ends and waits for its first connection.
func startInventory(t *testing.T, host string, cfg Config) *Inventory {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	inv := New(newClient(t, host), cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() = %v, want nil after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of cancel")
		}
	})
	dockertest.WaitFor(t, 2*settle, "inventory connected", func() (bool, string) {
		return inv.Connected(), "not connected"
	})
	return inv
}

// listed returns the inventory's containers by ID.
func listed(t testing.TB, inv *Inventory) map[string]container.Container {
	t.Helper()
	list, err := inv.Containers(context.Background(), time.Now())
	if err != nil {
		t.Errorf("Containers(): %v", err)
	}
	m := make(map[string]container.Container, len(list))
	for _, c := range list {
		m[c.ID] = c
	}
	return m
}

// hostProcs is a ProcReader over this machine's /proc with a fixed
// password database, so that uids map to known names.
type hostProcs struct {
	names map[int]string
}

func (h hostProcs) ProcessUser(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				break
			}
			uid, err := strconv.Atoi(fields[0])
			if err != nil {
				return "", err
			}
			if name := h.UserName(uid); name != "" {
				return name, nil
			}
			return fields[0], nil
		}
	}
	return "", fmt.Errorf("no Uid line in /proc/%d/status", pid)
}

func (h hostProcs) UserName(uid int) string { return h.names[uid] }

// Stats reads the main process only; the real adapter reads the cgroup.
func (h hostProcs) Stats(pid int) (float64, uint64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("bad stat")
	}
	fields := strings.Fields(string(stat[i+1:])) // fields[0] is field 3, state
	if len(fields) < 13 {
		return 0, 0, errors.New("short stat")
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	statm, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, 0, err
	}
	sf := strings.Fields(string(statm))
	if len(sf) < 2 {
		return 0, 0, errors.New("short statm")
	}
	rss, _ := strconv.ParseUint(sf[1], 10, 64)
	return (utime + stime) / 100, rss * uint64(os.Getpagesize()), nil
}
