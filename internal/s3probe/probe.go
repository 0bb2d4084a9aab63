package s3probe

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"k8s.io/utils/clock"
)

// Depth is how far into the bucket's data path a probe goes.
type Depth string

// Probe depths; each one implies the checks of the ones before it.
const (
	// DepthConnect opens a TCP connection and, for https, completes a verified TLS handshake.
	DepthConnect Depth = "Connect"
	// DepthHeadBucket sends an authenticated HeadBucket request.
	DepthHeadBucket Depth = "HeadBucket"
	// DepthList lists at most one object (ListObjectsV2, max-keys=1).
	DepthList Depth = "List"
	// DepthReadWrite puts, gets, compares and deletes a canary object.
	DepthReadWrite Depth = "ReadWrite"
)

// Target is one bucket to probe.
type Target struct {
	Endpoint
	Bucket  string
	Depth   Depth
	Timeout time.Duration
	// CanaryKey is the object key the ReadWrite depth writes and deletes.
	CanaryKey string
}

func (t Target) subject(host string) Subject {
	return Subject{Host: host, Bucket: t.Bucket, Region: t.Region, Timeout: t.Timeout}
}

// Result is what one probe found.
type Result struct {
	Depth Depth
	// Failure is nil when every check of the depth passed.
	Failure *Failure
	// Start is when the probe began; Duration is its wall time.
	Start    time.Time
	Duration time.Duration
	// CertNotAfter is the expiry of the endpoint's TLS certificate, when known.
	CertNotAfter time.Time
}

// Prober probes buckets through a Pool.
type Prober struct {
	Pool  *Pool
	Clock clock.PassiveClock
}

// Probe runs one probe of the target at its depth within its timeout. It never returns
// an error: whatever went wrong is classified into Result.Failure.
func (p *Prober) Probe(ctx context.Context, t Target) Result {
	clk := p.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	start := clk.Now()
	res := Result{Depth: t.Depth, Start: start}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()

	conn, err := p.Pool.Conn(t.Endpoint)
	if err != nil {
		res.Failure = Classify(err, t.subject(t.Host()))
	} else {
		res.Failure = p.probe(ctx, conn, t)
		res.CertNotAfter = conn.CertNotAfter()
	}
	if res.Failure != nil && !res.Failure.CertNotAfter.IsZero() {
		res.CertNotAfter = res.Failure.CertNotAfter
	}
	res.Duration = clk.Since(start)
	return res
}

func (p *Prober) probe(ctx context.Context, conn *Conn, t Target) *Failure {
	s := t.subject(conn.Host)
	switch t.Depth {
	case DepthConnect:
		return Classify(connect(ctx, conn), s)
	case DepthList:
		return Classify(listOne(ctx, conn.Client, t.Bucket), s)
	case DepthReadWrite:
		return readWrite(ctx, conn.Client, t, s)
	default:
		return Classify(HeadBucket(ctx, conn.Client, t.Bucket), s)
	}
}

// connect dials the endpoint and, for https, completes a TLS handshake verified the
// same way the S3 requests verify it.
func connect(ctx context.Context, conn *Conn) error {
	var d net.Dialer
	addr := dialAddress(conn.Host, conn.secure)
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = raw.Close() }()
	if !conn.secure {
		return nil
	}
	host, _, _ := net.SplitHostPort(addr)
	cfg := conn.entry.tlsCfg.Clone()
	cfg.ServerName = host
	return tls.Client(raw, cfg).HandshakeContext(ctx)
}

// dialAddress is the host:port to dial for an endpoint URL's host, which names its port
// only when it is not the scheme's default.
func dialAddress(host string, secure bool) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "80"
	if secure {
		port = "443"
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), port)
}

// HeadBucket checks that the bucket exists and the credentials may read it.
func HeadBucket(ctx context.Context, c *miniogo.Client, bucket string) error {
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return err
	}
	if !ok {
		return miniogo.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404, BucketName: bucket}
	}
	return nil
}

// listOne sends one ListObjectsV2 request with max-keys=1.
func listOne(ctx context.Context, c *miniogo.Client, bucket string) error {
	noOwner := false
	for obj := range c.ListObjectsIter(ctx, bucket, miniogo.ListObjectsOptions{MaxKeys: 1, Recursive: true, FetchOwner: &noOwner}) {
		return obj.Err // the first item ends the listing: one request
	}
	return nil
}

// canarySize is the canary object's size: small, and random so a stale or cached read
// cannot pass the comparison.
const canarySize = 64

// readWrite puts a random canary object, reads it back, compares it and deletes the
// exact version it wrote, so neither a version nor a delete marker stays behind.
func readWrite(ctx context.Context, c *miniogo.Client, t Target, s Subject) *Failure {
	want := make([]byte, canarySize)
	if _, err := rand.Read(want); err != nil {
		return NewFailure(ReasonUnknown, err, "generate canary: %s", err)
	}
	info, err := c.PutObject(ctx, t.Bucket, t.CanaryKey, bytes.NewReader(want), int64(len(want)),
		miniogo.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
	if err != nil {
		return Classify(err, s)
	}
	got, readErr := getObject(ctx, c, t.Bucket, t.CanaryKey, info.VersionID)
	// Delete even when the read failed, and even when the probe's time is up: a canary
	// must not stay behind. The extra time is bounded by the probe timeout.
	delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.Timeout)
	defer cancel()
	delErr := c.RemoveObject(delCtx, t.Bucket, t.CanaryKey, miniogo.RemoveObjectOptions{VersionID: info.VersionID})
	switch {
	case readErr != nil:
		return Classify(readErr, s)
	case !bytes.Equal(got, want):
		return NewFailure(ReasonCanaryMismatch, nil, "the canary object %q read back from bucket %q differs from what was written", t.CanaryKey, t.Bucket)
	case delErr != nil:
		f := Classify(delErr, s)
		f.Message = fmt.Sprintf("deleting the canary object %q: %s", t.CanaryKey, f.Message)
		return f
	}
	return nil
}

func getObject(ctx context.Context, c *miniogo.Client, bucket, key, versionID string) ([]byte, error) {
	obj, err := c.GetObject(ctx, bucket, key, miniogo.GetObjectOptions{VersionID: versionID})
	if err != nil {
		return nil, err
	}
	defer func() { _ = obj.Close() }()
	data, err := io.ReadAll(io.LimitReader(obj, canarySize+1))
	if err != nil {
		var resp miniogo.ErrorResponse
		if errors.As(err, &resp) {
			return nil, resp
		}
		return nil, err
	}
	return data, nil
}
