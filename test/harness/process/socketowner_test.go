package process

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

func TestSocketOwnerFindsTheProcessHoldingTheClientEnd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	// The server side knows the peer: the client's socket has it as its local address.
	client := netip.MustParseAddrPort(s.RemoteAddr().String())
	server := netip.MustParseAddrPort(s.LocalAddr().String())
	if pid, err := SocketOwner(client, server, []int{os.Getppid(), os.Getpid()}); err != nil || pid != os.Getpid() {
		t.Errorf("SocketOwner = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
	if pid, err := SocketOwner(client, server, []int{os.Getppid()}); err != nil || pid != 0 {
		t.Errorf("SocketOwner among other processes = %d, %v; want 0", pid, err)
	}
}
