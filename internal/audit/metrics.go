// The audit log's own metrics: events written, observations told and
// dropped, by kind, and failed writes.

package audit

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descEvents      = prometheus.NewDesc("gpumeter_audit_events_total", "Audit events written to the audit file and the ledger, each that was configured; a sum of observations is one.", nil, nil)
	descObserved    = prometheus.NewDesc("gpumeter_audit_observed_total", "Refusals and reads the audit log was told of, by kind, before they were summed.", []string{"kind"}, nil)
	descDropped     = prometheus.NewDesc("gpumeter_audit_dropped_total", "Refusals and reads not recorded because the audit log was too far behind, by kind; actions are never dropped.", []string{"kind"}, nil)
	descWriteErrors = prometheus.NewDesc("gpumeter_audit_write_errors_total", "Failed writes of audit events: one per event to the file, one per batch to the ledger.", nil, nil)
)

// Describe implements prometheus.Collector.
func (l *Log) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEvents, descObserved, descDropped, descWriteErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (l *Log) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(l.written.Load()))
	for k := range numKinds {
		ch <- prometheus.MustNewConstMetric(descObserved, prometheus.CounterValue, float64(l.observed[k].Load()), kindNames[k])
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(l.dropped[k].Load()), kindNames[k])
	}
	ch <- prometheus.MustNewConstMetric(descWriteErrors, prometheus.CounterValue, float64(l.writeErrors.Load()))
}
