// Running and stopping: Run starts every part and shuts them down in
// order; Close releases what New opened; ReloadOn has Run reload on a
// signal.

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/record"
)

// Close releases what New opened: the ledger, the GPU source and the
// demo's own directory. Run does it when it returns; Close is for an agent
// that never gets to Run, one whose Listen failed, say. It waits for a
// reload under way, and refuses those that come after it; closing again
// does nothing.
func (a *Agent) Close() {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	if a.store != nil {
		release, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := record.Release(release, a.store, a.lease); err != nil {
			a.log.Warn("release the node's lease", "err", err)
		}
		cancel()
		if err := a.store.Close(); err != nil {
			a.log.Warn("close the ledger", "err", err)
		}
	}
	a.close()
}

func (a *Agent) close() {
	for _, c := range a.closers {
		if err := c(); err != nil {
			a.log.Warn("close", "err", err)
		}
	}
	a.closers = nil
	if a.tempDir != "" {
		// Last, once nothing of the agent writes there any more.
		if err := os.RemoveAll(a.tempDir); err != nil {
			a.log.Warn("close", "err", err)
		}
		a.tempDir = ""
	}
}

// ReloadOn has Run reload the config on each value from signals (serve
// passes its SIGHUPs): load reads the config anew, as it was read at the
// start, and Run puts it in force as Reload does. A config that cannot be
// read or does not pass is audited and logged, and the old one stays.
// Call it before Run.
func (a *Agent) ReloadOn(signals <-chan os.Signal, load func() (config.Config, error)) {
	a.reloads, a.load = signals, load
}

// Run serves until ctx ends, then shuts every part down and returns. The
// parts run side by side; the first to fail stops them all, and Run
// returns its error.
func (a *Agent) Run(ctx context.Context) error {
	if a.listener == nil {
		if _, err := a.Listen(); err != nil {
			a.Close()
			return err
		}
	}
	srv := &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: a.cfg.API.ReadHeaderTimeout,
		ReadTimeout:       a.cfg.API.ReadTimeout,
		WriteTimeout:      a.cfg.API.ReadTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    server.ServerMaxHeaderBytes, // server.LimitHeaders enforces the limit, in JSON
		ConnContext:       auth.ConnContext,
		ErrorLog:          slog.NewLogLogger(a.log.With("part", "http").Handler(), slog.LevelDebug),
	}
	g, ctx := errgroup.WithContext(ctx)
	if m := a.metrics.Load(); m != nil {
		g.Go(func() error { return m.Run(ctx) })
	}
	if a.docker != nil {
		g.Go(func() error {
			if err := a.docker.Run(ctx); err != nil {
				return fmt.Errorf("docker inventory: %w", err)
			}
			return nil
		})
	}
	// The recorder stops only after the sampler has, so that its final
	// flush holds the last tick too.
	recCtx, stopRecorder := context.WithCancel(context.Background())
	defer stopRecorder()
	if a.recorder != nil {
		g.Go(func() error {
			err := a.recorder.Run(recCtx)
			var fenced *record.FencedError
			switch {
			case errors.As(err, &fenced):
				// Another agent writes this node now: stop, and exit
				// non-zero, rather than meter what nobody will book.
				return fmt.Errorf("ledger: %w", err)
			case err != nil:
				a.log.Error("final ledger write", "err", err)
			}
			return nil
		})
	}
	// The audit log, too, stops after the server has, so that it keeps
	// the last calls.
	auditCtx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	if a.audit != nil {
		g.Go(func() error {
			_ = a.audit.Run(auditCtx)
			return nil
		})
	}
	if a.queue != nil {
		g.Go(func() error {
			if err := a.queue.Run(ctx); err != nil {
				return fmt.Errorf("queue: %w", err)
			}
			return nil
		})
	}
	if a.fair != nil {
		g.Go(func() error {
			if err := a.fair.Cache().Run(ctx); err != nil {
				a.log.Error("fair share", "err", err)
			}
			return nil
		})
	}
	if a.jobNotices != nil {
		g.Go(func() error { return a.jobNotices.Run(ctx) })
	}
	if a.digest != nil {
		g.Go(func() error { return a.digest.Run(ctx) })
	}
	if a.policy != nil {
		g.Go(func() error {
			if err := a.policy.Run(ctx); err != nil {
				a.log.Error("policy", "err", err)
			}
			return nil
		})
	}
	if a.reloads != nil {
		g.Go(func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-a.reloads:
					a.reloadFrom(a.load)
				}
			}
		})
	}
	g.Go(func() error {
		defer stopRecorder()
		if err := a.sampler.Run(ctx); err != nil {
			return fmt.Errorf("sampler: %w", err)
		}
		return nil
	})
	for _, ln := range []net.Listener{a.listener, a.socket} {
		if ln == nil {
			continue
		}
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http on %s: %w", ln.Addr(), err)
			}
			return nil
		})
	}
	a.log.Info("serving", "listen", a.listener.Addr().String(), "interval", a.cfg.Interval.String())
	<-ctx.Done()
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdown); err != nil {
		// Requests still running (a report on a ledger that does not
		// answer, say) are cut off: closing their connections ends their
		// contexts, so that they let go of the ledger before it closes.
		_ = srv.Close()
	}
	stopAudit()
	err := g.Wait()
	a.Close()
	return err
}
