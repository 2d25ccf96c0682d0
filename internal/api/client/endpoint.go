package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// unixHost is the host name of requests sent over a Unix socket: the
// socket decides where they go, the name only fills the Host header.
const unixHost = "gpumeter"

// endpoint is where a Client's URL leads.
type endpoint struct {
	base   string // scheme://host[/prefix] that paths are added to
	socket string // the socket's path for a unix:// URL
	where  string // how errors name the agent
}

func parseURL(raw string) (endpoint, error) {
	if raw == "" {
		raw = DefaultURL
	}
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("agent URL %q: %w", raw, err)
	}
	if u.User != nil {
		return endpoint{}, fmt.Errorf("agent URL %q: the agent takes no user or password in its URL; set GPUMETER_TOKEN", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return endpoint{}, fmt.Errorf("agent URL %q: want no ? or # part", raw)
	}
	switch u.Scheme {
	case "unix":
		p := u.Host + u.Path
		if p == "" {
			return endpoint{}, fmt.Errorf("agent URL %q: want unix:///path/to/api.sock", raw)
		}
		return endpoint{base: "http://" + unixHost, socket: p, where: "on the socket " + p}, nil
	case "http", "https":
		if u.Host == "" {
			return endpoint{}, fmt.Errorf("agent URL %q: no host", raw)
		}
		base := u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
		return endpoint{base: base, where: "at " + base}, nil
	}
	return endpoint{}, fmt.Errorf("agent URL %q: want http://HOST:PORT, https://HOST:PORT or unix:///path/to/api.sock", raw)
}

// transport is a transport that reaches ep, with a TLS config to add to.
func transport(ep endpoint) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if ep.socket != "" {
		var d net.Dialer
		path := ep.socket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}
		tr.Proxy = nil
	}
	return tr
}

// redirectError is an answer that redirected elsewhere.
type redirectError struct{ msg string }

func (e *redirectError) Error() string { return e.msg }

func httpClient(ep endpoint, tr *http.Transport) *http.Client {
	return &http.Client{
		Transport: tr,
		// The agent never redirects. Whatever does (a proxy sending http
		// to https, say) would turn a stop into a GET, so it is named
		// instead of followed.
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			return &redirectError{fmt.Sprintf("the agent %s redirected to %s: give that URL instead", ep.where, req.URL.Redacted())}
		},
	}
}
