package metering

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestPrometheusScrapes runs a real Prometheus server against the agent
// and asks it the questions a Grafana dashboard asks: dcgm-exporter's
// per-GPU series, and gpumeter's per-user split through PromQL.
func TestPrometheusScrapes(t *testing.T) {
	a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "200ms")

	target := strings.TrimPrefix(a.URL, "http://")
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: gpumeter\n    static_configs:\n      - targets: [%q]\n", target)
	api := harness.StartPrometheus(t, cfg)

	query := func(q string) (map[string]float64, error) {
		resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return nil, err
		}
		if body.Status != "success" {
			return nil, fmt.Errorf("query %s: %s", q, body.Error)
		}
		out := map[string]float64{}
		for _, r := range body.Data.Result {
			v, _ := strconv.ParseFloat(fmt.Sprint(r.Value[1]), 64)
			key := r.Metric["user"]
			if key == "" {
				key = r.Metric["gpu"]
			}
			out[key] = v
		}
		return out, nil
	}
	// waitQuery polls until the query's answer satisfies ok.
	waitQuery := func(q string, ok func(map[string]float64) bool) map[string]float64 {
		t.Helper()
		var last map[string]float64
		var lastErr error
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			last, lastErr = query(q)
			if lastErr == nil && ok(last) {
				return last
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Fatalf("query %s: last answer %v, error %v", q, last, lastErr)
		return nil
	}

	waitQuery(`up{job="gpumeter"}`, func(m map[string]float64) bool { return len(m) == 1 && m[""] == 1 })

	// dcgm-exporter's names and labels, as its dashboard queries them.
	util := waitQuery(`avg by (gpu) (DCGM_FI_DEV_GPU_UTIL{Hostname="lab-1", modelName="NVIDIA H100 80GB HBM3"})`, func(m map[string]float64) bool { return len(m) == 2 })
	if util["0"] != 80 || util["1"] != 50 {
		t.Errorf("DCGM_FI_DEV_GPU_UTIL by gpu = %v, want 0:80 1:50", util)
	}
	power := waitQuery(`sum(DCGM_FI_DEV_POWER_USAGE)`, func(m map[string]float64) bool { return len(m) == 1 })
	if power[""] != 720 {
		t.Errorf("total power = %v W, want 420 + 300", power)
	}

	// gpumeter's split: per user now, and counters that rate() can use.
	share := waitQuery(`sum by (user) (gpumeter_container_gpu_allocation_share)`, func(m map[string]float64) bool { return len(m) == 3 })
	if share["alice"] != 0.5 || share["bob"] != 0.5 || share["carol"] != 1 {
		t.Errorf("allocation share by user = %v, want alice 0.5, bob 0.5, carol 1", share)
	}
	// Rates need a few scrapes before they settle; poll until they do.
	// alice uses 60 % of GPU 0 and bob 20 %; dave 50 % of GPU 1 outside
	// containers.
	near := func(got, want float64) bool { return got > want*0.9 && got < want*1.1 }
	waitQuery(`sum by (user) (rate(gpumeter_container_gpu_used_seconds_total[5s]))`, func(m map[string]float64) bool {
		return near(m["alice"], 0.6) && near(m["bob"], 0.2) && m["carol"] == 0
	})
	waitQuery(`sum by (user) (rate(gpumeter_host_gpu_used_seconds_total[5s]))`, func(m map[string]float64) bool {
		return near(m["dave"], 0.5)
	})
	waitQuery(`sum by (user) (rate(gpumeter_container_gpu_allocated_seconds_total[5s]))`, func(m map[string]float64) bool {
		return near(m["alice"], 0.5) && near(m["bob"], 0.5) && near(m["carol"], 1)
	})
}
