package pgtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Proxy is a TCP proxy between PostgreSQL clients and the test server that
// can fail the way networks do at the worst moments: it can forward a
// COMMIT and cut the connection once the server has answered, so the
// transaction is committed but the client never hears it; and it can cut
// a client off altogether (a partition) and let it back.
//
// It reads the protocol's framing only, in both directions, so clients
// must not ask for TLS (the DSN it gives says sslmode=disable).
type Proxy struct {
	ln     net.Listener
	dialer func() (net.Conn, error)

	mu          sync.Mutex
	dropCommits int
	partitioned bool
	conns       map[*proxyConn]struct{}
	dropped     int // commits whose reply was cut
	commits     int // commits forwarded
	wg          sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	mu             sync.Mutex
	cutAtReady     bool // a COMMIT was forwarded: cut at its ReadyForQuery
}

// NewProxy starts a proxy in front of the database of dsn (from DSN) and
// returns it with a DSN that connects through it. It stops when t ends.
func NewProxy(t testing.TB, dsn string) (*Proxy, string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	network, addr := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") {
		network, addr = "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, conns: map[*proxyConn]struct{}{},
		dialer: func() (net.Conn, error) { return net.Dial(network, addr) }}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)

	u := url.URL{Scheme: "postgres", Host: ln.Addr().String(), Path: "/" + cfg.Database}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	u.RawQuery = "sslmode=disable"
	return p, u.String()
}

// DropNextCommits makes the proxy forward the next n COMMITs and cut each
// of their connections as soon as the server has answered, before the
// answer reaches the client.
func (p *Proxy) DropNextCommits(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropCommits += n
}

// Partition cuts every connection and refuses new ones until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.partitioned = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.cut()
	}
}

// Heal lets clients connect again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitioned = false
}

// Counts returns how many COMMITs the proxy forwarded and how many of
// their replies it cut.
func (p *Proxy) Counts() (commits, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commits, p.dropped
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Partition()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refused := p.partitioned
		p.mu.Unlock()
		if refused {
			client.Close()
			continue
		}
		server, err := p.dialer()
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() {
			p.fromClient(c)
			c.cut()
		})
		p.wg.Go(func() {
			p.fromServer(c)
			c.cut()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		})
	}
}

func (c *proxyConn) cut() {
	c.client.Close()
	c.server.Close()
}

// fromClient forwards the startup message and then message by message,
// arming the cut when a COMMIT is due to be dropped.
func (p *Proxy) fromClient(c *proxyConn) {
	// The startup message has no type byte: a length, then the rest.
	var n [4]byte
	if _, err := io.ReadFull(c.client, n[:]); err != nil {
		return
	}
	size := int(binary.BigEndian.Uint32(n[:]))
	if size < 4 || size > 1<<20 {
		return
	}
	start := make([]byte, size)
	copy(start, n[:])
	if _, err := io.ReadFull(c.client, start[4:]); err != nil {
		return
	}
	if _, err := c.server.Write(start); err != nil {
		return
	}
	for {
		typ, msg, err := readMessage(c.client)
		if err != nil {
			return
		}
		if isCommit(typ, msg) {
			p.mu.Lock()
			p.commits++
			if p.dropCommits > 0 {
				p.dropCommits--
				p.dropped++
				c.mu.Lock()
				c.cutAtReady = true
				c.mu.Unlock()
			}
			p.mu.Unlock()
		}
		if _, err := c.server.Write(msg); err != nil {
			return
		}
	}
}

// fromServer forwards the server's messages until a dropped COMMIT's
// ReadyForQuery, where it cuts the connection instead.
func (p *Proxy) fromServer(c *proxyConn) {
	for {
		typ, msg, err := readMessage(c.server)
		if err != nil {
			return
		}
		c.mu.Lock()
		cut := c.cutAtReady
		c.mu.Unlock()
		if cut {
			if typ == 'Z' {
				return // the server has committed; the client hears nothing
			}
			continue
		}
		if _, err := c.client.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one typed message: a byte, a length that counts
// itself, the body. msg is all of it.
func readMessage(r io.Reader) (typ byte, msg []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	size := int(binary.BigEndian.Uint32(h[1:]))
	if size < 4 || size > 1<<30 {
		return 0, nil, errors.New("bad message length")
	}
	msg = make([]byte, 1+size)
	copy(msg, h[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return h[0], msg, nil
}

// isCommit reports whether a client message commits: a simple query
// COMMIT, or one parsed for the extended protocol.
func isCommit(typ byte, msg []byte) bool {
	body := msg[5:]
	var query []byte
	switch typ {
	case 'Q':
		query = bytes.TrimRight(body, "\x00")
	case 'P':
		// Parse: statement name, NUL, query, NUL, ...
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			return false
		}
		rest := body[i+1:]
		if j := bytes.IndexByte(rest, 0); j >= 0 {
			query = rest[:j]
		}
	default:
		return false
	}
	q := strings.ToLower(strings.TrimSpace(strings.TrimRight(string(query), "; \n\t")))
	return q == "commit" || q == "end" || q == "commit transaction" || q == "commit work"
}
