// Package dns runs a tiny authoritative DNS server on a free loopback UDP port, answering
// A queries from a function the test supplies, for tests that need a name to resolve to
// addresses of their choosing (and to change its mind between two lookups, as a DNS
// rebinding attacker does). Point a Go resolver at it with Resolver. The local cluster's
// real node serves its Service names with it (cluster.Options.ClusterDNS).
package dns

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers DNS queries over UDP.
type Server struct {
	// Addr is the server's host:port.
	Addr string

	conn   net.PacketConn
	answer func(name string) []netip.Addr
	mu     sync.Mutex
	count  map[string]int
	done   chan struct{}
}

// Start serves until Stop. answer returns the IPv4 addresses of a fully qualified name
// in lower case without the trailing dot, or nil for NXDOMAIN; AAAA queries get no records.
func Start(answer func(name string) []netip.Addr) (*Server, error) {
	return StartOn("127.0.0.1:0", answer)
}

// StartOn is Start on the UDP address addr (host:port).
func StartOn(addr string, answer func(name string) []netip.Addr) (*Server, error) {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: conn.LocalAddr().String(), conn: conn, answer: answer, count: map[string]int{}, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

// Stop closes the server and waits for it to end.
func (s *Server) Stop() {
	_ = s.conn.Close()
	<-s.done
}

// Queries returns how many A queries for name the server answered.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[name]
}

// Resolver returns a resolver that asks only this server.
func (s *Server) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.Addr)
	}}
}

func (s *Server) serve() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply, ok := s.reply(buf[:n]); ok {
			_, _ = s.conn.WriteTo(reply, from)
		}
	}
}

func (s *Server) reply(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	header, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	var addrs []netip.Addr
	if q.Type == dnsmessage.TypeA {
		s.mu.Lock()
		s.count[name]++
		s.mu.Unlock()
		addrs = s.answer(name)
	}
	rcode := dnsmessage.RCodeSuccess
	if q.Type == dnsmessage.TypeA && addrs == nil {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: header.ID, Response: true, Authoritative: true,
		RecursionDesired: header.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	for _, a := range addrs {
		if !a.Is4() {
			continue
		}
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 0}
		if err := b.AResource(rh, dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
