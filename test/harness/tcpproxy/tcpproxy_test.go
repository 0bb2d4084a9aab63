package tcpproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	return r.ReadString('\n')
}

func TestStallHoldsTheBytesAndResumeDeliversThem(t *testing.T) {
	p := StartForTest(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, 10*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("before the stall: %q, %v", got, err)
	}
	p.Stall()
	if got, err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatalf("a stalled connection answered %q", got)
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("the held bytes after the stall: %q, %v", got, err)
	}
}

func TestDropResetsOpenConnectionsAndAcceptsNewOnes(t *testing.T) {
	p := StartForTest(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Drop()
	if _, err := roundTrip(c, r, 10*time.Second); err == nil {
		t.Fatal("a dropped connection still answered")
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	if got, err := roundTrip(c2, bufio.NewReader(c2), 10*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("a new connection after the drop: %q, %v", got, err)
	}
}
