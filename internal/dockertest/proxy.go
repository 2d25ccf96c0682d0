package dockertest

import (
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// SocketProxy forwards a Unix socket to another (the engine's), and can be
// cut (listener and every connection closed) and restored on the same
// path, so that a test sees what a client does when the daemon goes away.
type SocketProxy struct {
	path, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewSocketProxy starts a proxy to the Unix socket at target on a path in
// t.TempDir(); it is stopped when the test ends.
func NewSocketProxy(t testing.TB, target string) *SocketProxy {
	t.Helper()
	p := &SocketProxy{path: filepath.Join(t.TempDir(), "docker.sock"), target: target, conns: make(map[net.Conn]struct{})}
	p.Start(t)
	t.Cleanup(p.Stop)
	return p
}

// Path is the proxy's socket; a client reaches it as "unix://"+Path().
func (p *SocketProxy) Path() string { return p.path }

// Start listens again after Stop.
func (p *SocketProxy) Start(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
}

func (p *SocketProxy) serve(c net.Conn) {
	up, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// track registers a connection pair, or closes it when the proxy has been
// cut meanwhile.
func (p *SocketProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// Stop cuts the proxy: it closes the listener (which removes the socket
// file) and every connection, and waits until nothing is left running.
func (p *SocketProxy) Stop() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
