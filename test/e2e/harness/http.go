package harness

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// GetAs GETs url with token as its bearer token ("" sends none).
func GetAs(url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return http.DefaultClient.Do(req)
}

// Get GETs url as the test admin and returns the body of its 200 answer.
func Get(t *testing.T, url string) string {
	t.Helper()
	status, _, body := Fetch(t, url)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s: %s", url, status, http.StatusText(status), body)
	}
	return string(body)
}

// Fetch GETs url as the test admin and returns the status, content type
// and body.
func Fetch(t *testing.T, url string) (int, string, []byte) {
	t.Helper()
	resp, err := GetAs(url, adminToken)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// Metrics is a parsed scrape: name{labels} -> value.
type Metrics map[string]float64

// Series parses a text exposition into name{labels} -> value.
func Series(text string) Metrics {
	out := Metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// Sum adds up every series of the metric name, whatever its labels.
func (m Metrics) Sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// Has reports whether the scrape holds a series of the metric name.
func (m Metrics) Has(name string) bool {
	for k := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			return true
		}
	}
	return false
}

// LastTick is when the latest sample the scrape shows was taken, by the
// agent's clock.
func (m Metrics) LastTick() time.Time {
	return time.Unix(0, int64(m.Sum("gpumeter_last_tick_timestamp_seconds")*1e9))
}

// Scrape reads the agent's /metrics.
func (a *Agent) Scrape(t *testing.T) Metrics {
	t.Helper()
	return Series(Get(t, a.URL+"/metrics"))
}

// NextFlush waits for the agent to finish a ledger flush and returns the
// scrape that shows it; the next flush starts one interval after this one
// began.
func (a *Agent) NextFlush(t *testing.T) Metrics {
	t.Helper()
	before := a.Scrape(t).Sum("gpumeter_ledger_flushes_total")
	var m Metrics
	WaitFor(t, 5*time.Second, "a ledger flush", func() bool {
		m = a.Scrape(t)
		return m.Sum("gpumeter_ledger_flushes_total") > before
	})
	return m
}

// NextTicks waits until the agent has taken n samples more than it had
// when called, and returns the scrape that shows them: proof that time
// passed in the agent, as its own clock counts it, whatever the load on
// the machine.
func (a *Agent) NextTicks(t *testing.T, n int) Metrics {
	t.Helper()
	before := a.Scrape(t).Sum("gpumeter_ticks_total")
	var m Metrics
	WaitFor(t, 30*time.Second, strconv.Itoa(n)+" more samples", func() bool {
		m = a.Scrape(t)
		return m.Sum("gpumeter_ticks_total") >= before+float64(n)
	})
	return m
}
