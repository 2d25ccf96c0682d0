package servertest

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/auth"
)

// Browser sends requests as a browser signed in by a session does: the
// cookie and, when set, the CSRF header; no Authorization.
type Browser struct {
	client *http.Client
	URL    string
	Cookie string
	CSRF   string
}

func (b Browser) Do(t *testing.T, method, path, body string) Answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.Cookie != "" {
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: b.Cookie})
	}
	if b.CSRF != "" {
		req.Header.Set(auth.CSRFHeader, b.CSRF)
	}
	client := b.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Answer{resp.StatusCode, resp.Header, data}
}

// SessionCookie is the session cookie a sets, or nil.
func SessionCookie(a Answer) *http.Cookie {
	for _, c := range (&http.Response{Header: a.Header}).Cookies() {
		if c.Name == auth.SessionCookie {
			return c
		}
	}
	return nil
}

// SignIn opens a session as caller, with its token in the Authorization
// header, and checks the cookie it gets.
func (f *Fixture) SignIn(t *testing.T, caller string) (Browser, apitype.Session) {
	t.Helper()
	a := f.Do(t, caller, http.MethodPost, "/api/v1/session", nil, "")
	if a.Status != http.StatusOK {
		t.Fatalf("sign in as %s: %d %s", caller, a.Status, a.Body)
	}
	var ses apitype.Session
	a.Decode(t, &ses)
	c := SessionCookie(a)
	if c == nil {
		t.Fatalf("sign in set no %s cookie: %v", auth.SessionCookie, a.Header["Set-Cookie"])
	}
	return Browser{URL: f.URL, Cookie: c.Value}, ses
}
