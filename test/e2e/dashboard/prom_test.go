package dashboard

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

// prom is a real Prometheus server scraping gpumeter agents every second
// and evaluating the shipped rules every second.
type prom struct {
	api string
}

// startProm runs Debian's prometheus against targets (host:port) under
// the job name the rules expect, with deploy/prometheus/gpumeter-rules.yml
// loaded.
func startProm(t *testing.T, targets ...string) *prom {
	t.Helper()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: gpumeter
    static_configs:
      - targets: [%s]
`, harness.RepoFile("deploy/prometheus/gpumeter-rules.yml"), strings.Join(quoted, ", "))
	return &prom{api: harness.StartPrometheus(t, cfg)}
}

// series is one element of a query's answer.
type series struct {
	Metric map[string]string `json:"metric"`
	// Value is an instant answer's [time, "value"].
	Value []any `json:"value"`
}

// get asks the HTTP API path with params and decodes data into out,
// failing with Prometheus' own error when the query is refused.
func (p *prom) get(path string, params url.Values, out any) error {
	resp, err := http.Get(p.api + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, params.Encode(), body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// instant evaluates q now and returns the series of its answer (a
// scalar answer counts as one).
func (p *prom) instant(q string) ([]series, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType == "scalar" {
		return []series{{}}, nil
	}
	var out []series
	err := json.Unmarshal(data.Result, &out)
	return out, err
}

// rangeQuery evaluates q over the last span at step and returns its series.
func (p *prom) rangeQuery(q string, span, step time.Duration) ([]series, error) {
	now := time.Now()
	var data struct {
		Result []series `json:"result"`
	}
	err := p.get("/api/v1/query_range", url.Values{"query": {q},
		"start": {strconv.FormatInt(now.Add(-span).Unix(), 10)}, "end": {strconv.FormatInt(now.Unix(), 10)},
		"step": {strconv.Itoa(int(step.Seconds()))}}, &data)
	return data.Result, err
}

// waitFor polls q until it has an answer, or fails the test.
func (p *prom) waitFor(t *testing.T, q string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	var got []series
	for time.Now().Before(deadline) {
		if got, err = p.instant(q); err == nil && len(got) > 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: no answer within %s (last error %v)", q, d, err)
}
