// Package client is the typed client of the agent's API, which the
// command line and other tools use: each call returns the apitype body
// it fetched, or an error that says what to do. It links none of the
// server's code. Resolve finds the agent, token and TLS files a caller
// means from its flags, the environment and the client config file.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
)

// DefaultURL is where the agent listens by default.
const DefaultURL = "http://localhost:9400"

// maxAnswer bounds what the client reads of one answer.
const maxAnswer = 64 << 20

// How long a call may take. Reading the ledger over a long window takes
// longer than reading the live tick.
const (
	liveTimeout   = 30 * time.Second
	ledgerTimeout = 2 * time.Minute
	// stopSlack is added to a stop's grace period: Docker answers once
	// the container is gone, which is at most the grace period and the
	// kill after it, and the agent answers within apitype.StopMargin of
	// the grace.
	stopSlack = apitype.StopMargin + 10*time.Second
)

// Client talks to the agent's API. Its zero value talks to DefaultURL
// without credentials.
type Client struct {
	// URL is the agent: http://host:port, https://host:port or
	// unix:///path/to/api.sock; "" means DefaultURL.
	URL string
	// Token is sent as a bearer token; "" sends none, which the agent
	// accepts only on its socket from root and its own user.
	Token string
	// HTTP sends the requests; nil means a client that reaches URL,
	// sockets included, trusting the system's certificate authorities.
	// A client of one's own must be able to reach URL itself.
	HTTP *http.Client
	// Answered, when not nil, is told of every answer from the agent,
	// before the call returns: the node it meters and its warnings.
	Answered func(Answer)
}

// Answer is what an answer says besides its body.
type Answer struct {
	Status int
	// Node is the node the agent meters; "" when it did not say (an
	// agent older than NodeHeader, or a refusal).
	Node string
	// Warnings are what the agent ignored in the request, made safe to
	// print.
	Warnings []string
}

// Options are what New builds a client from.
type Options struct {
	URL   string // as Client.URL
	Token string // as Client.Token
	// CAFile is a PEM bundle of the authorities an https agent's
	// certificate is checked against instead of the system's.
	CAFile string
	// CertFile and KeyFile are the client certificate (PEM) shown to an
	// https agent that maps certificates to users.
	CertFile, KeyFile string
}

// New checks o and builds a client from it. A URL the client cannot
// use, or a CA, certificate or key file that does not load, is an error
// naming it.
func New(o Options) (*Client, error) {
	ep, err := parseURL(o.URL)
	if err != nil {
		return nil, err
	}
	if err := checkToken(o.Token); err != nil {
		return nil, err
	}
	tr := transport(ep)
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", o.CAFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	switch {
	case o.CertFile != "" && o.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s, key %s: %w", o.CertFile, o.KeyFile, err)
		}
		tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
	case o.CertFile != "":
		return nil, fmt.Errorf("client certificate %s: no key file given for it", o.CertFile)
	case o.KeyFile != "":
		return nil, fmt.Errorf("client key %s: no certificate file given for it", o.KeyFile)
	}
	return &Client{URL: o.URL, Token: o.Token, HTTP: httpClient(ep, tr)}, nil
}

// checkToken refuses a token that cannot be a header value, so that the
// mistake is named rather than reported as an unreachable agent.
func checkToken(tok string) error {
	for _, r := range tok {
		if r < 0x21 || r > 0x7e {
			return errors.New("token: has spaces, line breaks or other characters no token has")
		}
	}
	return nil
}

// Whoami fetches /api/v1/whoami: who the agent takes the caller for.
func (c *Client) Whoami(ctx context.Context) (apitype.Whoami, error) {
	var out apitype.Whoami
	err := c.getJSON(ctx, "/api/v1/whoami", nil, liveTimeout, &out)
	return out, err
}

// Containers fetches /api/v1/containers.
func (c *Client) Containers(ctx context.Context) (apitype.ContainersResponse, error) {
	var out apitype.ContainersResponse
	err := c.getJSON(ctx, "/api/v1/containers", nil, liveTimeout, &out)
	return out, err
}

// GPUs fetches /api/v1/gpus.
func (c *Client) GPUs(ctx context.Context) (apitype.GPUsResponse, error) {
	var out apitype.GPUsResponse
	err := c.getJSON(ctx, "/api/v1/gpus", nil, liveTimeout, &out)
	return out, err
}

// Snapshot fetches /api/v1/snapshot: the GPUs, containers, live waste
// findings and queue of one tick, as the caller may see them.
func (c *Client) Snapshot(ctx context.Context) (apitype.Snapshot, error) {
	var out apitype.Snapshot
	err := c.getJSON(ctx, "/api/v1/snapshot", nil, liveTimeout, &out)
	return out, err
}

// Usage fetches the usage report that q asks for from /api/v1/usage: the
// parameters by, since, from, to, user, team, label (k=v, repeatable) and
// node, with no format or format=json.
func (c *Client) Usage(ctx context.Context, q url.Values) (*apitype.Usage, error) {
	if f := q.Get("format"); f != "" && f != "json" {
		return nil, fmt.Errorf("format: Usage reads the report as JSON, not %s; UsageDocument fetches the others", f)
	}
	var out apitype.Usage
	if err := c.getJSON(ctx, "/api/v1/usage", q, ledgerTimeout, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Document is an answer in the format it was asked for, as the agent
// rendered it.
type Document struct {
	ContentType string
	Body        []byte
}

// UsageDocument fetches a usage report from /api/v1/usage with the
// parameters q, rendered by the agent in the format q asks for (table,
// csv, json or focus): a FOCUS export, for one, needs the ledger's
// records, which only the agent has.
func (c *Client) UsageDocument(ctx context.Context, q url.Values) (Document, error) {
	body, ct, err := c.do(ctx, http.MethodGet, "/api/v1/usage", q, nil, ledgerTimeout)
	return Document{ContentType: ct, Body: body}, err
}

// Waste fetches the agent's live waste findings from /api/v1/waste.
func (c *Client) Waste(ctx context.Context) (*apitype.WasteReport, error) {
	var out apitype.WasteReport
	if err := c.getJSON(ctx, "/api/v1/waste", nil, liveTimeout, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Audit fetches audit events from /api/v1/audit with the parameters q:
// since, from, to and limit.
func (c *Client) Audit(ctx context.Context, q url.Values) (apitype.AuditResponse, error) {
	var out apitype.AuditResponse
	err := c.getJSON(ctx, "/api/v1/audit", q, ledgerTimeout, &out)
	return out, err
}

// Stop asks the agent to stop the container id (an ID, a prefix of 12 or
// more of it, or a name).
func (c *Client) Stop(ctx context.Context, id string, req apitype.StopRequest) (apitype.StopResponse, error) {
	var out apitype.StopResponse
	grace, err := apitype.ParseStop(req)
	if err != nil {
		return out, err
	}
	path := "/api/v1/containers/" + url.PathEscape(id) + "/stop"
	body, ct, err := c.do(ctx, http.MethodPost, path, nil, req, grace+stopSlack)
	if err != nil {
		return out, err
	}
	err = decode(path, body, ct, &out)
	return out, err
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, timeout time.Duration, out any) error {
	body, ct, err := c.do(ctx, http.MethodGet, path, q, nil, timeout)
	if err != nil {
		return err
	}
	return decode(path, body, ct, out)
}

func decode(path string, body []byte, contentType string, out any) error {
	if !isJSON(contentType) {
		return fmt.Errorf("%s: the answer is %s, not JSON: is this a gpumeter agent? It begins %q", path, contentType, snippet(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Errorf("%s: the agent's answer is not JSON at byte %d", path, syn.Offset)
		}
		return fmt.Errorf("%s: unexpected answer: %w", path, err)
	}
	return nil
}

// do sends one request and returns the body of a 200 answer; any other
// answer is a *StatusError.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in any, timeout time.Duration) ([]byte, string, error) {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.send(ctx, callCtx, method, path, q, in, timeout)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, "", fmt.Errorf("read the agent's answer to %s: %w", path, err)
	}
	if len(body) > maxAnswer {
		return nil, "", fmt.Errorf("the agent's answer to %s is larger than %d MiB", path, maxAnswer>>20)
	}
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode != http.StatusOK {
		return nil, "", statusError(resp.StatusCode, ct, body)
	}
	return body, ct, nil
}

// send sends one request under callCtx and returns the agent's answer,
// whatever its status; the caller closes its body. ctx is the caller's
// own, and timeout what callCtx adds to it, for saying why no answer came.
func (c *Client) send(ctx, callCtx context.Context, method, path string, q url.Values, in any, timeout time.Duration) (*http.Response, error) {
	ep, err := parseURL(c.URL)
	if err != nil {
		return nil, err
	}
	if err := checkToken(c.Token); err != nil {
		return nil, err
	}
	u := ep.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(callCtx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		tr := transport(ep)
		// A client made for one call keeps no connections open after it.
		tr.DisableKeepAlives = true
		hc = httpClient(ep, tr)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, reachError(ctx, ep, timeout, err)
	}
	if c.Answered != nil {
		a := Answer{Status: resp.StatusCode, Node: Clean(resp.Header.Get(apitype.NodeHeader))}
		for _, w := range resp.Header.Values(apitype.WarningHeader) {
			a.Warnings = append(a.Warnings, Clean(w))
		}
		c.Answered(a)
	}
	return resp, nil
}

// reachError says why a request got no answer, and what to do about it.
func reachError(ctx context.Context, ep endpoint, timeout time.Duration, err error) error {
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var re *redirectError
	switch {
	case errors.As(err, &re):
		return re
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("the agent %s did not answer within %s", ep.where, timeout)
	case errors.As(err, &cve):
		return fmt.Errorf("the agent's certificate %s is not trusted (--ca-file or GPUMETER_CA_FILE names the authority that signed it): %w", ep.where, cve.Err)
	case errors.As(err, &rhe):
		return fmt.Errorf("the agent %s does not speak TLS: use http:// (%w)", ep.where, err)
	case ep.socket != "" && errors.Is(err, syscall.EACCES):
		return &SocketDeniedError{Path: ep.socket}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("reach the agent %s (is `gpumeter serve` running? --url or GPUMETER_URL names another agent): %w", ep.where, err)
}

// SocketDeniedError is the agent's socket refusing the caller by its file
// permissions: only root and the agent's own user may connect.
type SocketDeniedError struct {
	Path string
}

func (e *SocketDeniedError) Error() string {
	return fmt.Sprintf("the agent's socket %s: permission denied: only root and the agent's own user may use it; run this with sudo, or use a token over the agent's listen address: GPUMETER_TOKEN=gpm_… and --url http(s)://HOST:PORT (an admin makes a token with `gpumeter token create`)", e.Path)
}

// IsSocketDenied reports whether err is a *SocketDeniedError.
func IsSocketDenied(err error) bool {
	var e *SocketDeniedError
	return errors.As(err, &e)
}

// StatusError is an answer from the agent other than 200 OK.
type StatusError struct {
	Status int // the HTTP status
	// Code and Message are the API's error (an Error); both are empty
	// when the answer was not one, a proxy's error page say.
	Code    string
	Message string
	// Reason, Field and State are what a job request's refusal (code
	// refused) or a conflict adds: the rule broken, the request field at
	// fault, the state of the job.
	Reason, Field, State string
	// Body is the start of an answer that was not an API error, made
	// safe to print.
	Body string
}

func (e *StatusError) Error() string {
	status := fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	switch {
	case e.Message != "":
		return "agent answered " + status + ": " + e.Message
	case e.Code != "":
		return "agent answered " + status + ": " + e.Code
	case e.Body != "":
		return fmt.Sprintf("agent answered %s, not with an API error: %q", status, e.Body)
	}
	return "agent answered " + status + " with no body"
}

func statusError(status int, contentType string, body []byte) *StatusError {
	se := &StatusError{Status: status}
	var e apitype.Error
	if isJSON(contentType) && json.Unmarshal(body, &e) == nil && (e.Code != "" || e.Message != "") {
		se.Code, se.Message = e.Code, Clean(e.Message)
		se.Reason, se.Field, se.State = Clean(e.Reason), Clean(e.Field), Clean(e.State)
		return se
	}
	se.Body = snippet(body)
	return se
}

// IsUnauthorized reports whether err is the agent's 401: no credentials,
// or a token it does not accept.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden reports whether err is the agent's 403: the caller is
// known but may not do what it asked.
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

func hasStatus(err error, status int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == status
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// snippet is the start of a body that is not what was expected, on one
// line and without control characters, for an error message.
func snippet(body []byte) string {
	const max = 200
	cut := len(body) > max
	if cut {
		body = body[:max]
		for len(body) > 0 && !utf8.Valid(body) {
			body = body[:len(body)-1]
		}
	}
	s := strings.Join(strings.Fields(Clean(string(body))), " ")
	if cut {
		s += "…"
	}
	return s
}

// Clean replaces control and format characters, which could move a
// terminal's cursor or reorder text, with spaces; invalid UTF-8 becomes
// U+FFFD. What the agent answers can hold what other callers sent it (a
// container name in a URL, say): a client prints it through Clean.
func Clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
