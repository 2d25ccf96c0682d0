package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/events"

	"github.com/gpumeter/gpumeter/internal/container"
)

func TestContainersFromCache(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	inv := newTestInventory(t, Config{Keep: time.Minute, Procs: fakeProcs{cpu: 12.5, mem: 4096}})
	inv.put(container.Container{ID: "bbb", Name: "running", Running: true, PID: 42})
	inv.put(container.Container{ID: "aaa", Name: "stopped-recently", FinishedAt: now.Add(-59 * time.Second), ExitCode: 1})
	inv.put(container.Container{ID: "ccc", Name: "stopped-long-ago", FinishedAt: now.Add(-61 * time.Second)})
	inv.put(container.Container{ID: "ddd", Name: "created"})

	got, err := inv.Containers(context.Background(), now)
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("Containers() before Run: err = %v, want ErrUnreachable", err)
	}
	want := []container.Container{
		{ID: "aaa", Name: "stopped-recently", FinishedAt: now.Add(-59 * time.Second), ExitCode: 1},
		{ID: "bbb", Name: "running", Running: true, PID: 42, CPUSeconds: 12.5, MemoryBytes: 4096},
		{ID: "ddd", Name: "created"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Containers() mismatch (-want +got):\n%s", diff)
	}

	inv.sweep(now)
	if _, ok := inv.Lookup("ccc"); ok {
		t.Errorf("Lookup(ccc) after sweep: found, want dropped")
	}
	if c, ok := inv.Lookup("aaa"); !ok || c.Name != "stopped-recently" {
		t.Errorf("Lookup(aaa) = %+v, %v; want the stopped container", c, ok)
	}

	inv.setConnected()
	if _, err := inv.Containers(context.Background(), now); err != nil {
		t.Errorf("Containers() while connected: %v", err)
	}
}

func TestContainersStatsError(t *testing.T) {
	inv := newTestInventory(t, Config{Procs: fakeProcs{err: errors.New("cgroup gone")}})
	inv.put(container.Container{ID: "a", Running: true, PID: 7})
	got, _ := inv.Containers(context.Background(), time.Now())
	if len(got) != 1 || got[0].StatsErr != "cgroup gone" {
		t.Errorf("Containers() = %+v, want one container with StatsErr %q", got, "cgroup gone")
	}
}

// TestDieEventWithoutDaemon checks that a die event marks the container
// stopped from the event alone, for containers gone before they can be
// inspected.
func TestDieEventWithoutDaemon(t *testing.T) {
	inv := newTestInventory(t, Config{})
	inv.put(container.Container{ID: "abc", Name: "job", Running: true, PID: 9, User: "alice"})
	at := time.Date(2026, 3, 1, 12, 0, 0, 42, time.UTC)
	err := inv.handle(context.Background(), events.Message{
		Type:     events.ContainerEventType,
		Action:   events.ActionDie,
		Actor:    events.Actor{ID: "abc", Attributes: map[string]string{"exitCode": "137", "name": "job"}},
		TimeNano: at.UnixNano(),
	})
	if err == nil {
		t.Errorf("handle(die) with no daemon: err = nil, want the failed inspect")
	}
	got, _ := inv.Lookup("abc")
	want := container.Container{ID: "abc", Name: "job", FinishedAt: at, ExitCode: 137, User: "alice"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after die (-want +got):\n%s", diff)
	}

	if err := inv.handle(context.Background(), events.Message{Type: events.ContainerEventType, Action: events.ActionDestroy, Actor: events.Actor{ID: "abc"}}); err != nil {
		t.Errorf("handle(destroy): %v", err)
	}
	if _, ok := inv.Lookup("abc"); ok {
		t.Errorf("Lookup after destroy: found, want gone")
	}
	for _, m := range []events.Message{
		{Type: events.ImageEventType, Action: events.ActionDelete, Actor: events.Actor{ID: "sha256:x"}},
		{Type: events.ContainerEventType, Action: events.ActionStart},
	} {
		if err := inv.handle(context.Background(), m); err != nil {
			t.Errorf("handle(%s %s): %v, want ignored", m.Type, m.Action, err)
		}
	}
}

// TestRunWithoutDaemon checks that a missing daemon neither blocks
// Containers nor keeps Run from returning.
func TestRunWithoutDaemon(t *testing.T) {
	inv := newTestInventory(t, Config{})
	inv.put(container.Container{ID: "a", Running: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inv.Run(ctx) }()

	// Wait for a connection attempt to fail: Containers' error then names
	// the socket (before it, it says "not connected yet").
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := inv.Containers(context.Background(), time.Now()); err != nil && strings.Contains(err.Error(), "none.sock") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection attempt failed within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Containers answers from the cache: an ended context, which any
	// engine call would fail on, changes nothing.
	ended, end := context.WithCancel(context.Background())
	end()
	got, err := inv.Containers(ended, time.Now())
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("Containers() err = %v, want ErrUnreachable naming the socket", err)
	}
	if len(got) != 1 {
		t.Errorf("Containers() = %d containers, want the cached 1", len(got))
	}
	if inv.Connected() {
		t.Errorf("Connected() = true, want false")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil after cancel", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// BenchmarkContainers64 measures the per-tick path: 64 cached containers,
// stats from a constant ProcReader.
func BenchmarkContainers64(b *testing.B) {
	inv := newTestInventory(b, Config{Procs: fakeProcs{cpu: 1, mem: 1 << 30}})
	labels := map[string]string{"gpumeter.user": "alice", "gpumeter.team": "nlp", "com.docker.compose.project": "p"}
	for n := range 64 {
		inv.put(container.Container{
			ID:      fmt.Sprintf("%064x", n),
			Name:    fmt.Sprintf("job-%d", n),
			Image:   "pytorch/pytorch:latest",
			Labels:  labels,
			User:    "alice",
			Team:    "nlp",
			Running: n%8 != 0,
			PID:     1000 + n,
			GPUs:    container.GPURequest{IDs: []string{"0", "1"}},
		})
	}
	inv.setConnected()
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		got, err := inv.Containers(ctx, now)
		if err != nil || len(got) != 64 {
			b.Fatalf("Containers() = %d, %v", len(got), err)
		}
	}
}
