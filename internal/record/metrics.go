// The recorder's own metrics: rows pending, flushes, errors, dropped rows,
// whether the ledger is up and how long a write takes.

package record

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descPending  = prometheus.NewDesc("gpumeter_ledger_pending_rows", "Usage rows summed in memory and not yet written to the ledger.", nil, nil)
	descFlushes  = prometheus.NewDesc("gpumeter_ledger_flushes_total", "Batches written to the ledger.", nil, nil)
	descErrors   = prometheus.NewDesc("gpumeter_ledger_flush_errors_total", "Batches the ledger refused; their rows stay in memory and go out with the next batch.", nil, nil)
	descDropped  = prometheus.NewDesc("gpumeter_ledger_dropped_rows_total", "Rows dropped because the ledger stayed unwritable past ledger.max_pending_rows.", nil, nil)
	descUp       = prometheus.NewDesc("gpumeter_ledger_up", "1 when the last write to the ledger succeeded.", nil, nil)
	descLast     = prometheus.NewDesc("gpumeter_ledger_last_flush_timestamp_seconds", "When the last good write to the ledger ended.", nil, nil)
	descDuration = prometheus.NewDesc("gpumeter_ledger_write_duration_seconds", "How long the last write to the ledger took.", nil, nil)
)

// Describe implements prometheus.Collector.
func (r *Recorder) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descFlushes, descErrors, descDropped, descUp, descLast, descDuration} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (r *Recorder) Collect(ch chan<- prometheus.Metric) {
	s := r.Status()
	up := 1.0
	if s.LastError != "" {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.PendingRows))
	ch <- prometheus.MustNewConstMetric(descFlushes, prometheus.CounterValue, float64(s.Flushes))
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(s.FlushErrors))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.DroppedRows))
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	if !s.LastFlush.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, float64(s.LastFlush.UnixNano())/1e9)
	}
	ch <- prometheus.MustNewConstMetric(descDuration, prometheus.GaugeValue, s.WriteSeconds)
}
