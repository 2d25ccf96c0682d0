package security

// End-to-end tests of who may call the agent, run against the real binary
// over a real TLS listener with certificates made by the test: tokens and
// roles, client certificates, limits, slow clients, a certificate reloaded
// on SIGHUP, the web config's basic auth, the local socket, a flood of bad
// requests, and a container stopped through the API. Every refusal must
// be an answer (never a timeout), name its cause, and be in the audit log.
// No test asserts how long an answer took: a busy machine makes any figure
// wrong, and BENCHMARKS.md keeps the figures the tests log.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpumeter/gpumeter/internal/api/apitype"
	"github.com/gpumeter/gpumeter/internal/audit"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/config"
	"github.com/gpumeter/gpumeter/internal/dockertest"
	"github.com/gpumeter/gpumeter/test/e2e/harness"
)

// notTimeout fails t when err, a refusal the test expected, is a
// timeout: a refusal must be the agent's answer, not a timeout in
// disguise. How long the answer took is not asserted, since a busy
// machine makes any figure wrong.
func notTimeout(t *testing.T, what string, err error) {
	t.Helper()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: %v, want a refusal, not a timeout", what, err)
	}
}

// pki is a certificate authority made for one test, and the files of the
// certificates it issues.
type pki struct {
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	caFile string
	pool   *x509.CertPool
}

// issued is a certificate and its key: their PEM files, the parsed
// certificate, and the pair a client shows.
type issued struct {
	certFile, keyFile string
	cert              *x509.Certificate
	pair              tls.Certificate
}

func newSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: "gpumeter e2e CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), cert: cert, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(cert)
	p.caFile = filepath.Join(p.dir, "ca.pem")
	writePEM(t, p.caFile, "CERTIFICATE", der)
	return p
}

// issue signs tmpl with the CA and writes name.pem and name-key.pem.
func (p *pki) issue(t *testing.T, name string, tmpl *x509.Certificate) issued {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = newSerial(t)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := issued{certFile: filepath.Join(p.dir, name+".pem"), keyFile: filepath.Join(p.dir, name+"-key.pem")}
	writePEM(t, out.certFile, "CERTIFICATE", der)
	writePEM(t, out.keyFile, "PRIVATE KEY", keyDER)
	if out.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	if out.pair, err = tls.LoadX509KeyPair(out.certFile, out.keyFile); err != nil {
		t.Fatal(err)
	}
	return out
}

// server issues a certificate for 127.0.0.1 that expires at notAfter.
func (p *pki) server(t *testing.T, name string, notAfter time.Time) issued {
	t.Helper()
	return p.issue(t, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   notAfter.Add(-48 * time.Hour),
		NotAfter:    notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// client issues a client certificate with the common name cn.
func (p *pki) client(t *testing.T, cn string) issued {
	t.Helper()
	return p.issue(t, cn, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// tlsConfig trusts the CA and shows cert, when there is one.
func (p *pki) tlsConfig(cert *issued) *tls.Config {
	cfg := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.pair}
	}
	return cfg
}

// httpsClient is a client of agents with the CA's certificates. Every
// request has a connection of its own, so that its source address names
// it in the audit log.
func (p *pki) httpsClient(cert *issued) *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: p.tlsConfig(cert), DisableKeepAlives: true},
	}
}

// newTestToken makes a token; the zero expires means never.
func newTestToken(t *testing.T, id, user string, role config.Role, expires time.Time) (string, config.Token) {
	t.Helper()
	secret, tok, err := auth.NewToken(id, user, role, expires)
	if err != nil {
		t.Fatal(err)
	}
	return secret, tok
}

// secureSetup is what a secureAgent runs with; the test admin token is
// always accepted besides tokens.
type secureSetup struct {
	// pki issues the agent's certificate and is the CA of its client
	// certificates; nil makes one.
	pki    *pki
	tokens []config.Token
	// certs maps client certificate names to "user=NAME role=ROLE".
	certs map[string]string
	// clientAuth is "" for no client certificates, else optional or
	// required.
	clientAuth string
	// yaml is more of the config file: api:, web:.
	yaml string
	// sim is the scenario played; "" plays testdata/shared.yaml.
	sim  string
	args []string
	// probeCert and probeAuth are what the readiness probe shows: a
	// client certificate, a basic auth user and password.
	probeCert *issued
	probeAuth [2]string
}

// secureAgent is an agent serving HTTPS with a certificate of its pki and
// keeping its audit log and socket in a directory the test knows.
type secureAgent struct {
	*harness.Agent
	pki     *pki
	server  issued // the certificate and key files the agent is given
	setup   secureSetup
	cfgPath string
	dataDir string
	client  *http.Client // trusts the CA, shows no certificate
}

// startSecure starts an agent with s, over HTTPS.
func startSecure(t *testing.T, s secureSetup) *secureAgent {
	t.Helper()
	p := s.pki
	if p == nil {
		p = newPKI(t)
	}
	// A short directory: the socket's path may not be longer than 107
	// bytes.
	data, err := os.MkdirTemp("", "gpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	a := &secureAgent{
		pki:     p,
		server:  p.server(t, "server", time.Now().Add(24*time.Hour)),
		setup:   s,
		cfgPath: filepath.Join(t.TempDir(), "gpumeter.yaml"),
		dataDir: data,
		client:  p.httpsClient(nil),
	}
	a.writeConfig(t)
	sim := s.sim
	if sim == "" {
		sim = harness.RepoFile("testdata/shared.yaml")
	}
	probe := p.httpsClient(s.probeCert)
	a.Agent = harness.ServeWith(t, harness.ServeOptions{
		Env:  []string{"GPUMETER_DATA_DIR=" + data},
		Args: append([]string{"--config", a.cfgPath, "--sim", sim, "--interval", "200ms"}, s.args...),
		Ready: func(url string) bool {
			req, err := http.NewRequest(http.MethodGet, url+"/healthz", nil)
			if err != nil {
				return false
			}
			if s.probeAuth[0] != "" {
				req.SetBasicAuth(s.probeAuth[0], s.probeAuth[1])
			}
			resp, err := probe.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		},
	})
	if !strings.HasPrefix(a.URL, "https://") {
		t.Fatalf("the agent serves on %s, want https", a.URL)
	}
	return a
}

// writeConfig writes the agent's config file from its setup.
func (a *secureAgent) writeConfig(t *testing.T) {
	t.Helper()
	var b strings.Builder
	if len(a.setup.tokens)+len(a.setup.certs) > 0 {
		b.WriteString("auth:\n")
	}
	if len(a.setup.tokens) > 0 {
		b.WriteString("  tokens:\n")
		for _, tok := range a.setup.tokens {
			fmt.Fprintf(&b, "    %s: %s\n", tok.ID, strconv.Quote(tok.Entry()))
		}
	}
	if len(a.setup.certs) > 0 {
		b.WriteString("  client_certs:\n")
		for cn, entry := range a.setup.certs {
			fmt.Fprintf(&b, "    %s: %s\n", cn, strconv.Quote(entry))
		}
	}
	fmt.Fprintf(&b, "tls:\n  cert_file: %s\n  key_file: %s\n", strconv.Quote(a.server.certFile), strconv.Quote(a.server.keyFile))
	if a.setup.clientAuth != "" {
		fmt.Fprintf(&b, "  client_ca_file: %s\n  client_auth: %s\n", strconv.Quote(a.pki.caFile), a.setup.clientAuth)
	}
	b.WriteString(a.setup.yaml)
	if err := os.WriteFile(a.cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// hup sends the agent SIGHUP and waits until its log has one more line
// matching re than before.
func (a *secureAgent) hup(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	before := len(re.FindAllString(a.Stderr.String(), -1))
	if err := a.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var line string
	harness.WaitFor(t, 10*time.Second, "a log line matching "+re.String(), func() bool {
		all := re.FindAllString(a.Stderr.String(), -1)
		if len(all) > before {
			line = all[len(all)-1]
			return true
		}
		return false
	})
	return line
}

var (
	reloadedRE = regexp.MustCompile(`.*msg="config reloaded".*`)
	rejectedRE = regexp.MustCompile(`.*msg="config reload rejected, the old config stays in force".*`)
)

// answer is what one request got.
type answer struct {
	status int
	header http.Header
	body   []byte
	code   string // the API error's code, when the body is one
	source string // the client's address, as the agent sees it
	took   time.Duration
}

// send makes one request to the agent: token is its bearer token ("" for
// none) and body its JSON body (nil for none).
func send(t *testing.T, c *http.Client, method, url, token string, body []byte) answer {
	t.Helper()
	var a answer
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		a.source = info.Conn.LocalAddr().String()
	}}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	a.body, err = io.ReadAll(resp.Body)
	a.took = time.Since(start)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	a.status, a.header = resp.StatusCode, resp.Header
	if resp.Header.Get("Content-Type") == "application/json" {
		var e apitype.Error
		if json.Unmarshal(a.body, &e) == nil {
			a.code = e.Code
		}
	}
	return a
}

// want checks that ans has status and the API error code code ("" for
// none). A status is an answer, so a refusal checked here is never a
// timeout in disguise; how long it took is for the log alone.
func (ans answer) want(t *testing.T, what string, status int, code string) {
	t.Helper()
	if ans.status != status || ans.code != code {
		t.Errorf("%s: %d %q, want %d %q; body %s", what, ans.status, ans.code, status, code, ans.body)
	}
}

// decode reads ans's JSON body into v.
func (ans answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(ans.body, v); err != nil {
		t.Fatalf("%v\n%s", err, ans.body)
	}
}

// auditView is what a test checks of an API audit event; an empty Error
// or Target is not compared.
type auditView struct {
	Caller, Role, Action, Outcome, Target, Error string
	Status                                       int
}

// auditEvents reads the agent's audit file; a line still being written
// reads as an error, which the caller retries on.
func (a *secureAgent) auditEvents() ([]audit.Event, error) {
	return audit.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"), time.Time{}, time.Time{})
}

// wantAudit waits for the audit event of the call ans got, known by its
// source address, status and action, and compares it with want.
func (a *secureAgent) wantAudit(t *testing.T, ans answer, want auditView) {
	t.Helper()
	var found *audit.Event
	// The event's status is the answer's, unless want names another: a
	// stop of another user's container is answered 404 and audited 403.
	if want.Status == 0 {
		want.Status = ans.status
	}
	harness.WaitFor(t, 30*time.Second, fmt.Sprintf("the audit event of the %d from %s", ans.status, ans.source), func() bool {
		evs, err := a.auditEvents()
		if err != nil {
			return false
		}
		for i, e := range evs {
			if e.Kind == audit.KindAPI && e.Source == ans.source && e.Status == want.Status && e.Action == want.Action {
				found = &evs[i]
				return true
			}
		}
		return false
	})
	// An identity without a user (a certificate no user has) is written
	// with a leading space; what follows it names the credential.
	got := auditView{Caller: found.Caller, Role: found.Role, Action: found.Action, Outcome: found.Outcome, Target: found.Target, Error: found.Error, Status: found.Status}
	if want.Target == "" {
		got.Target = ""
	}
	if want.Error == "" {
		got.Error = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit event of the %d from %s (-want +got):\n%s", ans.status, ans.source, diff)
	}
	if found.Time.IsZero() || found.Node == "" {
		t.Errorf("audit event has no time or node: %+v", *found)
	}
}

// containerIDs lists the containers the admin sees, by name.
func (a *secureAgent) containerIDs(t *testing.T) map[string]string {
	t.Helper()
	ans := send(t, a.client, "GET", a.URL+"/api/v1/containers", harness.AdminToken(), nil)
	ans.want(t, "admin GET /api/v1/containers", http.StatusOK, "")
	var resp apitype.ContainersResponse
	ans.decode(t, &resp)
	ids := map[string]string{}
	for _, c := range resp.Containers {
		ids[c.Name] = c.ID
	}
	return ids
}

// sampling is what /metrics says of the sampler: the samples taken and
// those that could not run on time, and when the latest was taken, by the
// agent's clock.
type sampling struct {
	taken, missed float64
	at            time.Time
}

// ticks reads the sampler's state from /metrics.
func ticks(t *testing.T, c *http.Client, url string) sampling {
	t.Helper()
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %v: %s", resp.Status, err, body)
	}
	m := harness.Series(string(body))
	for _, name := range []string{"gpumeter_ticks_total", "gpumeter_ticks_missed_total", "gpumeter_last_tick_timestamp_seconds"} {
		if !m.Has(name) {
			t.Fatalf("/metrics has no %s", name)
		}
	}
	return sampling{taken: m.Sum("gpumeter_ticks_total"), missed: m.Sum("gpumeter_ticks_missed_total"), at: m.LastTick()}
}

// sampleInterval is the interval startSecure's agents sample at.
const sampleInterval = 200 * time.Millisecond

// wantSampling checks that the sampler kept going through a load that
// ended just now, whatever the load did to the machine: it waits for n
// more samples, taken after the end, and then wants every interval from
// the sample that before shows to the last one accounted for, as taken or
// as missed. A sampler that stalled would take none; one that fell behind
// counts what it skipped, which the caller judges. It returns what
// /metrics says then.
func (a *secureAgent) wantSampling(t *testing.T, what string, before sampling, n int) sampling {
	t.Helper()
	end := time.Now()
	last := ticks(t, a.client, a.URL)
	var after sampling
	harness.WaitFor(t, time.Minute, fmt.Sprintf("%d samples after %s", n, what), func() bool {
		after = ticks(t, a.client, a.URL)
		return after.taken >= last.taken+float64(n) && after.at.After(end)
	})
	slots := float64(after.at.Sub(before.at) / sampleInterval)
	if got := after.taken - before.taken + after.missed - before.missed; got < slots-1 {
		t.Errorf("%g samples taken and %g missed over the %s from before %s to after it, want all %g intervals of %s accounted for",
			after.taken-before.taken, after.missed-before.missed, after.at.Sub(before.at).Round(time.Millisecond), what, slots, sampleInterval)
	}
	return after
}

// logMissed logs the ticks missed between before and after, a load
// described by what. A missed tick is the machine's figure, not the
// agent's behaviour (a busy machine misses some whatever the agent does),
// so it is logged, for BENCHMARKS.md, and wantSampling checks that every
// interval was accounted for.
func logMissed(t *testing.T, what string, before, after sampling) {
	t.Helper()
	t.Logf("gpumeter_ticks_missed_total went from %g to %g during %s (%g taken)", before.missed, after.missed, what, after.taken-before.taken)
}

// TestSecurityAPI: tokens, roles and client certificates decide who gets
// what; each refusal names its cause and is audited.
func TestSecurityAPI(t *testing.T) {
	t.Parallel()
	aliceTok, alice := newTestToken(t, "alice", "alice", config.RoleUser, time.Time{})
	veraTok, vera := newTestToken(t, "vera", "vera", config.RoleViewer, time.Time{})
	oldTok, old := newTestToken(t, "alice-old", "alice", config.RoleUser, time.Now().Add(-time.Hour))
	carolTok, carol := newTestToken(t, "carol", "carol", config.RoleUser, time.Time{})
	a := startSecure(t, secureSetup{
		tokens:     []config.Token{alice, vera, old, carol},
		certs:      map[string]string{"alice-laptop": "user=alice role=user"},
		clientAuth: "optional",
		yaml:       "api:\n  max_body: 1KiB\n",
	})
	ids := a.containerIDs(t)
	if ids["alice-train"] == "" || ids["bob-notebook"] == "" {
		t.Fatalf("the scenario's containers are not listed: %v", ids)
	}
	containers := a.URL + "/api/v1/containers"
	stop := func(name string) string { return a.URL + "/api/v1/containers/" + ids[name] + "/stop" }
	var noToken answer

	t.Run("refusals", func(t *testing.T) {
		t.Run("no token", func(t *testing.T) {
			t.Parallel()
			noToken = send(t, a.client, "GET", containers, "", nil)
			noToken.want(t, "GET without a token", http.StatusUnauthorized, auth.CodeNoCredentials)
			if got := noToken.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate: %q, want Bearer", got)
			}
			a.wantAudit(t, noToken, auditView{Caller: "unknown", Action: "containers.read", Outcome: audit.OutcomeDenied, Error: auth.CodeNoCredentials})
		})
		t.Run("wrong token", func(t *testing.T) {
			t.Parallel()
			wrong, _ := newTestToken(t, "wrong", "alice", config.RoleAdmin, time.Time{})
			ans := send(t, a.client, "GET", containers, wrong, nil)
			ans.want(t, "GET with a token the agent does not know", http.StatusUnauthorized, auth.CodeBadToken)
			a.wantAudit(t, ans, auditView{Caller: "unknown", Action: "containers.read", Outcome: audit.OutcomeDenied, Error: auth.CodeBadToken})
		})
		t.Run("expired token", func(t *testing.T) {
			t.Parallel()
			ans := send(t, a.client, "GET", containers, oldTok, nil)
			ans.want(t, "GET with an expired token", http.StatusUnauthorized, auth.CodeExpired)
			a.wantAudit(t, ans, auditView{Caller: "alice (token alice-old)", Action: "containers.read", Outcome: audit.OutcomeDenied, Error: auth.CodeExpired})
		})
		t.Run("viewer stops a container", func(t *testing.T) {
			t.Parallel()
			ans := send(t, a.client, "POST", stop("alice-train"), veraTok, []byte(`{}`))
			ans.want(t, "a viewer's stop", http.StatusForbidden, apitype.CodeForbidden)
			a.wantAudit(t, ans, auditView{Caller: "vera (token vera)", Role: "viewer", Action: "containers.stop", Outcome: audit.OutcomeDenied})
		})
		t.Run("user stops another's container", func(t *testing.T) {
			t.Parallel()
			ans := send(t, a.client, "POST", stop("bob-notebook"), aliceTok, []byte(`{}`))
			// Answered as a name nobody has; audited as the refusal it is.
			ans.want(t, "alice stopping bob's container", http.StatusNotFound, apitype.CodeNotFound)
			a.wantAudit(t, ans, auditView{Caller: "alice (token alice)", Role: "user", Action: "containers.stop", Outcome: audit.OutcomeDenied, Target: "container " + ids["bob-notebook"], Status: http.StatusForbidden})
		})
		t.Run("user reads another's usage", func(t *testing.T) {
			t.Parallel()
			ans := send(t, a.client, "GET", a.URL+"/api/v1/usage?since=1h&user=bob", aliceTok, nil)
			ans.want(t, "alice reading bob's usage", http.StatusForbidden, apitype.CodeForbidden)
			a.wantAudit(t, ans, auditView{Caller: "alice (token alice)", Role: "user", Action: "usage.read", Outcome: audit.OutcomeDenied, Target: "usage user=bob"})
		})
		t.Run("user lists her own", func(t *testing.T) {
			t.Parallel()
			ans := send(t, a.client, "GET", containers, aliceTok, nil)
			ans.want(t, "alice listing containers", http.StatusOK, "")
			var resp apitype.ContainersResponse
			ans.decode(t, &resp)
			var names []string
			for _, c := range resp.Containers {
				names = append(names, c.Name+":"+c.User)
			}
			if !slices.Equal(names, []string{"alice-train:alice"}) || len(resp.HostUsers) != 0 || len(resp.Unresolved) != 0 {
				t.Errorf("alice sees containers %v, host users %v and %d unresolved; want alice-train alone", names, resp.HostUsers, len(resp.Unresolved))
			}
		})
		t.Run("oversized body", func(t *testing.T) {
			t.Parallel()
			body := []byte(`{"reason": "` + strings.Repeat("x", 2<<10) + `"}`)
			ans := send(t, a.client, "POST", stop("alice-train"), aliceTok, body)
			ans.want(t, "a 2 KiB body", http.StatusRequestEntityTooLarge, apitype.CodeBodyTooLarge)
			a.wantAudit(t, ans, auditView{Caller: "alice (token alice)", Role: "user", Action: "containers.stop", Outcome: apitype.OutcomeRejected})
		})
		t.Run("client certificate", func(t *testing.T) {
			t.Parallel()
			c := a.pki.httpsClient(ptrTo(a.pki.client(t, "alice-laptop")))
			ans := send(t, c, "GET", a.URL+"/api/v1/whoami", "", nil)
			ans.want(t, "whoami with a mapped certificate", http.StatusOK, "")
			var me apitype.Whoami
			ans.decode(t, &me)
			if want := (apitype.Whoami{User: "alice", Role: "user", Method: "cert", Name: "alice-laptop"}); me != want {
				t.Errorf("whoami with alice's certificate: %+v, want %+v", me, want)
			}
			// The certificate's user sees what her token would show.
			ans = send(t, c, "GET", containers, "", nil)
			ans.want(t, "containers with a mapped certificate", http.StatusOK, "")
			var resp apitype.ContainersResponse
			ans.decode(t, &resp)
			if len(resp.Containers) != 1 || resp.Containers[0].Name != "alice-train" {
				t.Errorf("alice's certificate lists %d containers, want alice-train alone: %+v", len(resp.Containers), resp.Containers)
			}
			ans = send(t, c, "POST", stop("bob-notebook"), "", []byte(`{}`))
			ans.want(t, "stop of bob's container by alice's certificate", http.StatusNotFound, apitype.CodeNotFound)
			a.wantAudit(t, ans, auditView{Caller: "alice (cert alice-laptop)", Role: "user", Action: "containers.stop", Outcome: audit.OutcomeDenied, Status: http.StatusForbidden})
		})
		t.Run("unmapped certificate", func(t *testing.T) {
			t.Parallel()
			c := a.pki.httpsClient(ptrTo(a.pki.client(t, "mallory-laptop")))
			ans := send(t, c, "GET", a.URL+"/api/v1/whoami", "", nil)
			ans.want(t, "whoami with a valid certificate no user has", http.StatusUnauthorized, auth.CodeUnknownCert)
			if !bytes.Contains(ans.body, []byte("mallory-laptop")) {
				t.Errorf("the refusal does not name the certificate: %s", ans.body)
			}
			a.wantAudit(t, ans, auditView{Caller: "cert mallory-laptop", Action: "whoami", Outcome: audit.OutcomeDenied, Error: auth.CodeUnknownCert})
		})
		t.Run("certificate of another CA", func(t *testing.T) {
			t.Parallel()
			other := newPKI(t)
			cfg := a.pki.tlsConfig(ptrTo(other.client(t, "alice-laptop")))
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
			resp, err := c.Get(a.URL + "/api/v1/whoami")
			if err == nil {
				resp.Body.Close()
				t.Fatalf("a certificate of another CA got %s, want the handshake refused", resp.Status)
			}
			notTimeout(t, "a certificate of another CA", err)
		})
	})

	// The admin reads the denials back over the API; a user may not.
	harness.WaitFor(t, 30*time.Second, "the no-token denial in GET /api/v1/audit", func() bool {
		ans := send(t, a.client, "GET", a.URL+"/api/v1/audit?since=1h", harness.AdminToken(), nil)
		if ans.status != http.StatusOK {
			t.Fatalf("admin GET /api/v1/audit: %d %s", ans.status, ans.body)
		}
		var resp apitype.AuditResponse
		ans.decode(t, &resp)
		return slices.ContainsFunc(resp.Events, func(e apitype.AuditEvent) bool {
			return e.Source == noToken.source && e.Status == http.StatusUnauthorized && e.Outcome == audit.OutcomeDenied
		})
	})
	ans := send(t, a.client, "GET", a.URL+"/api/v1/audit", aliceTok, nil)
	ans.want(t, "a user reading the audit log", http.StatusForbidden, apitype.CodeForbidden)
	a.wantAudit(t, ans, auditView{Caller: "alice (token alice)", Role: "user", Action: "audit.read", Outcome: audit.OutcomeDenied})

	// A token dropped from the config stops working at the reload.
	send(t, a.client, "GET", a.URL+"/api/v1/whoami", carolTok, nil).want(t, "whoami with carol's token", http.StatusOK, "")
	a.setup.tokens = slices.DeleteFunc(a.setup.tokens, func(tok config.Token) bool { return tok.ID == "carol" })
	a.writeConfig(t)
	if line := a.hup(t, reloadedRE); !strings.Contains(line, "tokens=4") {
		t.Errorf("reload log line %q, want tokens=4 (three and the test admin's)", line)
	}
	ans = send(t, a.client, "GET", a.URL+"/api/v1/whoami", carolTok, nil)
	ans.want(t, "whoami with a removed token", http.StatusUnauthorized, auth.CodeBadToken)
	a.wantAudit(t, ans, auditView{Caller: "unknown", Action: "whoami", Outcome: audit.OutcomeDenied, Error: auth.CodeBadToken})
	send(t, a.client, "GET", a.URL+"/api/v1/whoami", aliceTok, nil).want(t, "whoami with alice's token after the reload", http.StatusOK, "")
}

func ptrTo[T any](v T) *T { return &v }

// TestSecurityRateLimit: a caller over api.rate_limit is told to wait,
// with Retry-After, and other callers are not held up by it.
func TestSecurityRateLimit(t *testing.T) {
	t.Parallel()
	const rate, burst = 1, 3
	ritaTok, rita := newTestToken(t, "rita", "rita", config.RoleViewer, time.Time{})
	a := startSecure(t, secureSetup{tokens: []config.Token{rita}, yaml: fmt.Sprintf("api:\n  rate_limit: %d\n  rate_burst: %d\n", rate, burst)})
	whoami := a.URL + "/api/v1/whoami"
	// The bucket refills at a token a second while the requests go out, so
	// how many pass depends on how fast this machine sends them: the test
	// counts the answers against the burst plus what could have refilled
	// between the first request and the last answer, never a fixed figure.
	allowed := 0
	var refused []answer
	began := time.Now()
	for range 100 {
		ans := send(t, a.client, "GET", whoami, ritaTok, nil)
		if ans.status == http.StatusOK {
			allowed++
			continue
		}
		ans.want(t, "a request over the rate", http.StatusTooManyRequests, apitype.CodeRateLimited)
		refused = append(refused, ans)
		if len(refused) == 3 {
			break
		}
	}
	refilled := int(time.Since(began).Seconds()*rate) + 1
	t.Logf("%d requests allowed before 3 refusals, in %s", allowed, time.Since(began).Round(time.Millisecond))
	if allowed < burst || allowed > burst+refilled || len(refused) != 3 {
		t.Fatalf("%d requests allowed and %d refused in %s, want at least %d (the burst) and at most %d (the burst and what refilled meanwhile) allowed, then 3 refusals",
			allowed, len(refused), time.Since(began).Round(time.Millisecond), burst, burst+refilled)
	}
	wait, err := strconv.Atoi(refused[0].header.Get("Retry-After"))
	if err != nil || wait < 1 || wait > 2 {
		t.Errorf("Retry-After: %q, want 1 or 2 seconds", refused[0].header.Get("Retry-After"))
	}
	// Other callers have buckets of their own.
	send(t, a.client, "GET", whoami, harness.AdminToken(), nil).want(t, "the admin while rita is limited", http.StatusOK, "")

	// The first refusal is written at once; the others of the minute are
	// summed, to be written as one event with their count. A refusal of
	// another kind, the first of its sum and so written at once, marks
	// the log: once it is in the file, whatever the log wrote of the
	// refusals before it is there too.
	a.wantAudit(t, refused[0], auditView{Caller: "rita (token rita)", Role: "viewer", Action: "whoami", Outcome: audit.OutcomeDenied})
	mark := send(t, a.client, "GET", whoami, "gpm_"+strings.Repeat("m", 43), nil)
	mark.want(t, "whoami with a token the agent does not know", http.StatusUnauthorized, auth.CodeBadToken)
	a.wantAudit(t, mark, auditView{Caller: "unknown", Action: "whoami", Outcome: audit.OutcomeDenied, Error: auth.CodeBadToken})
	evs, err := a.auditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var limited []audit.Event
	var marked time.Time
	for _, e := range evs {
		switch {
		case e.Status == http.StatusTooManyRequests:
			limited = append(limited, e)
		case e.Source == mark.source && e.Status == http.StatusUnauthorized:
			marked = e.Time
		}
	}
	switch {
	case len(limited) == 1:
	case len(limited) == 2 && limited[1].Count == int64(len(refused)-1) && limited[0].Time.Truncate(time.Minute).Before(marked.Truncate(time.Minute)):
		// The minute of the refusals ended before the mark: its sum, with
		// the count of the others, was written then.
	default:
		t.Errorf("%d audit events for %d refusals in a minute, want 1 until the minute ends: %+v", len(limited), len(refused), limited)
	}

	time.Sleep(time.Duration(wait) * time.Second)
	send(t, a.client, "GET", whoami, ritaTok, nil).want(t, "rita after Retry-After", http.StatusOK, "")
}

// TestSecurityClientCertRequired: with tls.client_auth required, a client
// without a certificate does not get past the handshake, token or not.
func TestSecurityClientCertRequired(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	probe := p.client(t, "probe")
	a := startSecure(t, secureSetup{
		pki:        p,
		certs:      map[string]string{"alice-laptop": "user=alice role=user"},
		clientAuth: "required",
		probeCert:  &probe,
	})
	c := p.httpsClient(ptrTo(p.client(t, "alice-laptop")))
	ans := send(t, c, "GET", a.URL+"/api/v1/whoami", "", nil)
	ans.want(t, "whoami with a certificate", http.StatusOK, "")
	var me apitype.Whoami
	ans.decode(t, &me)
	if me.User != "alice" || me.Method != "cert" {
		t.Errorf("whoami: %+v, want alice by her certificate", me)
	}
	for _, token := range []string{"", harness.AdminToken()} {
		req, err := http.NewRequest(http.MethodGet, a.URL+"/api/v1/whoami", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := a.client.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("a client without a certificate (token sent: %v) got %s, want the handshake refused", token != "", resp.Status)
			continue
		}
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a client without a certificate: %v, want a TLS error about the certificate", err)
		}
		notTimeout(t, "a client without a certificate", err)
	}
}

// clientHello is the first flight of a TLS handshake, as a client sends
// it.
func clientHello(t *testing.T) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	go func() {
		_ = tls.Client(c1, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}).Handshake()
	}()
	buf := make([]byte, 16<<10)
	n, err := c2.Read(buf)
	c1.Close()
	c2.Close()
	if err != nil || n < 5 || buf[0] != 0x16 {
		t.Fatalf("capture a ClientHello: %d bytes, %v", n, err)
	}
	return buf[:n]
}

// dribble writes msg to c one byte every gap until the other end closes
// c, and returns how long after the first byte that was. It is an error
// for all of msg to go through with c still open.
func dribble(c net.Conn, msg []byte, gap time.Duration) (time.Duration, error) {
	closed := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				closed <- time.Now()
				return
			}
		}
	}()
	start := time.Now()
	for _, b := range msg {
		if _, err := c.Write([]byte{b}); err != nil {
			break
		}
		select {
		case at := <-closed:
			return at.Sub(start), nil
		case <-time.After(gap):
		}
	}
	select {
	case at := <-closed:
		return at.Sub(start), nil
	case <-time.After(5 * time.Second):
		return time.Since(start), errors.New("the connection is still open")
	}
}

// TestSecuritySlowloris: clients that send their handshake or headers a
// byte at a time are cut off at api.read_header_timeout (not before it),
// while everyone else is answered and the sampler accounts for every
// interval.
func TestSecuritySlowloris(t *testing.T) {
	t.Parallel()
	const headerTimeout = time.Second
	a := startSecure(t, secureSetup{yaml: "api:\n  read_header_timeout: 1s\n  read_timeout: 2s\n"})
	addr := strings.TrimPrefix(a.URL, "https://")
	hello := clientHello(t)
	slowHeaders := []byte("GET /api/v1/containers HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + harness.AdminToken() + "\r\n\r\n")
	before := ticks(t, a.client, a.URL)
	begin := time.Now()

	type cut struct {
		kind  string
		after time.Duration
		err   error
	}
	var wg sync.WaitGroup
	cuts := make(chan cut, 16)
	// Clients that offer HTTP/2 get HTTP/1.1: Go's HTTP/2 server would
	// hold them to neither timeout.
	slow := []struct {
		kind   string
		protos []string // nil: the handshake itself is slow
		msg    []byte
	}{
		{"TLS handshake", nil, hello},
		{"headers over HTTP/1.1", []string{"http/1.1"}, slowHeaders},
		{"headers offering HTTP/2", []string{"h2", "http/1.1"}, slowHeaders},
	}
	for i := range 12 {
		s := slow[i%len(slow)]
		wg.Go(func() {
			var c net.Conn
			var err error
			if s.protos == nil {
				c, err = net.DialTimeout("tcp", addr, 5*time.Second)
			} else {
				var tc *tls.Conn
				if tc, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: a.pki.pool, NextProtos: s.protos}); err == nil {
					c = tc
					if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
						tc.Close()
						err = fmt.Errorf("negotiated %q, want http/1.1", p)
					}
				}
			}
			if err != nil {
				cuts <- cut{kind: s.kind, err: err}
				return
			}
			defer c.Close()
			after, err := dribble(c, s.msg, 500*time.Millisecond)
			cuts <- cut{s.kind, after, err}
		})
	}
	// Meanwhile, until the last slow client is cut off, the agent answers
	// everyone else at once.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	polls := 0
	for polling := true; polling; {
		resp, err := a.client.Get(a.URL + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz during the slow clients: %v", err)
		}
		resp.Body.Close()
		send(t, a.client, "GET", a.URL+"/api/v1/containers", harness.AdminToken(), nil).want(t, "GET /api/v1/containers during the slow clients", http.StatusOK, "")
		polls++
		select {
		case <-done:
			polling = false
		case <-time.After(100 * time.Millisecond):
		}
	}
	close(cuts)
	for c := range cuts {
		switch {
		case c.err != nil:
			t.Errorf("slow %s: %v after %s", c.kind, c.err, c.after)
		case c.after < headerTimeout/2:
			// A cut comes at the timeout or, on a busy machine, later:
			// never before it. That it came before the message was
			// through (minutes at this pace) is dribble's check.
			t.Errorf("slow %s: cut off after %s, before api.read_header_timeout (%s)", c.kind, c.after, headerTimeout)
		}
	}
	elapsed := time.Since(begin)
	after := a.wantSampling(t, "the slow clients", before, 1)
	logMissed(t, "the slow clients", before, after)
	t.Logf("%d polls answered in %s; %g ticks taken", polls, elapsed, after.taken-before.taken)
}

// serial is the serial number of the certificate a new connection to addr
// is shown.
func serial(t *testing.T, p *pki, addr string) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, p.tlsConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestSecurityTLSReload: SIGHUP puts a new certificate in force for new
// connections; one that is expired or does not load is rejected, logged,
// and the one in force goes on serving.
func TestSecurityTLSReload(t *testing.T) {
	t.Parallel()
	a := startSecure(t, secureSetup{})
	addr := strings.TrimPrefix(a.URL, "https://")
	if got := serial(t, a.pki, addr); got.Cmp(a.server.cert.SerialNumber) != 0 {
		t.Fatalf("serial %x, want the first certificate's %x", got, a.server.cert.SerialNumber)
	}
	replace := func(with issued) {
		t.Helper()
		for _, f := range [][2]string{{with.certFile, a.server.certFile}, {with.keyFile, a.server.keyFile}} {
			b, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f[1], b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	next := a.pki.server(t, "next", time.Now().Add(48*time.Hour))
	replace(next)
	a.hup(t, reloadedRE)
	if got := serial(t, a.pki, addr); got.Cmp(next.cert.SerialNumber) != 0 {
		t.Fatalf("serial %x after the reload, want the new certificate's %x", got, next.cert.SerialNumber)
	}
	send(t, a.client, "GET", a.URL+"/api/v1/whoami", harness.AdminToken(), nil).want(t, "whoami over the new certificate", http.StatusOK, "")

	replace(a.pki.server(t, "expired", time.Now().Add(-24*time.Hour)))
	line := a.hup(t, rejectedRE)
	if !strings.Contains(line, "tls.cert_file") || !strings.Contains(line, "expired") {
		t.Errorf("rejection %q does not say the certificate expired", line)
	}
	if got := serial(t, a.pki, addr); got.Cmp(next.cert.SerialNumber) != 0 {
		t.Errorf("serial %x after an expired certificate was rejected, want %x still", got, next.cert.SerialNumber)
	}

	if err := os.WriteFile(a.server.certFile, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	line = a.hup(t, rejectedRE)
	if !strings.Contains(line, "tls.cert_file "+a.server.certFile) {
		t.Errorf("rejection %q does not name the certificate file", line)
	}
	if got := serial(t, a.pki, addr); got.Cmp(next.cert.SerialNumber) != 0 {
		t.Errorf("serial %x after a broken certificate was rejected, want %x still", got, next.cert.SerialNumber)
	}
	send(t, a.client, "GET", a.URL+"/api/v1/whoami", harness.AdminToken(), nil).want(t, "whoami after the rejected reloads", http.StatusOK, "")
}

// TestSecurityWebConfig: the exporter-toolkit web config's basic auth
// users guard /metrics and /healthz; the API still takes tokens only.
func TestSecurityWebConfig(t *testing.T) {
	t.Parallel()
	hash, err := bcrypt.GenerateFromPassword([]byte("scrape-secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	web := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(web, []byte("basic_auth_users:\n  prometheus: "+strconv.Quote(string(hash))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startSecure(t, secureSetup{
		yaml:      "web:\n  config_file: " + strconv.Quote(web) + "\n",
		probeAuth: [2]string{"prometheus", "scrape-secret"},
	})
	for _, tt := range []struct {
		name, path, user, pass string
		want                   int
	}{
		{"metrics without basic auth", "/metrics", "", "", http.StatusUnauthorized},
		{"metrics with a wrong password", "/metrics", "prometheus", "guess", http.StatusUnauthorized},
		{"metrics with an unknown user", "/metrics", "grafana", "scrape-secret", http.StatusUnauthorized},
		{"metrics with basic auth", "/metrics", "prometheus", "scrape-secret", http.StatusOK},
		{"healthz without basic auth", "/healthz", "", "", http.StatusUnauthorized},
		{"healthz with basic auth", "/healthz", "prometheus", "scrape-secret", http.StatusOK},
		{"the API with basic auth only", "/api/v1/whoami", "prometheus", "scrape-secret", http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, a.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.user != "" {
				req.SetBasicAuth(tt.user, tt.pass)
			}
			resp, err := a.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("GET %s: %s, want %d; body %s", tt.path, resp.Status, tt.want, body)
			}
			switch {
			case tt.want == http.StatusOK && tt.path == "/metrics" && !bytes.Contains(body, []byte("gpumeter_ticks_total")):
				t.Errorf("/metrics has no gpumeter_ticks_total:\n%.500s", body)
			case tt.want == http.StatusUnauthorized && !strings.HasPrefix(tt.path, "/api/") && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic"):
				t.Errorf("WWW-Authenticate: %q, want Basic", resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
	// Tokens need no basic auth.
	ans := send(t, a.client, "GET", a.URL+"/api/v1/whoami", harness.AdminToken(), nil)
	ans.want(t, "whoami with a token and no basic auth", http.StatusOK, "")
}

// TestSecuritySocket: the local socket is the agent's user's alone, and
// lets that user in as admin without a token; a wrong token from that
// user is ignored there, with a warning, and still refused over TCP.
func TestSecuritySocket(t *testing.T) {
	t.Parallel()
	a := startSecure(t, secureSetup{})
	sock := filepath.Join(a.dataDir, "api.sock")
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %s, want a socket with mode 0600", sock, fi.Mode())
	}
	var d net.Dialer
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	uid := strconv.Itoa(os.Geteuid())
	ans := send(t, c, "GET", "http://gpumeter/api/v1/whoami", "", nil)
	ans.want(t, "whoami over the socket", http.StatusOK, "")
	var me apitype.Whoami
	ans.decode(t, &me)
	if want := (apitype.Whoami{User: "uid:" + uid, Role: "admin", Method: "socket", Name: "uid " + uid}); me != want {
		t.Errorf("whoami over the socket: %+v, want %+v", me, want)
	}
	if got := ans.header.Values(apitype.WarningHeader); len(got) != 0 {
		t.Errorf("whoami over the socket without a token warns %q", got)
	}
	wrong := "gpm_" + strings.Repeat("x", 43)
	ans = send(t, c, "GET", "http://gpumeter/api/v1/whoami", wrong, nil)
	ans.want(t, "a wrong token over the socket", http.StatusOK, "")
	var again apitype.Whoami
	ans.decode(t, &again)
	if again != me {
		t.Errorf("whoami over the socket with a wrong token: %+v, want %+v as without one", again, me)
	}
	warning := "the token was ignored (the token is not accepted: it is wrong or has been removed): uid " + uid + " on the agent's socket is admin by its kernel identity"
	if got := ans.header.Values(apitype.WarningHeader); len(got) != 1 || got[0] != warning {
		t.Errorf("a wrong token over the socket: warnings %q, want [%q]", got, warning)
	}
	if strings.Contains(strings.Join(ans.header.Values(apitype.WarningHeader), " "), wrong) {
		t.Error("the warning repeats the token")
	}
	// Over TCP the same token is refused, and audited.
	ans = send(t, a.client, "GET", a.URL+"/api/v1/whoami", wrong, nil)
	ans.want(t, "a wrong token over TCP", http.StatusUnauthorized, auth.CodeBadToken)
	a.wantAudit(t, ans, auditView{Caller: "unknown", Action: "whoami", Outcome: audit.OutcomeDenied, Error: auth.CodeBadToken})
	if got := ans.header.Values(apitype.WarningHeader); len(got) != 0 {
		t.Errorf("a wrong token over TCP warns %q", got)
	}

	out, stderr, code := harness.RunCLI(t, []string{"GPUMETER_URL=unix://" + sock, "GPUMETER_TOKEN=", "GPUMETER_CLIENT_CONFIG=", "XDG_CONFIG_HOME=" + t.TempDir()}, "ps")
	if code != 0 {
		t.Fatalf("ps over the socket exited %d: %s", code, stderr)
	}
	for _, want := range []string{"alice-train", "bob-notebook", "carol-idle", "dave"} {
		if !strings.Contains(out, want) {
			t.Errorf("ps over the socket does not show %s:\n%s", want, out)
		}
	}
}

// TestSecurityFlood: thousands of bad requests get their refusals, are
// audited (or counted as dropped), and metering goes on untouched.
func TestSecurityFlood(t *testing.T) {
	t.Parallel()
	aliceTok, alice := newTestToken(t, "alice", "alice", config.RoleUser, time.Time{})
	a := startSecure(t, secureSetup{tokens: []config.Token{alice}, yaml: "api:\n  rate_limit: 0\n"})
	ids := a.containerIDs(t)
	before := ticks(t, a.client, a.URL)
	begin := time.Now()

	flood := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: a.pki.tlsConfig(nil), MaxIdleConnsPerHost: 16,
	}}
	garbage := make([]byte, 300)
	if _, err := rand.Read(garbage); err != nil {
		t.Fatal(err)
	}
	// Each kind of bad request and the answer it must get.
	kinds := []struct {
		method, path, auth string
		body               []byte
		status             int
	}{
		{"GET", "/api/v1/containers", "Bearer gpm_" + strings.Repeat("A", 43), nil, http.StatusUnauthorized},
		{"GET", "/api/v1/gpus", "Basic cm9vdDpyb290", nil, http.StatusUnauthorized},
		{"POST", "/api/v1/containers/" + ids["bob-notebook"] + "/stop", "", garbage, http.StatusUnauthorized},
		{"POST", "/api/v1/containers/" + ids["alice-train"] + "/stop", "Bearer " + aliceTok, garbage, http.StatusBadRequest},
	}
	const total, workers = 4000, 16
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= total || failed.Load() > 0 {
					return
				}
				k := kinds[i%int64(len(kinds))]
				var body io.Reader
				if k.body != nil {
					body = bytes.NewReader(k.body)
				}
				req, _ := http.NewRequest(k.method, a.URL+k.path, body)
				if k.auth != "" {
					req.Header.Set("Authorization", k.auth)
				}
				resp, err := flood.Do(req)
				if err != nil {
					failed.Add(1)
					t.Errorf("request %d: %v", i, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != k.status {
					failed.Add(1)
					t.Errorf("request %d (%s %s): %s, want %d", i, k.method, k.path, resp.Status, k.status)
					return
				}
			}
		})
	}
	// Meanwhile the agent answers its real callers at once.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for polling := true; polling; {
		select {
		case <-done:
			polling = false
		case <-time.After(100 * time.Millisecond):
			send(t, a.client, "GET", a.URL+"/api/v1/containers", harness.AdminToken(), nil).want(t, "GET /api/v1/containers during the flood", http.StatusOK, "")
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	floodTook := time.Since(begin)
	// A few more ticks come: the sampler has not stalled.
	after := a.wantSampling(t, fmt.Sprintf("a flood of %d bad requests", total), before, 5)
	logMissed(t, "the flood", before, after)
	send(t, a.client, "GET", a.URL+"/healthz", "", nil).want(t, "GET /healthz after the flood", http.StatusOK, "")

	// Every refusal is in the audit log, on its own or in the count of a
	// sum, once the agent has written its sums on the way out; none is
	// dropped.
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not exit within 15 s of SIGTERM")
	}
	evs, err := a.auditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var denied, rejected, events int64
	for _, e := range evs {
		switch {
		case e.Action == audit.ActionDropped:
			t.Errorf("observations were dropped: %+v", e)
		case e.Kind == audit.KindAPI && e.Status == http.StatusUnauthorized && e.Outcome == audit.OutcomeDenied && e.Caller == "unknown":
			denied += max(e.Count, 1)
			events++
		case e.Kind == audit.KindAPI && e.Status == http.StatusBadRequest && e.Outcome == apitype.OutcomeRejected && e.Caller == "alice (token alice)":
			rejected += max(e.Count, 1)
			events++
		}
	}
	if denied != 3*total/4 || rejected != total/4 {
		t.Errorf("audit log stands for %d denials and %d rejections, want %d and %d", denied, rejected, 3*total/4, total/4)
	}
	t.Logf("%d bad requests in %s; audited %d denials, %d rejections in %d events; %g ticks, %g missed", total, floodTook, denied, rejected, events, after.taken-before.taken, after.missed-before.missed)
}

// TestSecurityDockerStop: a user stops her own container through the API
// and it really stops; another's is refused and keeps running.
func TestSecurityDockerStop(t *testing.T) {
	t.Parallel()
	cli := dockertest.Client(t)
	aliceC := harness.StartSleeper(t, cli, dockertest.Spec{Name: "sec-alice", Labels: map[string]string{"gpumeter.user": "alice"}})
	bobC := harness.StartSleeper(t, cli, dockertest.Spec{Name: "sec-bob", Labels: map[string]string{"gpumeter.user": "bob"}})
	// A process of the scenario plays in alice's container, so that the
	// agent reads the engine's inventory.
	scenario := pidScenario(t, "e2e-stop", "alice", aliceC.PID)
	aliceTok, alice := newTestToken(t, "alice", "alice", config.RoleUser, time.Time{})
	a := startSecure(t, secureSetup{tokens: []config.Token{alice}, sim: scenario, args: []string{"--docker-host", cli.DaemonHost()}})
	dockertest.WaitFor(t, harness.Settle, "the agent to list both containers", func() (bool, string) {
		ids := a.containerIDs(t)
		return ids[aliceC.Name] == aliceC.ID && ids[bobC.Name] == bobC.ID, fmt.Sprint(ids)
	})
	stop := func(s harness.Sleeper) string { return a.URL + "/api/v1/containers/" + s.ID + "/stop" }

	ans := send(t, a.client, "POST", stop(bobC), aliceTok, []byte(`{"timeout": "1s"}`))
	ans.want(t, "alice stopping bob's container", http.StatusNotFound, apitype.CodeNotFound)
	a.wantAudit(t, ans, auditView{Caller: "alice (token alice)", Role: "user", Action: "containers.stop", Outcome: audit.OutcomeDenied, Target: "container " + bobC.ID, Status: http.StatusForbidden})

	ans = send(t, a.client, "POST", stop(aliceC), aliceTok, []byte(`{"timeout": "5s", "reason": "done for today"}`))
	if ans.status != http.StatusOK {
		t.Fatalf("alice stopping her container: %d after %s; body %s", ans.status, ans.took, ans.body)
	}
	var res apitype.StopResponse
	ans.decode(t, &res)
	if res.ID != aliceC.ID || res.Name != aliceC.Name || !res.Stopped || res.Grace != "5s" || res.Killed() {
		t.Errorf("stop answered %+v, want %s stopped by SIGTERM within its 5s", res, aliceC.Name)
	}
	a.wantAudit(t, ans, auditView{
		Caller: "alice (token alice)", Role: "user", Action: "containers.stop", Outcome: audit.OutcomeAllowed,
		Target: "container " + aliceC.ID + " (" + aliceC.Name + ")", Error: "reason: done for today",
	})
	if st := dockertest.Inspect(t, cli, aliceC.ID).State; st.Running || st.ExitCode != dockertest.SleeperExitCode {
		t.Errorf("alice's container: running %v, exit code %d; want stopped by SIGTERM (%d)", st.Running, st.ExitCode, dockertest.SleeperExitCode)
	}
	if !dockertest.Inspect(t, cli, bobC.ID).State.Running {
		t.Errorf("bob's container was stopped")
	}
}

// TestServeDemoToken: a demo with no tokens configured makes an admin
// token for itself and prints it, with the page's address that signs in.
func TestServeDemoToken(t *testing.T) {
	t.Parallel()
	a := harness.Serve(t, []string{"GPUMETER_AUTH_TOKENS="}, "--demo", "--interval", "200ms")
	m := regexp.MustCompile(`demo admin token, valid while this demo runs: (gpm_\S+)`).FindStringSubmatch(a.Stderr.String())
	if m == nil {
		t.Fatalf("the demo printed no token:\n%s", a.Stderr)
	}
	if !strings.Contains(a.Stderr.String(), "/#token="+m[1]) {
		t.Errorf("the demo printed no address that signs in:\n%s", a.Stderr)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	send(t, c, "GET", a.URL+"/api/v1/whoami", "", nil).want(t, "the demo without a token", http.StatusUnauthorized, auth.CodeNoCredentials)
	ans := send(t, c, "GET", a.URL+"/api/v1/whoami", m[1], nil)
	ans.want(t, "the demo with its token", http.StatusOK, "")
	var me apitype.Whoami
	ans.decode(t, &me)
	if me.Role != "admin" {
		t.Errorf("the demo's token is %+v, want an admin", me)
	}
}

// pidScenario writes a one-GPU scenario whose one container is played by
// the real process pid, so that the agent reads that container from the
// Docker engine's inventory.
func pidScenario(t *testing.T, node, name string, pid int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scenario.yaml")
	err := os.WriteFile(path, fmt.Appendf(nil, `version: 1
node: %s
duration: 1h
gpus:
  - count: 1
    model: NVIDIA A100-SXM4-80GB
    memory: 80GiB
    idle_power: 60W
    max_power: 400W
containers:
  - {name: %s, pid: %d, gpus: [0], phases: [{at: 0s, util: 50, memory: 1GiB}]}
`, node, name, pid), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
