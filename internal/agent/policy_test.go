package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/config"
)

// TestReload: a config that does not validate changes nothing; one that
// does swaps the waste rules and the policy together.
func TestReload(t *testing.T) {
	cfg := config.Default()
	cfg.Source, cfg.DataDir, cfg.LedgerEnabled = "demo", t.TempDir(), false
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	live := a.waste.cur.Load()

	bad := cfg
	bad.Policy.Webhook.Retries = 99
	bad.Waste.Idle.Window = 2 * time.Second
	err = a.Reload(bad)
	if err == nil || !strings.Contains(err.Error(), "policy.webhook.retries: 99 is outside 0..10") {
		t.Errorf("Reload(bad) = %v, want the retries named", err)
	}
	if a.waste.cur.Load() != live || a.policy.Policy().Webhook.Retries != 3 {
		t.Error("a rejected config took effect")
	}

	good := cfg
	good.Waste.Idle.Window = 2 * time.Second
	good.Policy.Actions.Idle = config.ActionStop
	if err := a.Reload(good); err != nil {
		t.Fatal(err)
	}
	if a.waste.cur.Load() == live || a.policy.Policy().Actions.Idle != config.ActionStop {
		t.Error("a good config did not take effect")
	}
	// The same rules again keep the evaluator and its findings.
	live = a.waste.cur.Load()
	if err := a.Reload(good); err != nil || a.waste.cur.Load() != live {
		t.Errorf("Reload with the same rules: %v, evaluator replaced %v", err, a.waste.cur.Load() != live)
	}

	// Each reload, and the refused one, is an action in the audit log,
	// there as soon as Reload has returned.
	evs, err := audit.ReadFile(a.auditFile.Path(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range evs {
		if e.Kind == audit.KindConfig && e.Action == "config.reload" {
			outcomes = append(outcomes, e.Outcome)
		}
	}
	if want := []string{"rejected", "reloaded", "reloaded"}; !slices.Equal(outcomes, want) {
		t.Errorf("reloads in the audit log: %v, want %v", outcomes, want)
	}
	if !strings.Contains(evs[0].Error, "policy.webhook.retries") {
		t.Errorf("the refused reload's event %+v does not say why", evs[0])
	}
}

// TestReloadDuringShutdown: SIGHUPs and direct reloads keep coming while
// Run shuts the agent down. Each is put in force or refused, none touches
// the audit file once it is closed (the race detector watches), and once
// Run has returned a reload is refused.
func TestReloadDuringShutdown(t *testing.T) {
	cfg := config.Default()
	cfg.Source, cfg.DataDir, cfg.LedgerEnabled = "demo", t.TempDir(), false
	cfg.Listen, cfg.API.Socket, cfg.Interval = "127.0.0.1:0", "none", 50*time.Millisecond
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatal(err)
	}
	// SIGHUP stays caught until the test binary exits: one still on its
	// way after a signal.Stop would kill it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var loads atomic.Int64
	a.ReloadOn(hup, func() (config.Config, error) {
		loads.Add(1)
		return cfg, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	sighup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Error(err)
		}
	}
	waitLoads := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for loads.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d SIGHUPs reloaded after 10s, want %d", loads.Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sighup()
	waitLoads(1)
	// The load has begun; the reload and its audit line follow it.
	var evs []audit.Event
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		evs, err = audit.ReadFile(a.auditFile.Path(), time.Time{}, time.Time{})
		if err == nil && len(evs) > 0 && evs[len(evs)-1].Action == "config.reload" && evs[len(evs)-1].Outcome == "reloaded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit log 10s after the SIGHUP: %+v, %v; want the reload", evs, err)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			sighup()
			time.Sleep(time.Millisecond)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := a.Reload(cfg); err != nil && !errors.Is(err, errClosed) {
				t.Errorf("Reload during shutdown: %v", err)
			}
		}
	})
	waitLoads(loads.Load() + 3) // the shutdown begins amid reloads
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context ending")
	}
	close(stop)
	wg.Wait()
	if err := a.Reload(cfg); !errors.Is(err, errClosed) {
		t.Errorf("Reload after Run returned = %v, want errClosed", err)
	}
}
