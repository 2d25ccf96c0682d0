package api

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// TestServeOversizedRequestsAnswerJSON: a 40 KiB URL or header is refused
// with the API's JSON 431, not net/http's text; a request line net/http
// cannot parse at all still gets its plain 400, as README says.
func TestServeOversizedRequestsAnswerJSON(t *testing.T) {
	a := harness.Serve(t, nil, "--demo", "--interval", "100ms")
	big := strings.Repeat("x", 40<<10)
	check := func(name string, req *http.Request) {
		t.Helper()
		req.Header.Set("Authorization", "Bearer "+harness.AdminToken())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var e apitype.Error
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(body, &e) != nil || e.Code != "headers_too_large" || !strings.Contains(e.Message, "over the limit of 32 KiB") {
			t.Errorf("%s: %d %s %s; want a JSON 431 headers_too_large", name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	req, _ := http.NewRequest("GET", a.URL+"/api/v1/usage?by=user&x="+big, nil)
	check("40 KiB URL", req)
	req, _ = http.NewRequest("GET", a.URL+"/api/v1/containers", nil)
	req.Header.Set("X-Padding", big)
	check("40 KiB header", req)
	req, _ = http.NewRequest("GET", a.URL+"/metrics", nil)
	req.Header.Set("X-Padding", big)
	check("40 KiB header on /metrics", req)

	// Within the limit, all is as before.
	if status, _, body := harness.Fetch(t, a.URL+"/api/v1/containers"); status != http.StatusOK {
		t.Errorf("a normal request: %d %s", status, body)
	}

	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(a.URL, "http://"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("GARBAGE\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 400") {
		t.Errorf("a malformed request line: %q, %v; want net/http's 400", status, err)
	}
}
