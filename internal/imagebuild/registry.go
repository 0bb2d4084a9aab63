package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// RegistryOptions configure StartRegistry.
type RegistryOptions struct {
	// BlobDir keeps blobs on disk in this directory (created when missing); empty keeps
	// them in memory. Manifests are always kept in memory: the registry starts empty.
	BlobDir string
	// Log receives one line per request; nil discards them.
	Log io.Writer
	// TLSAddr, when set, serves the same registry over TLS on this address too, with the
	// certificate and key in TLSCertFile and TLSKeyFile: for clients that speak only
	// HTTPS to a registry (operator-sdk pulls an index image that way).
	TLSAddr, TLSCertFile, TLSKeyFile string
}

// Registry is a running OCI distribution registry (go-containerregistry's
// pkg/registry) served over plain HTTP, and over TLS when asked.
type Registry struct {
	// Host is the registry's host:port, the first part of its image references.
	Host string
	// TLSHost is the TLS listener's host:port; empty without one.
	TLSHost string

	server *http.Server
	done   chan error
	// served counts the listeners whose Serve has not returned.
	served int
}

// StartRegistry serves a registry on addr: "127.0.0.1:0" picks a free loopback port.
// Plain HTTP: serve it on loopback or a private address only. Stop it with Close.
func StartRegistry(addr string, o RegistryOptions) (*Registry, error) {
	logTo := o.Log
	if logTo == nil {
		logTo = io.Discard
	}
	opts := []registry.Option{registry.Logger(log.New(logTo, "registry: ", log.LstdFlags))}
	if o.BlobDir != "" {
		if err := os.MkdirAll(o.BlobDir, 0o750); err != nil {
			return nil, err
		}
		opts = append(opts, registry.WithBlobHandler(registry.NewDiskBlobHandler(o.BlobDir)))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("registry: listen on %s: %w", addr, err)
	}
	r := &Registry{
		Host:   ln.Addr().String(),
		server: &http.Server{Handler: registry.New(opts...), ReadHeaderTimeout: 30 * time.Second},
		done:   make(chan error, 2),
		served: 1,
	}
	go func() { r.done <- r.server.Serve(ln) }()
	if o.TLSAddr != "" {
		tln, err := net.Listen("tcp", o.TLSAddr)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("registry: listen on %s: %w", o.TLSAddr, err), r.Close())
		}
		r.TLSHost = tln.Addr().String()
		r.served++
		go func() { r.done <- r.server.ServeTLS(tln, o.TLSCertFile, o.TLSKeyFile) }()
	}
	return r, nil
}

// Ref returns the reference of repository:tag (or repository@digest) in this registry:
// r.Ref("pause:1") is "127.0.0.1:PORT/pause:1".
func (r *Registry) Ref(repository string) string {
	return r.Host + "/" + repository
}

// Close stops the registry, waiting up to ten seconds for requests in flight.
func (r *Registry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.server.Shutdown(ctx)
	for range r.served {
		if serveErr := <-r.done; !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(err, serveErr)
		}
	}
	return err
}
