package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/queue"
)

// In a fleet the ledger holds every node's jobs, so any agent answers for
// a job, but a job's container is on the node it runs or ran on: what
// acts on the container (its logs, the stop of a started job) is
// forwarded to that node's agent (queue.fleet_api there) with the
// caller's own credentials, which that agent checks again. A node that
// is lost, serves no API or does not answer is a 503 node_lost.

// forwardedHeader marks a forwarded request, so that an agent answers it
// itself rather than forwarding it on (the job's node is its own, unless
// the fleet moved the job meanwhile).
const forwardedHeader = "X-Gpumeter-Forwarded-By"

// forwardConnect bounds the connection to the job's node; the answer
// itself may stream for as long as a followed log does.
const forwardConnect = 10 * time.Second

// ForwardClient is the client an agent passes requests on to the other
// agents of its fleet with: roots, when not nil, are the CA bundle their
// https certificates are checked against (queue.fleet_ca_file), else the
// system's.
func ForwardClient(roots *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: forwardConnect}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   forwardConnect,
		ResponseHeaderTimeout: jobActionTimeout,
	}}
}

// forwards reports whether job's container is another node's, so that the
// request is that node's agent's to answer.
func (s *server) forwards(r *http.Request, job queue.Job) bool {
	return s.cfg.Nodes != nil && job.Node != "" && job.Node != s.cfg.Node && r.Header.Get(forwardedHeader) == ""
}

// forward answers r by asking the agent of job's node, sending body (nil:
// none), and copies its answer to w as it comes. The caller checked
// forwards.
func (s *server) forward(w http.ResponseWriter, r *http.Request, c *call, job queue.Job, body []byte) {
	target := "job " + job.ID
	lost := func(text string) {
		s.observe(r, c, target, http.StatusServiceUnavailable, text)
		writeError(w, http.StatusServiceUnavailable, apitype.CodeNodeLost, text)
	}
	nodes, err := s.cfg.Nodes.Nodes(r.Context())
	if err != nil {
		s.jobError(w, r, c, target, err)
		return
	}
	var node *queue.NodeView
	for i := range nodes {
		if nodes[i].Node == job.Node {
			node = &nodes[i]
		}
	}
	switch {
	case node == nil || node.State == queue.NodeLost:
		lost("job " + job.ID + " is on node " + strconv.Quote(job.Node) + ", which is lost (its agent's ledger lease expired): its container is out of reach until the agent is back")
		return
	case node.API == "":
		lost("job " + job.ID + " is on node " + strconv.Quote(job.Node) + ", whose agent serves no API the fleet can reach: set queue.fleet_api there, or ask that agent")
		return
	case r.Header.Get("Authorization") == "":
		lost("job " + job.ID + " is on node " + strconv.Quote(job.Node) + ", and a request without a token (on this agent's socket) cannot be passed on: give GPUMETER_TOKEN, or ask that node's agent")
		return
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	url := strings.TrimSuffix(node.API, "/") + r.URL.Path
	if r.URL.RawQuery != "" {
		url += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, url, rd)
	if err != nil {
		lost("job " + job.ID + " is on node " + strconv.Quote(job.Node) + ", whose queue.fleet_api " + strconv.Quote(node.API) + " is not a URL: " + err.Error())
		return
	}
	req.Header.Set("Authorization", r.Header.Get("Authorization"))
	req.Header.Set(forwardedHeader, s.cfg.Node)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	fc := s.cfg.Forward
	if fc == nil {
		fc = ForwardClient(nil)
	}
	resp, err := fc.Do(req)
	if err != nil {
		lost("job " + job.ID + " is on node " + strconv.Quote(job.Node) + ", whose agent at " + node.API + " does not answer: " + err.Error())
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Cache-Control", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	c.observed = true // the job's node audits what it did
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), window: writeWindow(r)}
	if _, err := io.Copy(sw, resp.Body); err != nil && r.Context().Err() == nil {
		s.cfg.Logger.Warn("forward to the job's node", "job", job.ID, "node", job.Node, "err", err)
	}
}
