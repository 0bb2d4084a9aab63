package minio_test

import (
	"testing"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

func TestServesBucketsAcrossARestart(t *testing.T) {
	s := minio.StartForTest(t, minio.Options{})
	ctx := t.Context()
	if err := s.MakeBucket(ctx, "kept", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BucketExists(ctx, "kept"); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	ok, err := c.BucketExists(ctx, "kept")
	if err != nil || !ok {
		t.Fatalf("bucket after restart: exists=%v err=%v", ok, err)
	}
}

func TestTLSIsVerifiedAgainstTheTestCA(t *testing.T) {
	s := minio.StartForTest(t, minio.Options{TLS: true})
	if len(s.CAPEM) == 0 {
		t.Fatal("no CA for a TLS server")
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListBuckets(t.Context()); err != nil {
		t.Fatalf("list with the test CA: %v", err)
	}
	untrusting, err := miniogo.New(s.Endpoint, &miniogo.Options{Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.ListBuckets(t.Context()); err == nil {
		t.Fatal("a client without the test CA trusted the server")
	}
}

// Start and Restart return only once MinIO checks credentials: right after them, an
// unknown access key is refused as unknown, not with MinIO's "IAM sub-system not
// initialized yet" server error, which a loaded machine used to show to the first test
// request.
func TestChecksCredentialsAsSoonAsStarted(t *testing.T) {
	s := minio.StartForTest(t, minio.Options{})
	c, err := miniogo.New(s.Endpoint, &miniogo.Options{Creds: credentials.NewStaticV4("nobody", "wrong-secret-key", ""), Region: s.Region})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if i > 0 {
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
		}
		_, err = c.ListBuckets(t.Context())
		if code := miniogo.ToErrorResponse(err).Code; code != "InvalidAccessKeyId" {
			t.Fatalf("start %d: an unknown access key right after (re)start: got %q (%v), want InvalidAccessKeyId", i, code, err)
		}
	}
}
