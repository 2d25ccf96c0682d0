package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The label filters of the queries. Every gpumeter series carries the
// node in Hostname, dcgm-exporter's spelling before its 4.5.3 (which
// renamed it hostname); gpumeter keeps Hostname.
const (
	fHost = `Hostname=~"$Hostname"`
	fGPU  = fHost + `, gpu=~"$gpu"`
	fCtr  = fGPU + `, user=~"$user", team=~"$team", container=~"$container"`
	// The host series (a user's processes outside containers) have no
	// team or container label, which "All" (.*) matches as empty.
	usedAny = `{__name__=~"gpumeter_(container|host)_gpu_used_seconds_total", ` + fCtr + `}`
	// modelOf gives each GPU its model under the label the price
	// series use.
	modelOf  = `label_replace(group by (Hostname, UUID, modelName) (DCGM_FI_DEV_FB_USED{` + fGPU + `}), "model", "$1", "modelName", "(.+)")`
	gpuPrice = `max by (Hostname, model, currency) (gpumeter_price_gpu_hour{` + fHost + `})`
)

var dsRef = dashboard.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().Expr(expr).Datasource(dsRef).Range()
	if legend != "" {
		q = q.LegendFormat(legend)
	}
	return q
}

func instant(expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().Expr(expr).Datasource(dsRef).Instant()
	if legend != "" {
		q = q.LegendFormat(legend)
	}
	return q
}

func single(title, desc, unit, expr string) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Datasource(dsRef).
		Unit(unit).Height(4).Span(4).NoValue("0").
		GraphMode(common.BigValueGraphModeNone).Orientation(common.VizOrientationAuto).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		WithTarget(instant(expr, "").RefId("A"))
}

func series(title, desc, unit string, span uint32, stacked bool, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(dsRef).
		Unit(unit).Height(8).Span(span).FillOpacity(10)
	if stacked {
		p = p.FillOpacity(60).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
	}
	for i, t := range targets {
		p = p.WithTarget(t.RefId(string(rune('A' + i))))
	}
	return p
}

func bars(title, desc, unit string, target *prometheus.DataqueryBuilder) *bargauge.PanelBuilder {
	return bargauge.NewPanelBuilder().Title(title).Description(desc).Datasource(dsRef).
		Unit(unit).Height(8).Span(8).
		Orientation(common.VizOrientationHorizontal).
		DisplayMode(common.BarGaugeDisplayModeGradient).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		WithTarget(target.RefId("A"))
}

// labelVar is a query variable over a label's values, multi-valued with
// "All" meaning any value, an empty one included.
func labelVar(name, label, query string) *dashboard.QueryVariableBuilder {
	q := "label_values(" + query + ", " + name + ")"
	return dashboard.NewQueryVariableBuilder(name).Label(label).
		Datasource(dsRef).
		Query(dashboard.StringOrMap{Map: map[string]any{"query": q, "refId": "PrometheusVariableQueryEditor-VariableQuery"}}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}})
}

// build is the dashboard that deploy/grafana/gpumeter.json holds.
func build() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("gpumeter").
		Uid("gpumeter").
		Description("GPU use on Docker hosts by user, team and container, from gpumeter's /metrics: held and used GPU time, efficiency, cost at the configured prices, waste findings and the GPU queue. Hosts are selected on the Hostname label, dcgm-exporter's spelling before its 4.5.3 renamed it hostname; gpumeter keeps Hostname.").
		Tags([]string{"gpumeter", "gpu", "nvidia"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-6h", "now").
		Refresh("30s").
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(labelVar("Hostname", "Host", "gpumeter_ticks_total")).
		WithVariable(labelVar("gpu", "GPU", `DCGM_FI_DEV_FB_USED{`+fHost+`}`)).
		WithVariable(labelVar("user", "User", `gpumeter_container_gpu_held_seconds_total{`+fGPU+`}`)).
		WithVariable(labelVar("team", "Team", `gpumeter_container_gpu_held_seconds_total{`+fGPU+`}`)).
		WithVariable(labelVar("container", "Container", `gpumeter_container_gpu_held_seconds_total{`+fGPU+`, user=~"$user", team=~"$team"}`))

	b = b.WithRow(dashboard.NewRowBuilder("Fleet")).
		WithPanel(single("GPUs", "GPUs metered now.", "short", `count(gpumeter_gpu_up{`+fGPU+`})`)).
		WithPanel(single("GPUs held", "GPUs allocated to the selected containers now, split among containers that share one.", "short", `sum(rate(gpumeter_container_gpu_allocated_seconds_total{`+fCtr+`}[$__rate_interval]))`)).
		WithPanel(single("GPUs used", "SM-weighted GPUs in use by the selected owners now, processes outside containers included.", "short", `sum(rate(`+usedAny+`[$__rate_interval]))`)).
		WithPanel(single("Efficiency", "Used over held GPU time of the selected containers now.", "percentunit", `sum(rate(gpumeter_container_gpu_used_seconds_total{`+fCtr+`}[$__rate_interval])) / sum(rate(gpumeter_container_gpu_held_seconds_total{`+fCtr+`}[$__rate_interval]))`)).
		WithPanel(single("Power", "GPU power draw now.", "watt", `sum(DCGM_FI_DEV_POWER_USAGE{`+fGPU+`})`)).
		WithPanel(single("Open waste findings", "Waste findings whose condition holds now.", "short", `sum(gpumeter_waste_findings{`+fHost+`})`)).
		WithPanel(single("GPU-hours", "GPU-hours allocated to the selected containers over the dashboard's range.", "short", `sum(increase(gpumeter_container_gpu_allocated_seconds_total{`+fCtr+`}[$__range])) / 3600`)).
		WithPanel(single("Energy", "GPU energy over the dashboard's range, in kWh metered at the GPU (before PUE).", "kwatth", `sum(increase(gpumeter_gpu_energy_joules_total{`+fGPU+`}[$__range])) / 3.6e6`)).
		WithPanel(single("GPU cost", "Allocated GPU-hours of the selected containers over the range at gpumeter_price_gpu_hour, the cost section's list price (weights and the idle pool are the report's).", "short",
			`sum by (currency) (increase(gpumeter_container_gpu_allocated_seconds_total{`+fCtr+`}[$__range]) / 3600 * on (Hostname, UUID) group_left (model) `+modelOf+` * on (Hostname, model) group_left (currency) `+gpuPrice+`)`)).
		WithPanel(single("Queued jobs", "Jobs waiting in the GPU queue now.", "short", `sum(gpumeter_queue_jobs{`+fHost+`, state="queued"})`)).
		WithPanel(single("Queue: free GPUs", "GPUs the queue could start a job on now.", "short", `sum(gpumeter_queue_gpus{`+fHost+`, state="free"})`)).
		WithPanel(single("Unresolved processes", "GPU processes whose owner could not be found now: their use is booked to no one.", "short", `sum(gpumeter_unresolved_processes{`+fHost+`})`))

	b = b.WithRow(dashboard.NewRowBuilder("Users and teams")).
		WithPanel(series("GPUs held by user", "GPU time held per second, stacked: a container holds a whole GPU even when it shares it.", "short", 12, true,
			query(`sum by (user) (rate(gpumeter_container_gpu_held_seconds_total{`+fCtr+`}[$__rate_interval]))`, "{{user}}"))).
		WithPanel(series("GPUs used by user", "SM-weighted GPU time used per second, stacked.", "short", 12, true,
			query(`sum by (user) (rate(`+usedAny+`[$__rate_interval]))`, "{{user}}"))).
		WithPanel(series("GPUs held by team", "GPU time held per second, stacked.", "short", 12, true,
			query(`sum by (team) (rate(gpumeter_container_gpu_held_seconds_total{`+fCtr+`}[$__rate_interval]))`, "{{team}}"))).
		WithPanel(series("GPUs used by team", "SM-weighted GPU time used per second, stacked.", "short", 12, true,
			query(`sum by (team) (rate(gpumeter_container_gpu_used_seconds_total{`+fCtr+`}[$__rate_interval]))`, "{{team}}"))).
		WithPanel(bars("Top containers", "The ten containers using the most GPU now.", "short",
			instant(`topk(10, sum by (Hostname, container, user) (rate(gpumeter_container_gpu_used_seconds_total{`+fCtr+`}[$__rate_interval])))`, "{{container}} ({{user}}, {{Hostname}})"))).
		WithPanel(bars("Efficiency by user", "Used over held GPU time over the dashboard's range.", "percentunit",
			instant(`sum by (user) (increase(gpumeter_container_gpu_used_seconds_total{`+fCtr+`}[$__range])) / (sum by (user) (increase(gpumeter_container_gpu_held_seconds_total{`+fCtr+`}[$__range])) > 0)`, "{{user}}"))).
		WithPanel(bars("Cost per hour by user", "What the selected users' GPUs cost per hour now at the list price.", "short",
			instant(`sum by (user, currency) (rate(gpumeter_container_gpu_allocated_seconds_total{`+fCtr+`}[$__rate_interval]) * on (Hostname, UUID) group_left (model) `+modelOf+` * on (Hostname, model) group_left (currency) `+gpuPrice+`)`, "{{user}} ({{currency}})")))

	gpuLegend := "{{Hostname}} GPU {{gpu}}"
	b = b.WithRow(dashboard.NewRowBuilder("GPUs")).
		WithPanel(series("Utilisation", "SM utilisation per GPU.", "percent", 12, false, query(`DCGM_FI_DEV_GPU_UTIL{`+fGPU+`}`, gpuLegend))).
		WithPanel(series("Memory used", "Frame buffer used per GPU.", "percentunit", 12, false,
			query(`DCGM_FI_DEV_FB_USED{`+fGPU+`} / (DCGM_FI_DEV_FB_USED{`+fGPU+`} + DCGM_FI_DEV_FB_FREE{`+fGPU+`})`, gpuLegend))).
		WithPanel(series("Power", "Power draw per GPU.", "watt", 12, false, query(`DCGM_FI_DEV_POWER_USAGE{`+fGPU+`}`, gpuLegend))).
		WithPanel(series("Temperature", "GPU temperature.", "celsius", 12, false, query(`DCGM_FI_DEV_GPU_TEMP{`+fGPU+`}`, gpuLegend))).
		WithPanel(heatmap.NewPanelBuilder().Title("Temperature across GPUs").Description("One row per GPU, coloured by its temperature.").
			Datasource(dsRef).Unit("celsius").Height(8).Span(24).Calculate(false).
			Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").Steps(64)).
			WithTarget(query(`max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP{`+fGPU+`})`, gpuLegend)))

	b = b.WithRow(dashboard.NewRowBuilder("Waste and queue")).
		WithPanel(bars("Waste GPU-hours by rule", "GPU-hours wasted by reported findings over the dashboard's range.", "short",
			instant(`sum by (rule) (increase(gpumeter_waste_gpu_hours_total{`+fHost+`}[$__range]))`, "{{rule}}"))).
		WithPanel(series("Queue depth", "Jobs of the GPU queue waiting, starting and running.", "short", 8, false,
			query(`sum by (state) (gpumeter_queue_jobs{`+fHost+`, state=~"queued|starting|running"})`, "{{state}}"))).
		WithPanel(series("Queue wait", "How long jobs waited from submission to start: median, 90th percentile and mean of the jobs that started.", "s", 8, false,
			query(`histogram_quantile(0.5, sum by (le) (rate(gpumeter_queue_wait_seconds_bucket{`+fHost+`}[$__rate_interval])))`, "median"),
			query(`histogram_quantile(0.9, sum by (le) (rate(gpumeter_queue_wait_seconds_bucket{`+fHost+`}[$__rate_interval])))`, "p90"),
			query(`sum(rate(gpumeter_queue_wait_seconds_sum{`+fHost+`}[$__rate_interval])) / sum(rate(gpumeter_queue_wait_seconds_count{`+fHost+`}[$__rate_interval]))`, "mean")))

	// The fleet's own series: gpumeter_fleet_nodes comes from the agent
	// that holds the scheduler lease only, and the leader series from
	// each agent, so these ignore the host variable.
	b = b.WithRow(dashboard.NewRowBuilder("Fleet nodes")).
		WithPanel(single("Nodes up", "Nodes of the fleet (queue.fleet) whose agent renews its ledger lease and that are not drained, from the scheduler's last pass.", "short", `max(gpumeter_fleet_nodes{state="up"})`).Span(6)).
		WithPanel(single("Nodes draining", "Nodes drained with gpumeter node drain: no new job starts there; running ones finish.", "short", `max(gpumeter_fleet_nodes{state="draining"})`).Span(6)).
		WithPanel(single("Nodes lost", "Nodes whose agent has been silent for longer than ledger.lease_takeover: their jobs went back to the queue.", "short", `max(gpumeter_fleet_nodes{state="lost"})`).Span(6)).
		WithPanel(single("Schedulers", "Agents that hold the fleet's scheduler lease: 1, or 0 for at most the takeover time after the scheduler died.", "short", `sum(gpumeter_fleet_scheduler_leader)`).Span(6)).
		// In a fleet each agent counts the starting and running jobs of
		// its own node.
		WithPanel(series("Jobs running per node", "Queue jobs running on each node.", "short", 12, true,
			query(`sum by (Hostname) (gpumeter_queue_jobs{`+fHost+`, state="running"})`, "{{Hostname}}"))).
		WithPanel(series("Utilisation per node", "Mean SM utilisation of each node's GPUs, against the 0.7 that queue.placement: target aims each GPU at (queue.target_utilization's default).", "percentunit", 12, false,
			query(`avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{`+fGPU+`}) / 100`, "{{Hostname}}"),
			query(`vector(0.7)`, "target")))

	return b.Build()
}
