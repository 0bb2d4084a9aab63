package minio_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

// put sends a signed PUT of an object through the proxy whose body is what body
// yields, declared as size bytes long (the payload unsigned, so that MinIO reads the
// body as it comes).
func put(ctx context.Context, t *testing.T, s *minio.Server, p *minio.Proxy, key string, body io.Reader, size int64) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, p.URL+"/bucket/"+key, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	req = signer.SignV4(*req, s.AccessKey, s.SecretKey, "", s.Region)
	return http.DefaultClient.Do(req)
}

func startWithProxy(t *testing.T) (*minio.Server, *minio.Proxy, chan minio.Exchange) {
	t.Helper()
	s := minio.StartForTest(t, minio.Options{})
	if err := s.MakeBucket(t.Context(), "bucket", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	p := s.StartProxyForTest(t)
	recorded := make(chan minio.Exchange, 10)
	p.Record(func(e minio.Exchange) { recorded <- e })
	return s, p, recorded
}

// halfBody is how much of its body the abandoned request sends.
const halfBody = 64 << 10

// A request whose sender stops half way through its body (as a process paused in the
// middle of sending one cancels it when it continues) is recorded as aborted, and
// MinIO did nothing with it; a whole one is not.
func TestProxyRecordsARequestItsSenderAbandonedHalfWayAsAborted(t *testing.T) {
	s, p, recorded := startWithProxy(t)

	resp, err := put(t.Context(), t, s, p, "whole", strings.NewReader("0123456789"), 10)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("whole PUT: %s", resp.Status)
	}
	if e := <-recorded; e.Aborted || e.Status != http.StatusOK {
		t.Fatalf("a whole request was recorded as %+v", e)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	body, w := io.Pipe()
	arrived := make(chan struct{}, 1)
	p.Observe(func(*http.Request) { arrived <- struct{}{} })
	done := make(chan error, 1)
	go func() {
		resp, err := put(ctx, t, s, p, "half", body, 2*halfBody)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	// More than the client's write buffer, so that the request leaves it.
	if _, err := w.Write(make([]byte, halfBody)); err != nil {
		t.Fatal(err)
	}
	<-arrived
	cancel()
	// The transport waits for its body's writer, which the pipe would hold forever.
	_ = w.CloseWithError(context.Canceled)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned PUT ended with %v", err)
	}
	select {
	case e := <-recorded:
		if !e.Aborted {
			t.Fatalf("a request abandoned half way was recorded as %+v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the abandoned request was not recorded")
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatObject(t.Context(), "bucket", "half", miniogo.StatObjectOptions{}); miniogo.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatalf("the abandoned object: %v", err)
	}
}

// A held answer is recorded when the server answered, with how long it is held, before
// its sender gets it.
func TestProxyRecordsAHeldAnswerBeforeItsSenderGetsIt(t *testing.T) {
	s, p, recorded := startWithProxy(t)
	const held = 2 * time.Second
	p.HoldAnswers(func(*http.Request) time.Duration { return held })
	got := make(chan time.Time, 1)
	go func() {
		resp, err := put(t.Context(), t, s, p, "held", strings.NewReader("0123456789"), 10)
		if err == nil {
			_ = resp.Body.Close()
		}
		got <- time.Now()
	}()
	e := <-recorded
	recordedAt := time.Now()
	if e.Held != held || e.Aborted || e.Status != http.StatusOK {
		t.Fatalf("a held answer was recorded as %+v", e)
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatObject(t.Context(), "bucket", "held", miniogo.StatObjectOptions{}); err != nil {
		t.Fatalf("the request whose answer is held did not take effect: %v", err)
	}
	if answered := <-got; answered.Sub(recordedAt) < held/2 {
		t.Fatalf("the sender got the answer %s after it was recorded, the hold is %s", answered.Sub(recordedAt), held)
	}
}
