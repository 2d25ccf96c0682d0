package metering

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestServeScrapesBetweenTicksAreOne: the agent renders /metrics once per
// tick, so with an hour between ticks every scrape, plain or gzipped,
// serves the same bytes, the exporter's own Go and process metrics
// included (they would move if a scrape rendered them).
func TestServeScrapesBetweenTicksAreOne(t *testing.T) {
	a := harness.Serve(t, nil, "--sim", harness.RepoFile("testdata/shared.yaml"), "--interval", "1h")
	var first string
	harness.WaitFor(t, 30*time.Second, "the first tick on /metrics", func() bool {
		first = harness.Get(t, a.URL+"/metrics") // gzipped: Go's client asks for it and unzips
		return strings.Contains(first, "gpumeter_ticks_total{")
	})
	if !strings.Contains(first, "\ngo_memstats_alloc_bytes ") || !strings.Contains(first, "\nprocess_resident_memory_bytes ") {
		t.Fatal("the scrape lacks the Go and process metrics")
	}
	for i := range 5 {
		gzipped := harness.Get(t, a.URL+"/metrics")
		plain := getPlain(t, a.URL+"/metrics")
		if gzipped != first || plain != first {
			t.Fatalf("scrape %d between two ticks differs from the first (gzipped same: %v, plain same: %v):\n%s",
				i, gzipped == first, plain == first, harness.DiffLines(first, plain))
		}
	}
}

// getPlain GETs url asking for no compression and checks it got none.
func getPlain(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+harness.AdminToken())
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("GET %s: %d, Content-Encoding %q; want 200 and none", url, resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
