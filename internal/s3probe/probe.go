package s3probe

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"k8s.io/utils/clock"

	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// Depth is how far into the bucket's data path a probe goes.
type Depth string

// Probe depths; each one implies the checks of the ones before it.
const (
	// DepthConnect reaches the endpoint the way every S3 request does (through the same
	// proxy, with the same verified TLS) and gets any HTTP answer.
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
	// DiscoverRegion lets a probe refused as signed for the wrong region, with the
	// bucket's region named in the answer, run once more signed for that region.
	DiscoverRegion bool
}

// DefaultRegion is the region requests are signed for when none is known.
const DefaultRegion = "us-east-1"

func (t Target) subject(host string) taxonomy.Subject {
	return taxonomy.Subject{Host: host, Bucket: t.Bucket, Region: t.Region, Timeout: t.Timeout}
}

// Result is what one probe found.
type Result struct {
	Depth Depth
	// Failure is nil when every check of the depth passed.
	Failure *taxonomy.Failure
	// Start is when the probe began; Duration is its wall time.
	Start    time.Time
	Duration time.Duration
	// CertNotAfter is the expiry of the endpoint's TLS certificate, when known.
	CertNotAfter time.Time
	// Region is the region the endpoint accepted requests signed for: set when the
	// probe got an answer about the bucket (Ready, or a failure of the bucket or its
	// credentials other than WrongRegion), empty when it did not.
	Region string
}

// Prober probes buckets through a Pool.
type Prober struct {
	Pool  *Pool
	Clock clock.PassiveClock
}

// Probe runs one probe of the target at its depth within its timeout. Deleting a canary
// object may take longer, up to another timeout but never past ctx's deadline, so the
// caller's deadline bounds the whole probe. Probe never returns an error: whatever went
// wrong is classified into Result.Failure.
func (p *Prober) Probe(ctx context.Context, t Target) Result {
	clk := p.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	start := clk.Now()
	res := Result{Depth: t.Depth, Start: start}
	probeCtx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()

	if t.Region == "" {
		t.Region = DefaultRegion
	}
	p.probeOnce(probeCtx, ctx, t, &res)
	if region, named := res.Failure.OtherRegion(t.Region); t.DiscoverRegion && named {
		// The endpoint named the bucket's region: once more, signed for it, within
		// the same timeout.
		t.Region = region
		p.probeOnce(probeCtx, ctx, t, &res)
	}
	if f := res.Failure; t.Depth != DepthConnect && (f == nil || (f.Check != taxonomy.CheckReachable && f.Reason != taxonomy.ReasonWrongRegion)) {
		res.Region = t.Region
	}
	if res.Failure != nil && !res.Failure.CertNotAfter.IsZero() {
		res.CertNotAfter = res.Failure.CertNotAfter
	}
	res.Duration = clk.Since(start)
	return res
}

// probeOnce runs the probe of t once, signed for t.Region, into res.
func (p *Prober) probeOnce(ctx, outer context.Context, t Target, res *Result) {
	conn, err := p.Pool.Conn(t.Endpoint)
	if err != nil {
		res.Failure = taxonomy.Classify(err, t.subject(t.Host()))
		return
	}
	res.Failure = p.probe(ctx, outer, conn, t)
	res.CertNotAfter = conn.CertNotAfter()
}

func (p *Prober) probe(ctx, outer context.Context, conn *Conn, t Target) *taxonomy.Failure {
	s := t.subject(conn.Host)
	switch t.Depth {
	case DepthConnect:
		return taxonomy.Classify(connect(ctx, conn), s)
	case DepthList:
		return taxonomy.Classify(listOne(ctx, conn.Client, t.Bucket), s)
	case DepthReadWrite:
		return readWrite(ctx, cleanupContext(outer, t.Timeout), conn.Client, t, s)
	default:
		return taxonomy.Classify(HeadBucket(ctx, conn.Client, t.Bucket), s)
	}
}

// connect sends an unauthenticated HEAD request for the endpoint's root through the
// transport the S3 requests use, so it takes the same proxy, the same endpoint policy and
// the same TLS verification, and agrees with the deeper probes on whether the endpoint
// can be reached. Any answer below 500 is an answer from an endpoint that is up (S3
// answers 403 to an anonymous request for its root); 5xx is a server error, as it is for
// an S3 request.
func connect(ctx context.Context, conn *Conn) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, conn.url+"/", nil)
	if err != nil {
		return err
	}
	resp, err := guarded{conn.entry.rt}.RoundTrip(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= http.StatusInternalServerError {
		return miniogo.ErrorResponse{StatusCode: resp.StatusCode, Code: resp.Status}
	}
	return nil
}

// HeadBucket checks that the bucket exists and the credentials may read it.
//
// The answer to a HeadBucket request has no body, so a refusal says only its status:
// 403 for a wrong key as for a missing permission, 400 for a request signed for another
// region, and versitygw answers an unknown access key 404, as if the bucket were
// missing. MinIO adds its error code in a header; AWS S3 and versitygw do not. So a
// refusal is explained by one ListObjectsV2 request (max-keys=1, which needs the same
// s3:ListBucket permission), whose error document names the code and, for a region,
// the bucket's. Only failed probes send it.
func HeadBucket(ctx context.Context, c *miniogo.Client, bucket string) error {
	ok, err := c.BucketExists(ctx, bucket)
	if err == nil && ok {
		return nil
	}
	if err == nil {
		err = miniogo.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404, BucketName: bucket}
	}
	if status := miniogo.ToErrorResponse(err).StatusCode; status < 400 || status >= 500 {
		return err
	}
	var why miniogo.ErrorResponse
	if listErr := listOne(ctx, c, bucket); errors.As(listErr, &why) && why.Code != "" {
		return listErr
	}
	return err
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
func readWrite(ctx context.Context, cleanup func() (context.Context, context.CancelFunc), c *miniogo.Client, t Target, s taxonomy.Subject) *taxonomy.Failure {
	want := make([]byte, canarySize)
	if _, err := rand.Read(want); err != nil {
		return taxonomy.NewFailure(taxonomy.ReasonUnclassified, err, "generate canary: %s", err)
	}
	info, err := c.PutObject(ctx, t.Bucket, t.CanaryKey, bytes.NewReader(want), int64(len(want)),
		miniogo.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
	if err != nil {
		return taxonomy.Classify(err, s)
	}
	got, readErr := getObject(ctx, c, t.Bucket, t.CanaryKey, info.VersionID)
	// Delete even when the read failed, and even when the probe's time is up: a canary
	// must not stay behind.
	delCtx, cancel := cleanup()
	defer cancel()
	delErr := c.RemoveObject(delCtx, t.Bucket, t.CanaryKey, miniogo.RemoveObjectOptions{VersionID: info.VersionID})
	switch {
	case readErr != nil:
		return taxonomy.Classify(readErr, s)
	case !bytes.Equal(got, want):
		return taxonomy.NewFailure(taxonomy.ReasonCanaryMismatch, nil, "the canary object %q read back from bucket %q differs from what was written", t.CanaryKey, t.Bucket)
	case delErr != nil:
		f := taxonomy.Classify(delErr, s)
		f.Message = fmt.Sprintf("deleting the canary object %q: %s", t.CanaryKey, f.Message)
		return f
	}
	return nil
}

// guardKey holds the check every request under a context must pass before it is sent.
type guardKey struct{}

// WithGuard returns ctx whose S3 requests (those of probes and every other call through
// a Pool's clients, cleanups included) are each sent only if guard returns nil, asked
// right before the request leaves: the request fails with guard's error, unsent, when
// it does not. It is how a replica stops its requests the instant its right to send
// them ends, rather than when a cancellation reaches them.
func WithGuard(ctx context.Context, guard func() error) context.Context {
	return context.WithValue(ctx, guardKey{}, guard)
}

// guarded is the RoundTripper of a Pool's clients: it asks the request's guard, if any.
type guarded struct{ rt http.RoundTripper }

func (g guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	if guard, ok := req.Context().Value(guardKey{}).(func() error); ok {
		if err := guard(); err != nil {
			if req.Body != nil {
				_ = req.Body.Close() // a RoundTripper closes the body, also on an error
			}
			return nil, err
		}
	}
	return g.rt.RoundTrip(req)
}

// cleanupKey holds the context that cleanups under a probe's context end with.
type cleanupKey struct{}

// WithCleanupContext returns ctx whose probes' cleanups (deleting a canary) end when
// parent ends: they outlive the cancellation of the probe itself, but not parent's.
func WithCleanupContext(ctx, parent context.Context) context.Context {
	return context.WithValue(ctx, cleanupKey{}, parent)
}

// cleanupContext returns the context for deleting a canary: not canceled with the probe
// (a canary must not stay behind because the probe ran out of time, or the process is
// shutting down), lasting at most timeout and never past outer's deadline, and ending
// with the cleanup context set by WithCleanupContext, if any.
func cleanupContext(outer context.Context, timeout time.Duration) func() (context.Context, context.CancelFunc) {
	return func() (context.Context, context.CancelFunc) {
		deadline := time.Now().Add(timeout)
		if d, ok := outer.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		ctx, cancel := context.WithDeadline(context.WithoutCancel(outer), deadline)
		if parent, ok := outer.Value(cleanupKey{}).(context.Context); ok {
			stop := context.AfterFunc(parent, cancel)
			return ctx, func() { stop(); cancel() }
		}
		return ctx, cancel
	}
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
