package exporter

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/gpumeter/gpumeter/internal/cost"
	"github.com/gpumeter/gpumeter/internal/sampler"
)

// TickSource gives the latest tick; *sampler.Sampler is one.
type TickSource interface {
	Latest() *sampler.Tick
}

// Handler returns the /metrics handler: gpumeter's series from the latest
// tick, then the Go and process metrics of the exporter itself and the
// extra collectors (the ledger writer's, say).
//
// It serves what promhttp's handler would with ContinueOnError: a
// collector that fails loses only its own metrics, and the error is logged
// to log (nil logs nothing) and counted in
// promhttp_metric_handler_errors_total{cause="gathering"}, the counter
// promhttp keeps for it, so that alerts written for promhttp's exporters
// work here too. The response is gzipped when the scraper accepts it, as
// Prometheus does.
func Handler(src TickSource, version string, log *slog.Logger, extra ...prometheus.Collector) http.Handler {
	return NewHandler(src, Config{Version: version, Log: log, Extra: extra})
}

// Config is what the /metrics handler serves beside the tick.
type Config struct {
	Version string       // of gpumeter, for gpumeter_build_info
	Log     *slog.Logger // nil logs nothing
	Extra   []prometheus.Collector
	// Queue gives the GPU queue's figures at each scrape; false (or a
	// nil Queue) means the queue is off, and the scrape has no
	// gpumeter_queue_* series. It is called on the scrape's goroutine and
	// must not block.
	Queue func() (QueueStats, bool)
	// Prices are the cost section, served as gpumeter_price_* series
	// (see RenderPrices); nil serves none.
	Prices *cost.Model
	// MaxAge is how long Run waits for a tick before it renders the
	// scrape anyway, so that the exporter's own metrics stay fresh while
	// the sampler is stuck; 0 renders on ticks only.
	MaxAge time.Duration
}

// NewHandler is Handler with the GPU queue's series: see Config. They
// follow the tick's series, labelled with its node, and like them are
// left out before the first tick.
//
// Run makes every scrape a copy of the latest render; see snapshot.go.
func NewHandler(src TickSource, cfg Config) *MetricsHandler {
	log, version, extra := cfg.Log, cfg.Version, cfg.Extra
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_errors_total",
		Help: "Total number of internal errors encountered by the promhttp metric handler.",
	}, []string{"cause"})
	h := &MetricsHandler{
		state:      newState(cfg.MaxAge),
		src:        src,
		queue:      cfg.Queue,
		prices:     cfg.Prices,
		reg:        prometheus.NewRegistry(),
		log:        log,
		gatherErrs: errs.WithLabelValues("gathering"),
		encodeErrs: errs.WithLabelValues("encoding"),
	}
	h.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), errs)
	h.reg.MustRegister(extra...)
	h.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "gpumeter_build_info",
		Help:        "A metric with a constant '1' value labelled by the gpumeter version.",
		ConstLabels: prometheus.Labels{"version": version},
	}, func() float64 { return 1 }))
	return h
}

// MetricsHandler serves /metrics; NewHandler makes one.
type MetricsHandler struct {
	state
	src                    TickSource
	queue                  func() (QueueStats, bool)
	prices                 *cost.Model
	reg                    *prometheus.Registry
	log                    *slog.Logger
	gatherErrs, encodeErrs prometheus.Counter
}

// ServeHTTP sends the latest snapshot, gzipped when the scraper accepts
// it; without Run it renders one first.
func (h *MetricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.live.Load() {
		h.refresh(true)
	}
	s := h.current.Load()
	if s == nil || s.tick != h.src.Latest() { // Run has not rendered it yet
		h.refresh(false)
		s = h.current.Load()
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	w.Header().Add("Vary", "Accept-Encoding")
	body := s.plain
	if acceptsGzip(r.Header.Values("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		body = s.gz
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if _, err := w.Write(body); err != nil {
		h.encodeErrs.Inc()
		h.log.Warn("send metrics", "err", err)
	}
}

// renderBody writes the whole scrape into buf: the tick's series, the
// queue's, the prices and then the registry's.
func (h *MetricsHandler) renderBody(buf *bytes.Buffer, t *sampler.Tick) {
	buf.Write(Render(buf.AvailableBuffer(), t))
	if t != nil && t.Tick != nil && h.queue != nil {
		if q, ok := h.queue(); ok {
			buf.Write(RenderQueue(buf.AvailableBuffer(), t.Node, q))
		}
	}
	if h.prices != nil {
		buf.Write(RenderPrices(buf.AvailableBuffer(), t, *h.prices))
	}

	// Gather returns every family it could gather along with the errors
	// of those it could not.
	mfs, gatherErr := h.reg.Gather()
	if gatherErr != nil {
		h.gatherErrs.Inc()
		h.log.Warn("gather metrics; serving the rest", "err", gatherErr)
	}
	for _, mf := range mfs {
		n := buf.Len()
		if _, err := expfmt.MetricFamilyToText(buf, mf); err != nil {
			// A family cut off halfway would make the whole scrape
			// unreadable: leave all of it out.
			buf.Truncate(n)
			h.encodeErrs.Inc()
			h.log.Warn("encode metrics; serving the rest", "family", mf.GetName(), "err", err)
		}
	}

}

// acceptsGzip reports whether Accept-Encoding header values allow gzip
// (RFC 9110, section 12.5.3): gzip, or "*" when gzip is not named, with a
// q-value above 0.
func acceptsGzip(values []string) bool {
	star := false
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			q := qValue(params)
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				return q > 0
			case "*":
				star = q > 0
			}
		}
	}
	return star
}

// qValue reads the q parameter of an Accept-Encoding element's parameters
// (";q=0.5"); it is 1 when absent and 0 when unreadable.
func qValue(params string) float64 {
	for p := range strings.SplitSeq(params, ";") {
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0
		}
		return q
	}
	return 1
}
