package tinyproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

func TestANameOnlyTheProxyResolvesIsServedAndCounted(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "upstream")
	}))
	defer upstream.Close()
	port := upstream.Listener.Addr().(*net.TCPAddr).Port
	const name = "only-the-proxy.tinyproxy.test"
	p := StartForTest(t, Options{Hosts: map[string]netip.Addr{name: netip.MustParseAddr("127.0.0.1")}, ConnectPorts: []int{port}})

	if _, err := net.LookupHost(name); err == nil {
		t.Fatalf("%s resolves outside the proxy's namespace too", name)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(p.URL)}}
	resp, err := hc.Get("http://" + net.JoinHostPort(name, strconv.Itoa(port)) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "upstream" {
		t.Fatalf("through the proxy: %s %q", resp.Status, body)
	}
	if err := connect(p, net.JoinHostPort(name, strconv.Itoa(port))); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Requests(name); err != nil || n != 2 {
		t.Errorf("Requests(%q) = %d, %v; want the GET and the CONNECT", name, n, err)
	}
	if n, err := p.Tunnels(net.JoinHostPort(name, strconv.Itoa(port))); err != nil || n != 1 {
		t.Errorf("Tunnels to %s:%d = %d, %v; want the CONNECT only", name, port, n, err)
	}
	if n, err := p.Tunnels(net.JoinHostPort(name, strconv.Itoa(port+1))); err != nil || n != 0 {
		t.Errorf("Tunnels to another port = %d, %v", n, err)
	}
	if n, err := p.Requests("other.tinyproxy.test"); err != nil || n != 0 {
		t.Errorf("Requests for a name nobody asked for = %d, %v", n, err)
	}
}

// connect opens a CONNECT tunnel through the proxy and reads one answer through it.
func connect(p *Proxy, target string) error {
	c, err := net.DialTimeout("tcp", p.URL.Host, 5*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return err
	}
	_ = resp.Body.Close() // a CONNECT answer has none: the tunnel follows
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT %s: %s", target, resp.Status)
	}
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target); err != nil {
		return err
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "upstream" {
		return fmt.Errorf("through the tunnel: %s %q", resp.Status, body)
	}
	return nil
}

func TestRequestedHostReadsTinyproxysRequestLines(t *testing.T) {
	for line, want := range map[string]string{
		"CONNECT   Nov 27 09:30:28.522 [5680]: Request (file descriptor 5): GET http://a.test:9000/x HTTP/1.1\n": "a.test",
		"CONNECT   Nov 27 09:30:28.633 [5680]: Request (file descriptor 5): CONNECT b.test:9000 HTTP/1.1\n":      "b.test",
		"CONNECT   Nov 27 09:30:28.521 [5680]: Connect (file descriptor 5): 127.0.0.1\n":                         "",
		"INFO      Nov 27 09:30:28.525 [5680]: No upstream proxy for a.test\n":                                   "",
		"CONNECT   Nov 27 09:30:28.522 [5680]: Request (file descriptor 5): GET /origin-form HTTP/1.1\n":         "",
	} {
		host, ok := requestedHost(line)
		if host != want || ok != (want != "") {
			t.Errorf("requestedHost(%q) = %q, %v; want %q", line, host, ok, want)
		}
	}
}
