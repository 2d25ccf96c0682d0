// The agent's HTTP surface: its listeners, the handler that serves
// /metrics and the API, and the reports the API reads from the ledger.

package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/api/server"
	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/exporter"
	"github.com/gpumeter/gpumeter/internal/ledger"
	"github.com/gpumeter/gpumeter/internal/queue"
	"github.com/gpumeter/gpumeter/internal/queue/fairshare"
	"github.com/gpumeter/gpumeter/internal/queue/run"
	"github.com/gpumeter/gpumeter/internal/report"
	"github.com/gpumeter/gpumeter/internal/web"
	"github.com/gpumeter/gpumeter/internal/whatif"
)

// Both ledgers read the usage page's hourly sums; the queue's fair share
// is the API's.
var (
	_ web.UsageSeries  = ledger.OwnerUsageReader(nil)
	_ server.FairShare = (*fairshare.Service)(nil)
)

// Listen opens the listeners, so that a caller learns a bad address
// before Run and can read the chosen port (":0" in tests).
func (a *Agent) Listen() (net.Addr, error) {
	if err := a.listen(); err != nil {
		return nil, err
	}
	return a.listener.Addr(), nil
}

// Socket is the Unix socket the agent serves on, or "".
func (a *Agent) Socket() string {
	if a.socket == nil {
		return ""
	}
	return a.socket.Addr().String()
}

// Handler is the agent's HTTP surface: /metrics, the API and the page.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	var extra []prometheus.Collector
	var reports server.Reports
	if a.recorder != nil {
		extra = append(extra, a.recorder)
		reports = a
	}
	var findings server.Waste
	if a.waste != nil {
		extra = append(extra, a.waste)
		findings = a.waste
	}
	ac := server.Config{
		Ticks:   a.sampler,
		Reports: reports,
		Waste:   findings,
		Auth:    a.sec.auth.Load,
		Limiter: a.sec.limiter.Load,
		Limits: server.Limits{
			MaxBodyBytes:    int64(a.cfg.API.MaxBodyBytes),
			MaxReportWindow: a.cfg.API.MaxReportWindow,
			MaxReportRows:   a.cfg.API.MaxReportRows,
		},
		Logger:          a.log.With("part", "api"),
		Node:            a.node,
		History:         a.historySource(),
		SessionLifetime: a.cfg.API.SessionLifetime,
	}
	if a.docker != nil {
		// A job's container stopped through the API ends cancelled.
		ac.Stopper = a.stopper(queue.ReasonCancelled)
	}
	if a.store != nil && reports != nil {
		ac.Usage = a.store
		ac.WhatIf = a.whatifService()
	}
	if a.audit != nil {
		extra = append(extra, a.audit)
		ac.Audit = a.audit
	}
	if a.queue != nil {
		ac.Jobs = a.queue
		ac.FairShare = a.fair
		ac.Ranks = a.queue
		if a.cfg.Queue.Fleet {
			ac.Nodes = &run.Nodes{Fleet: a.store, Jobs: a.store, Takeover: a.takeover,
				Target: a.cfg.Queue.TargetUtilization, OutsideThreshold: a.cfg.Queue.OutsideMemoryThreshold}
			ac.Forward = server.ForwardClient(a.fleetRoots)
		}
	}
	apiHandler := server.New(ac)
	// MaxAge: a stuck sampler does not freeze the process metrics.
	ec := exporter.Config{Version: a.version, Log: a.log.With("part", "exporter"), Extra: extra, Prices: (*cost.Model)(&a.cfg.Cost), MaxAge: 2 * a.cfg.Interval}
	if a.queue != nil {
		ec.Queue = a.queueStats
	}
	metrics := exporter.NewHandler(a.sampler, ec)
	a.metrics.Store(metrics)
	mux.Handle("GET /metrics", a.sec.guardOpen(metrics))
	mux.Handle("GET /healthz", a.sec.guardOpen(apiHandler))
	mux.Handle("/", apiHandler)
	return server.LimitHeaders(mux)
}

// Report reads the ledger for the API. Rows still in memory are not in
// it: a report is at most one flush interval behind the live view. A price
// for a GPU model that neither the ledger nor this node's GPUs know gives
// an error wrapping cost.ErrInvalidCost.
func (a *Agent) Report(ctx context.Context, r report.Request) (*report.Report, error) {
	prices := cost.Model(a.cfg.Cost)
	models, err := report.Models(ctx, a.store)
	if err == nil {
		var live []string
		if t := a.sampler.Latest(); t != nil {
			for _, d := range t.Sample.Devices {
				live = append(live, d.Model)
			}
		}
		if verr := prices.Check(models, live); verr != nil {
			err = fmt.Errorf("%w: cost: %w", cost.ErrInvalidCost, verr)
		}
	}
	var rep *report.Report
	if err == nil {
		rep, err = report.Run(ctx, a.store, a.store, r, prices)
	}
	if err != nil {
		a.log.Warn("usage report", "err", err)
	}
	return rep, err
}

// whatifService replays and advises from the agent's ledger with its
// prices, queue settings and idle rule. Settings that do not convert
// (they were checked at load) leave the scheduler's defaults.
func (a *Agent) whatifService() *whatif.Service {
	sched, err := whatif.SchedConfig(a.cfg.Queue)
	if err != nil {
		a.log.Warn("what-if: queue settings", "err", err)
	}
	return &whatif.Service{Ledger: a.store, Prices: cost.Model(a.cfg.Cost), Sched: sched,
		IdleWindow: a.cfg.Waste.Idle.Window, IdleGrace: a.cfg.Waste.Idle.Grace, MaxWindow: a.cfg.API.MaxReportWindow}
}
