package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumeter/gpumeter/internal/api/apitype"

	"github.com/gpumeter/gpumeter/internal/testenv"
)

// request is what a test server saw of one request.
type request struct {
	Method, Host, Path, Query, Auth, ContentType, Body string
}

// recorder serves answer to every request and keeps what it saw.
type recorder struct {
	seen   chan request
	answer func(w http.ResponseWriter, r *http.Request)
}

func newRecorder(answer func(w http.ResponseWriter, r *http.Request)) *recorder {
	return &recorder{seen: make(chan request, 16), answer: answer}
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec.seen <- request{r.Method, r.Host, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(body)}
	rec.answer(w, r)
}

func (rec *recorder) last(t *testing.T) request {
	t.Helper()
	select {
	case r := <-rec.seen:
		return r
	default:
		t.Fatal("the server saw no request")
		return request{}
	}
}

func answerJSON(v any) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
}

// socketServer serves h on a Unix socket in a fresh directory.
func socketServer(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	ln, path := testenv.ListenUnix(t)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, path
}

func TestClientUnixSocket(t *testing.T) {
	me := apitype.Whoami{User: "uid:1000", Role: "admin", Method: "socket", Name: "uid 1000"}
	rec := newRecorder(answerJSON(me))
	_, path := socketServer(t, rec)

	built, err := New(Options{URL: "unix://" + path})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Client{"zero value": {URL: "unix://" + path}, "New": built} {
		t.Run(name, func(t *testing.T) {
			got, err := c.Whoami(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(me, got); diff != "" {
				t.Errorf("whoami (-want +got):\n%s", diff)
			}
			want := request{Method: "GET", Host: unixHost, Path: "/api/v1/whoami"}
			if diff := cmp.Diff(want, rec.last(t)); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClientToken(t *testing.T) {
	rec := newRecorder(answerJSON(apitype.GPUsResponse{Node: "n1"}))
	srv := httptest.NewServer(rec)
	defer srv.Close()
	for _, tt := range []struct{ token, want string }{
		{"", ""},
		{"gpm_abc", "Bearer gpm_abc"},
	} {
		c := &Client{URL: srv.URL, Token: tt.token}
		if _, err := c.GPUs(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := rec.last(t).Auth; got != tt.want {
			t.Errorf("token %q: Authorization %q, want %q", tt.token, got, tt.want)
		}
	}
	if _, err := New(Options{URL: srv.URL, Token: "gpm_a\nX-Evil: 1"}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("a token with a line break: err %v, want one about the token", err)
	}
}

func TestClientCalls(t *testing.T) {
	stopped := apitype.StopResponse{ID: "0123456789abcdef", Name: "alice train", Stopped: true}
	rep := &apitype.WasteReport{Currency: "USD", Findings: []apitype.WasteFinding{{ID: "f1", Rule: "idle", Owner: "alice", Evidence: map[string]float64{"sm_percent": 0}}}, Totals: []apitype.WasteTotal{{Rule: apitype.WasteTotalKey, Findings: 1}}}
	events := apitype.AuditResponse{
		From:      time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC),
		To:        time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC),
		Events:    []apitype.AuditEvent{{Time: time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC), Kind: apitype.AuditKindAPI, Caller: "bob (token bob-1)", Role: "user", Action: "containers.stop", Target: "container x", Status: 403, Outcome: apitype.OutcomeDenied}},
		Truncated: true,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/containers/{id}/stop", answerJSON(stopped))
	mux.HandleFunc("GET /api/v1/waste", answerJSON(rep))
	mux.HandleFunc("GET /api/v1/audit", answerJSON(events))
	held := 1.5
	usage := &apitype.Usage{
		From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), By: "team", Currency: "USD",
		Rows:   []apitype.UsageRow{{Key: "nlp", GPUHoursAllocated: 2, GPUHoursHeld: &held, Efficiency: 0.25, Cost: 3.125}},
		Totals: apitype.UsageRow{Key: "TOTAL", GPUHoursAllocated: 2, GPUHoursHeld: &held, Efficiency: 0.25, Cost: 3.125},
		Basis:  "allocated", IdlePolicy: "pool", Notes: []string{"a note"},
	}
	usageJSON := indentJSON(t, usage)
	mux.HandleFunc("GET /api/v1/usage", func(w http.ResponseWriter, r *http.Request) {
		if f := r.URL.Query().Get("format"); f == "" || f == "json" {
			w.Header().Set("Content-Type", "application/json")
			w.Write(usageJSON)
			return
		}
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		io.WriteString(w, "user,gpu_hours\nalice,1\n")
	})
	rec := newRecorder(mux.ServeHTTP)
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := &Client{URL: srv.URL + "/", Token: "gpm_t"}
	ctx := context.Background()

	t.Run("stop", func(t *testing.T) {
		got, err := c.Stop(ctx, "alice train", apitype.StopRequest{Timeout: "30s", Reason: "idle for days"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stopped, got); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
		req := rec.last(t)
		want := request{Method: "POST", Host: req.Host, Path: "/api/v1/containers/alice train/stop", Auth: "Bearer gpm_t", ContentType: "application/json", Body: `{"timeout":"30s","reason":"idle for days"}`}
		if diff := cmp.Diff(want, req); diff != "" {
			t.Errorf("request (-want +got):\n%s", diff)
		}
		if _, err := c.Stop(ctx, "x", apitype.StopRequest{Timeout: "soon"}); err == nil || !strings.Contains(err.Error(), "timeout") {
			t.Errorf("bad timeout: err %v, want one about the timeout", err)
		}
	})
	t.Run("usage", func(t *testing.T) {
		got, err := c.Usage(ctx, url.Values{"by": {"team"}, "label": {"a=b", "c=d"}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(usage, got); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		if got, want := rec.last(t).Query, "by=team&label=a%3Db&label=c%3Dd"; got != want {
			t.Errorf("query %q, want %q", got, want)
		}
		// What Usage read encodes as the agent wrote it.
		if again := indentJSON(t, got); !bytes.Equal(again, usageJSON) {
			t.Errorf("written out again:\n%s\nwant\n%s", again, usageJSON)
		}
		if _, err := c.Usage(ctx, url.Values{"format": {"csv"}}); err == nil || !strings.Contains(err.Error(), "UsageDocument") {
			t.Errorf("Usage with format=csv: err %v, want one pointing to UsageDocument", err)
		}
		select {
		case r := <-rec.seen:
			t.Errorf("Usage with format=csv asked the agent: %+v", r)
		default:
		}
	})
	t.Run("usage document", func(t *testing.T) {
		doc, err := c.UsageDocument(ctx, url.Values{"by": {"team"}, "label": {"a=b", "c=d"}, "format": {"csv"}})
		if err != nil {
			t.Fatal(err)
		}
		if string(doc.Body) != "user,gpu_hours\nalice,1\n" || doc.ContentType != "text/csv; charset=utf-8" {
			t.Errorf("usage: %q as %q", doc.Body, doc.ContentType)
		}
		if got, want := rec.last(t).Query, "by=team&format=csv&label=a%3Db&label=c%3Dd"; got != want {
			t.Errorf("query %q, want %q", got, want)
		}
	})
	t.Run("waste", func(t *testing.T) {
		got, err := c.Waste(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(rep, got); diff != "" {
			t.Errorf("waste (-want +got):\n%s", diff)
		}
		rec.last(t)
	})
	t.Run("audit", func(t *testing.T) {
		got, err := c.Audit(ctx, url.Values{"since": {"7d"}, "limit": {"5"}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(events, got); diff != "" {
			t.Errorf("audit (-want +got):\n%s", diff)
		}
		if got, want := rec.last(t).Query, "limit=5&since=7d"; got != want {
			t.Errorf("query %q, want %q", got, want)
		}
	})
}

func TestClientErrorAnswers(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        *StatusError
		wantMsg     []string
	}{
		{"api error", 403, "application/json", `{"code":"forbidden","message":"users may stop only their own containers"}`,
			&StatusError{Status: 403, Code: "forbidden", Message: "users may stop only their own containers"},
			[]string{"403 Forbidden", "users may stop only their own containers"}},
		{"unauthorized", 401, "application/json", `{"code":"bad_token","message":"the token is not accepted"}`,
			&StatusError{Status: 401, Code: "bad_token", Message: "the token is not accepted"},
			[]string{"401 Unauthorized", "the token is not accepted"}},
		{"proxy page", 502, "text/html", "<html><head><title>502 Bad Gateway</title></head>\n<body>nginx</body></html>",
			&StatusError{Status: 502, Body: "<html><head><title>502 Bad Gateway</title></head> <body>nginx</body></html>"},
			[]string{"502 Bad Gateway", "not with an API error", "<title>502 Bad Gateway</title>"}},
		{"json that is not an error", 500, "application/json", `[1, 2]`,
			&StatusError{Status: 500, Body: "[1, 2]"},
			[]string{"500", "[1, 2]"}},
		{"terminal escapes", 500, "text/plain", "boom\x1b[2J\x1b]0;owned\x07 \u202edone",
			&StatusError{Status: 500, Body: "boom [2J ]0;owned done"},
			[]string{"boom [2J ]0;owned"}},
		{"empty", 503, "", "",
			&StatusError{Status: 503},
			[]string{"503 Service Unavailable with no body"}},
		{"long", 500, "text/plain", strings.Repeat("é", 300),
			&StatusError{Status: 500, Body: strings.Repeat("é", 100) + "…"},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			_, err := (&Client{URL: srv.URL}).Containers(context.Background())
			var se *StatusError
			if !errors.As(err, &se) {
				t.Fatalf("err %v, want a *StatusError", err)
			}
			if diff := cmp.Diff(tt.want, se); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			if got, want := IsUnauthorized(err), tt.status == 401; got != want {
				t.Errorf("IsUnauthorized = %v, want %v", got, want)
			}
			if got, want := IsForbidden(err), tt.status == 403; got != want {
				t.Errorf("IsForbidden = %v, want %v", got, want)
			}
		})
	}
}

func TestClientBadAnswers(t *testing.T) {
	tests := []struct {
		name, contentType, body, want string
	}{
		{"html", "text/html", "<html>hello</html>", "is this a gpumeter agent?"},
		{"broken json", "application/json", `{"node": "n1",`, "not JSON"},
		{"wrong shape", "application/json", `{"containers": 3}`, "unexpected answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			_, err := (&Client{URL: srv.URL}).Containers(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one saying %q", err, tt.want)
			}
		})
	}
	t.Run("too large", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/csv")
			chunk := strings.Repeat("x", 1<<20)
			for range maxAnswer>>20 + 1 {
				io.WriteString(w, chunk)
			}
		}))
		defer srv.Close()
		_, err := (&Client{URL: srv.URL}).UsageDocument(context.Background(), nil)
		if err == nil || !strings.Contains(err.Error(), "larger than 64 MiB") {
			t.Errorf("err %v, want one saying the answer is too large", err)
		}
	})
	t.Run("redirect", func(t *testing.T) {
		srv := httptest.NewServer(http.RedirectHandler("https://elsewhere.example/api/v1/containers", http.StatusMovedPermanently))
		defer srv.Close()
		_, err := (&Client{URL: srv.URL}).Containers(context.Background())
		if err == nil || !strings.Contains(err.Error(), "redirected to https://elsewhere.example") || strings.Contains(err.Error(), "running?") {
			t.Errorf("err %v, want one naming the redirect", err)
		}
	})
}

func TestClientUnreachable(t *testing.T) {
	dir := t.TempDir()
	// A port that was just free is most likely still free.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := "http://" + ln.Addr().String()
	ln.Close()
	tests := []struct {
		url  string
		want []string
	}{
		{free, []string{"at " + free, "is `gpumeter serve` running?", "--url"}},
		{"unix://" + dir + "/api.sock", []string{"on the socket " + dir + "/api.sock", "is `gpumeter serve` running?", "--url"}},
	}
	for _, tt := range tests {
		_, err := (&Client{URL: tt.url}).GPUs(context.Background())
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err %v, want one saying %q", tt.url, err, w)
			}
		}
	}
}

func TestClientBadURL(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"ftp://host", "want http://HOST:PORT"},
		{"localhost:9400", "want http://HOST:PORT"},
		{"unix://", "want unix:///path"},
		{"http://", "no host"},
		{"https://alice:secret@host", "no user or password"},
		{"http://host?x=1", "no ? or #"},
	} {
		_, err := New(Options{URL: tt.url})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want one saying %q", tt.url, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", tt.url, err)
		}
		if _, err := (&Client{URL: tt.url}).GPUs(context.Background()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s, zero value: err %v, want one saying %q", tt.url, err, tt.want)
		}
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestClientTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	peers := make(chan int, 4)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peers <- len(r.TLS.PeerCertificates)
		answerJSON(apitype.GPUsResponse{Node: "tls"})(w, r)
	})
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writePEM(t, ca, "CERTIFICATE", srv.Certificate().Raw)
	// The server's own key pair serves as a client certificate.
	cert, key := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, cert, "CERTIFICATE", srv.Certificate().Raw)
	der, err := x509.MarshalPKCS8PrivateKey(srv.TLS.Certificates[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, key, "PRIVATE KEY", der)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("trusted CA", func(t *testing.T) {
		c, err := New(Options{URL: srv.URL, CAFile: ca})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.GPUs(context.Background()); err != nil || got.Node != "tls" {
			t.Fatalf("GPUs: %+v, %v", got, err)
		}
		if n := <-peers; n != 0 {
			t.Errorf("the client showed %d certificates, want none", n)
		}
	})
	t.Run("client certificate", func(t *testing.T) {
		c, err := New(Options{URL: srv.URL, CAFile: ca, CertFile: cert, KeyFile: key})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GPUs(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := <-peers; n != 1 {
			t.Errorf("the client showed %d certificates, want 1", n)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		c, err := New(Options{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GPUs(context.Background())
		if err == nil || !strings.Contains(err.Error(), "not trusted") || !strings.Contains(err.Error(), "--ca-file") {
			t.Errorf("err %v, want one saying the certificate is not trusted", err)
		}
	})
	t.Run("http to https", func(t *testing.T) {
		_, err := (&Client{URL: strings.Replace(srv.URL, "https:", "http:", 1)}).GPUs(context.Background())
		if !hasStatus(err, http.StatusBadRequest) {
			t.Errorf("err %v, want the server's 400", err)
		}
	})

	for _, tt := range []struct {
		name string
		o    Options
		want []string
	}{
		{"missing CA", Options{CAFile: filepath.Join(dir, "nope.pem")}, []string{"CA file", "nope.pem"}},
		{"CA not PEM", Options{CAFile: notPEM}, []string{"CA file " + notPEM, "no PEM certificate"}},
		{"cert without key", Options{CertFile: cert}, []string{cert, "no key file"}},
		{"key without cert", Options{KeyFile: key}, []string{key, "no certificate file"}},
		{"bad cert", Options{CertFile: notPEM, KeyFile: key}, []string{"client certificate " + notPEM}},
		{"wrong key", Options{CertFile: cert, KeyFile: ca}, []string{"key " + ca}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.URL = srv.URL
			_, err := New(tt.o)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want one saying %q", err, w)
				}
			}
		})
	}
}

// TestSocketDenied: a socket the file mode keeps the caller from is named,
// with what to do instead. Root passes every file mode, so the error is
// made as connect(2) gives it to anyone else.
func TestSocketDenied(t *testing.T) {
	denied := &url.Error{Op: "Get", URL: "http://gpumeter/api/v1/gpus", Err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}}
	err := reachError(context.Background(), endpoint{socket: "/var/lib/gpumeter/api.sock"}, time.Second, denied)
	if !IsSocketDenied(err) {
		t.Fatalf("err %v, want a *SocketDeniedError", err)
	}
	for _, w := range []string{"/var/lib/gpumeter/api.sock: permission denied", "sudo", "--url", "GPUMETER_TOKEN", "gpumeter token create"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err %q does not say %q", err, w)
		}
	}
}

// indentJSON is v as the agent writes a report: indented JSON and a
// newline.
func indentJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
