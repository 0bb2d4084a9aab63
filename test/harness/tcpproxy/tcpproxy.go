// Package tcpproxy is a TCP proxy that a test puts between a client and a server to
// break the connection from outside the code under test: stall it (bytes stop flowing
// both ways, connections stay open, as with a hung HTTP/2 connection to a dying API
// server) or drop it (every connection is reset).
package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards every connection accepted on Addr to a target address.
type Proxy struct {
	// Addr is the host:port the proxy listens on.
	Addr string

	target   string
	listener net.Listener
	done     chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// flowing is closed while bytes flow; a stall replaces it with an open channel.
	flowing chan struct{}
	closed  bool
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	flowing := make(chan struct{})
	close(flowing)
	p := &Proxy{Addr: l.Addr().String(), target: target, listener: l, done: make(chan struct{}),
		conns: map[net.Conn]struct{}{}, flowing: flowing}
	go p.serve()
	return p, nil
}

// TB is the part of testing.TB StartForTest needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// StartForTest starts a proxy and closes it when the test ends.
func StartForTest(t TB, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatalf("start TCP proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) serve() {
	defer close(p.done)
	for {
		c, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
	p.untrack(client, server)
}

// pipe copies src to dst, holding every chunk while the proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			flowing := p.flowing
			p.mu.Unlock()
			select {
			case <-flowing:
			case <-p.done:
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Stall stops the bytes on every connection, open or opened later, in both
// directions; the connections stay open.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // already stalled
	}
}

// Resume lets the bytes held by a stall and every later one flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// Drop resets every open connection; new connections are still accepted.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.listener.Close()
	<-p.done
	p.Drop()
}

// Open returns how many client connections are open.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}
