// Package minio runs a real MinIO server on a free loopback port for tests and the demo:
// generated credentials, a private data directory, optional TLS from a test CA, and stop
// and restart on the same address for outage tests.
package minio

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Options configures a server.
type Options struct {
	// Dir holds data, certificates and the log; it must exist and be private to this server.
	Dir string
	// TLS serves HTTPS with a certificate from a fresh test CA (see Server.CAPEM).
	TLS bool
	// Region is the server's region; empty means us-east-1.
	Region string
	// Port to listen on; 0 picks a free one.
	Port int
	// Host is the address to listen on; empty means 127.0.0.1. Pods on the local cluster's
	// real node reach the node's address (cluster.NodeIP), not the test's loopback.
	Host string
	// Implementation is the S3 server to run in MinIO's place (package
	// test/harness/versitygw has one); nil means MinIO.
	Implementation Implementation
}

// Implementation is an S3 server that a Server runs in MinIO's place, with the same
// generated key pair, address, region, data directory and TLS pair.
type Implementation interface {
	// Process returns the process that serves s, its TLS pair (when o.TLS) in certsDir
	// as public.crt and private.key.
	Process(s *Server, o Options, certsDir string) (*process.Process, error)
	// IAM reports whether it has an identity subsystem that comes up after the server
	// answers, which readiness then waits for.
	IAM() bool
}

// Server is a running (or stopped) MinIO, or the implementation run in its place.
type Server struct {
	// Endpoint is host:port; URL adds the scheme.
	Endpoint  string
	URL       string
	AccessKey string
	SecretKey string
	Region    string
	// CAPEM is the CA that signed the server certificate when TLS is on.
	CAPEM []byte

	opts Options
	proc *process.Process
}

// Start launches MinIO (or o.Implementation) and waits until it serves requests.
func Start(o Options) (*Server, error) {
	if o.Implementation == nil {
		o.Implementation = minioServer{}
	}
	var err error
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		if o.Port, err = process.FreePort(); err != nil {
			return nil, err
		}
	}
	s := &Server{
		Endpoint:  net.JoinHostPort(o.Host, strconv.Itoa(o.Port)),
		AccessKey: "test-" + randomHex(8),
		SecretKey: randomHex(20),
		Region:    o.Region,
		opts:      o,
	}
	certsDir := filepath.Join(o.Dir, "certs")
	if err := os.MkdirAll(certsDir, 0o700); err != nil {
		return nil, err
	}
	s.URL = "http://" + s.Endpoint
	if o.TLS {
		ca, err := certs.NewCA("minio-test-ca")
		if err != nil {
			return nil, err
		}
		pair, err := ca.Issue(certs.LeafOptions{CommonName: "minio", Hosts: []string{o.Host, "127.0.0.1", "localhost"}})
		if err != nil {
			return nil, err
		}
		if err := pair.Write(certsDir, "public.crt", "private.key"); err != nil {
			return nil, err
		}
		s.CAPEM = ca.CertPEM
		s.URL = "https://" + s.Endpoint
	}
	if s.proc, err = o.Implementation.Process(s, o, certsDir); err != nil {
		return nil, err
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// minioServer is MinIO.
type minioServer struct{}

func (minioServer) IAM() bool { return true }

func (minioServer) Process(s *Server, o Options, certsDir string) (*process.Process, error) {
	bin, err := tools.Path("minio")
	if err != nil {
		return nil, err
	}
	consolePort, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	return &process.Process{
		Name: "minio",
		Path: bin,
		Args: []string{
			"server", "--quiet",
			"--address", s.Endpoint,
			"--console-address", process.HostPort(consolePort),
			"--certs-dir", certsDir,
			filepath.Join(o.Dir, "data"),
		},
		Env: []string{
			"MINIO_ROOT_USER=" + s.AccessKey,
			"MINIO_ROOT_PASSWORD=" + s.SecretKey,
			"MINIO_REGION=" + o.Region,
			"MINIO_BROWSER=off",
			"MINIO_UPDATE=off",
			"MINIO_CALLHOME_ENABLE=off",
			"HOME=" + o.Dir,
		},
		LogPath: filepath.Join(o.Dir, "minio.log"),
	}, nil
}

func (s *Server) start() error {
	if err := s.proc.Start(); err != nil {
		return err
	}
	return process.WaitFor(s.proc, 60*time.Second, s.ready)
}

// ready reports whether MinIO answers S3 requests as it will for the tests: the health
// endpoint says ready well before the IAM subsystem is, and until IAM is up MinIO
// answers XMinioIAMNotInitialized where it would check credentials. So it checks both
// paths through IAM: the root credentials list buckets, and an unknown access key is
// refused as unknown.
func (s *Server) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	admin, err := s.Client()
	if err != nil {
		return err
	}
	if _, err := admin.ListBuckets(ctx); err != nil {
		return fmt.Errorf("list buckets as root: %w", err)
	}
	if !s.opts.Implementation.IAM() {
		return nil
	}
	stranger, err := miniogo.New(s.Endpoint, &miniogo.Options{
		Creds:     credentials.NewStaticV4("unknown-"+randomHex(4), randomHex(20), ""),
		Secure:    s.opts.TLS,
		Region:    s.Region,
		Transport: s.transport(),
	})
	if err != nil {
		return err
	}
	_, err = stranger.ListBuckets(ctx)
	if code := miniogo.ToErrorResponse(err).Code; code != "InvalidAccessKeyId" {
		return fmt.Errorf("an unknown access key: want InvalidAccessKeyId, got %q: %w", code, err)
	}
	return nil
}

// Stop ends the server and keeps its data, so Restart serves the same buckets again.
func (s *Server) Stop() error { return s.proc.Stop(10 * time.Second) }

// Restart starts a stopped server on the same address with the same data.
func (s *Server) Restart() error {
	if s.proc.Running() {
		return fmt.Errorf("minio is still running")
	}
	return s.start()
}

// PID returns the server's process ID.
func (s *Server) PID() int { return s.proc.PID() }

// LogPath returns the server's log file.
func (s *Server) LogPath() string { return s.proc.LogPath }

func (s *Server) transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if s.CAPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.CAPEM)
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return t
}

// Client returns an administrative S3 client, for tests to arrange and inspect buckets.
func (s *Server) Client() (*miniogo.Client, error) {
	return miniogo.New(s.Endpoint, &miniogo.Options{
		Creds:     credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure:    s.opts.TLS,
		Region:    s.Region,
		Transport: s.transport(),
	})
}

// MakeBucket creates a bucket, optionally with versioning or object lock.
func (s *Server) MakeBucket(ctx context.Context, name string, opts miniogo.MakeBucketOptions) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	if opts.Region == "" {
		opts.Region = s.Region
	}
	return c.MakeBucket(ctx, name, opts)
}

// TB is the part of testing.TB (and Ginkgo's GinkgoT) that StartForTest needs.
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// StartForTest starts a server in a test's temporary directory and stops it when the
// test ends.
func StartForTest(t TB, o Options) *Server {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := Start(o)
	if err != nil {
		t.Fatalf("start minio: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
