package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// startWebhook serves a webhook server with drain on a free loopback port and returns
// its address and the function that stops it as the manager does (its context ends).
func startWebhook(t *testing.T, drain time.Duration) (*drainingServer, string, context.CancelFunc) {
	t.Helper()
	dir, err := selfSignedServingCert()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := newDrainingServer(webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir}), drain)
	s.Register("/convert", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- s.Start(ctx) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(30 * time.Second)
	for convert(addr) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook server does not serve on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop := func() {
		cancel()
		select {
		case err := <-returned:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(time.Second):
			t.Error("Start did not return when the manager stopped it")
		}
	}
	t.Cleanup(func() { cancel(); s.Wait() })
	return s, addr, stop
}

// convert sends a request as the API server does, on a new connection.
func convert(addr string) error {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // G402: the test's self-signed certificate
	resp, err := c.Post("https://"+addr+"/convert", "application/json", nil)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// A pod being replaced gets conversion requests until kube-proxy drops it: the webhook
// keeps serving them for the drain after the manager stopped, the manager's shutdown does
// not wait for it, and the process does (Wait).
func TestTheWebhookServesThroughItsDrain(t *testing.T) {
	const drain = 2 * time.Second
	s, addr, stop := startWebhook(t, drain)
	stopped := time.Now()
	stop()
	for time.Since(stopped) < drain-500*time.Millisecond {
		if err := convert(addr); err != nil {
			t.Fatalf("%s after the manager stopped, within the drain: %v", time.Since(stopped).Round(time.Millisecond), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waited := make(chan struct{})
	go func() { s.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(drain + 10*time.Second):
		t.Fatal("Wait did not return after the drain")
	}
	if time.Since(stopped) < drain {
		t.Errorf("Wait returned %s after the stop, before the drain of %s", time.Since(stopped), drain)
	}
	if err := convert(addr); err == nil {
		t.Error("the webhook still serves after its drain")
	}
}

// Without a drain the port closes with the manager: the request a terminating pod then
// gets is refused (what failed v1alpha1 reads in a rolling update).
func TestWithoutADrainTheWebhookRefusesAtOnce(t *testing.T) {
	s, addr, stop := startWebhook(t, 0)
	stop()
	s.Wait()
	var opErr *net.OpError
	if err := convert(addr); !errors.As(err, &opErr) {
		t.Errorf("a request after the stop: %v, want the connection refused", err)
	}
}

func TestWaitWithoutStartReturns(t *testing.T) {
	s := newDrainingServer(webhook.NewServer(webhook.Options{}), time.Minute)
	done := make(chan struct{})
	go func() { s.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait blocked for a server that never started")
	}
}
