package main

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// drainingServer keeps the webhook server (CRD conversion) serving for drain after the
// manager stopped it, while the manager goes on to release its Leases and return. A pod
// being replaced leaves its webhook Service's endpoints only once kube-proxy has caught
// up with its deletion: until then the API server may still send it a conversion
// request, which a closed port refuses, failing a v1alpha1 client's request ("connect:
// connection refused", seen in a rolling update by make test-upgrade). The process
// waits for the drain before it exits (Wait).
type drainingServer struct {
	webhook.Server
	drain time.Duration

	once sync.Once
	done chan struct{} // closed when the server stopped serving; nil until Start
}

func newDrainingServer(s webhook.Server, drain time.Duration) *drainingServer {
	return &drainingServer{Server: s, drain: drain}
}

// Start serves until drain after ctx ends; it returns when ctx ends, without waiting for
// the drain.
func (s *drainingServer) Start(ctx context.Context) error {
	done := make(chan struct{})
	s.once.Do(func() { s.done = done })
	serving, stop := context.WithCancel(context.WithoutCancel(ctx))
	failed := make(chan error, 1)
	go func() {
		defer close(done)
		failed <- s.Server.Start(serving)
	}()
	select {
	case err := <-failed:
		stop()
		return err
	case <-ctx.Done():
	}
	time.AfterFunc(s.drain, stop)
	return nil
}

// Wait returns once the server stopped serving, at once if it never started.
func (s *drainingServer) Wait() {
	s.once.Do(func() {})
	if s.done != nil {
		<-s.done
	}
}
