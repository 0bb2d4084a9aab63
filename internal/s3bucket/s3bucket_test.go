package s3bucket_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/tags"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

var owner = s3bucket.Owner{UID: "0b5e6a1c-0000-4000-8000-000000000001", Name: "team-a/photos"}

func setup(t *testing.T) (*miniogo.Client, context.Context) {
	t.Helper()
	s3 := minio.StartForTest(t, minio.Options{})
	c, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c, t.Context()
}

func put(t *testing.T, c *miniogo.Client, bucket, key string) {
	t.Helper()
	if _, err := c.PutObject(t.Context(), bucket, key, bytes.NewReader([]byte("data")), 4, miniogo.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

func tagMap(t *testing.T, c *miniogo.Client, bucket string) map[string]string {
	t.Helper()
	got, err := c.GetBucketTagging(t.Context(), bucket)
	if err != nil {
		if miniogo.ToErrorResponse(err).Code == "NoSuchTagSet" {
			return map[string]string{}
		}
		t.Fatal(err)
	}
	return got.ToMap()
}

func setTags(t *testing.T, c *miniogo.Client, bucket string, m map[string]string) {
	t.Helper()
	tg, err := tags.NewTags(m, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetBucketTagging(t.Context(), bucket, tg); err != nil {
		t.Fatal(err)
	}
}

func versions(t *testing.T, c *miniogo.Client, bucket string) []string {
	t.Helper()
	var out []string
	for obj := range c.ListObjectsIter(t.Context(), bucket, miniogo.ListObjectsOptions{WithVersions: true, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		out = append(out, obj.Key+"@"+obj.VersionID)
	}
	return out
}

func TestEnsureCreatesAMissingBucketAndTagsIt(t *testing.T) {
	c, ctx := setup(t)
	unrecorded, err := s3bucket.Ensure(ctx, c, s3bucket.Request{Bucket: "created", Region: "us-east-1", Owner: owner})
	if err != nil || unrecorded.State != s3bucket.StateMissing {
		t.Fatalf("Ensure before the creation is recorded = %+v, %v; want Missing", unrecorded, err)
	}
	if ok, err := c.BucketExists(ctx, "created"); err != nil || ok {
		t.Fatalf("the bucket was created before the creation was recorded (%v)", err)
	}
	got, err := s3bucket.Ensure(ctx, c, s3bucket.Request{Bucket: "created", Region: "us-east-1", Owner: owner, CreateRecorded: true})
	if err != nil || got.State != s3bucket.StateCreated {
		t.Fatalf("Ensure = %+v, %v; want Created", got, err)
	}
	if tg := tagMap(t, c, "created"); tg[s3bucket.TagOwnerUID] != owner.UID || tg[s3bucket.TagOwnerName] != owner.Name {
		t.Errorf("tags = %v, want the owner's", tg)
	}
	again, err := s3bucket.Ensure(ctx, c, s3bucket.Request{Bucket: "created", Region: "us-east-1", Owner: owner, CreateRecorded: true})
	if err != nil || again.State != s3bucket.StateOwned {
		t.Errorf("second Ensure = %+v, %v; want Owned", again, err)
	}
}

func TestNotControlledByUs(t *testing.T) {
	c, ctx := setup(t)
	n := 0
	for name, tc := range map[string]struct {
		tags         map[string]string
		adopt        string
		wantState    s3bucket.State
		wantOtherUID string
	}{
		"an untagged bucket is not ours": {
			tags: map[string]string{"team": "a"}, wantState: s3bucket.StateNotOurs,
		},
		"a bucket tagged with another UID is not ours": {
			tags: map[string]string{s3bucket.TagOwnerUID: "other-uid"}, wantState: s3bucket.StateNotOurs, wantOtherUID: "other-uid",
		},
		"adopt true does not take a bucket tagged with another UID": {
			tags: map[string]string{s3bucket.TagOwnerUID: "other-uid"}, adopt: "true", wantState: s3bucket.StateNotOurs, wantOtherUID: "other-uid",
		},
		"adopt naming another UID does not take an untagged bucket": {
			tags: map[string]string{"team": "a"}, adopt: "other-uid", wantState: s3bucket.StateNotOurs,
		},
	} {
		t.Run(name, func(t *testing.T) {
			n++
			bucket := fmt.Sprintf("foreign-%d", n)
			if err := c.MakeBucket(ctx, bucket, miniogo.MakeBucketOptions{}); err != nil {
				t.Fatal(err)
			}
			setTags(t, c, bucket, tc.tags)
			put(t, c, bucket, "keep/me")
			got, err := s3bucket.Ensure(ctx, c, s3bucket.Request{Bucket: bucket, Region: "us-east-1", Owner: owner, Adopt: tc.adopt})
			if err != nil || got.State != tc.wantState || got.OtherUID != tc.wantOtherUID {
				t.Fatalf("Ensure = %+v, %v; want %s (other %q)", got, err, tc.wantState, tc.wantOtherUID)
			}
			if tg := tagMap(t, c, bucket); !maps.Equal(tg, tc.tags) {
				t.Errorf("tags changed to %v, want %v", tg, tc.tags)
			}
			if v := versions(t, c, bucket); len(v) != 1 || !strings.HasPrefix(v[0], "keep/me@") {
				t.Errorf("objects changed: %v", v)
			}
		})
	}
}

func TestAdoptionTagsTheBucketAndKeepsItsTags(t *testing.T) {
	c, ctx := setup(t)
	for name, tc := range map[string]struct {
		tags  map[string]string
		adopt string
	}{
		"adopt true takes an untagged bucket":          {tags: map[string]string{"team": "a"}, adopt: "true"},
		"adopt naming the former owner's UID takes it": {tags: map[string]string{"team": "a", s3bucket.TagOwnerUID: "former"}, adopt: "former"},
	} {
		t.Run(name, func(t *testing.T) {
			bucket := "adopt-" + tc.adopt
			if err := c.MakeBucket(ctx, bucket, miniogo.MakeBucketOptions{}); err != nil {
				t.Fatal(err)
			}
			setTags(t, c, bucket, tc.tags)
			got, err := s3bucket.Ensure(ctx, c, s3bucket.Request{Bucket: bucket, Region: "us-east-1", Owner: owner, Adopt: tc.adopt})
			if err != nil || got.State != s3bucket.StateAdopted {
				t.Fatalf("Ensure = %+v, %v; want Adopted", got, err)
			}
			tg := tagMap(t, c, bucket)
			if tg["team"] != "a" || tg[s3bucket.TagOwnerUID] != owner.UID {
				t.Errorf("tags = %v, want team=a kept and the owner's UID", tg)
			}
		})
	}
}

func TestDeleteFollowsTheNonEmptyStrategy(t *testing.T) {
	c, ctx := setup(t)
	owned := func(t *testing.T, bucket string, opts miniogo.MakeBucketOptions) {
		t.Helper()
		if err := c.MakeBucket(ctx, bucket, opts); err != nil {
			t.Fatal(err)
		}
		setTags(t, c, bucket, map[string]string{s3bucket.TagOwnerUID: owner.UID})
	}
	exists := func(bucket string) bool {
		ok, err := c.BucketExists(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	t.Run("an empty owned bucket is deleted under every strategy", func(t *testing.T) {
		for _, st := range []phalanksv1beta1.NonEmptyStrategy{phalanksv1beta1.NonEmptyFail, phalanksv1beta1.NonEmptyDeleteIfEmpty, phalanksv1beta1.NonEmptyForceEmpty} {
			bucket := "empty-" + strings.ToLower(string(st))
			owned(t, bucket, miniogo.MakeBucketOptions{})
			got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: bucket, UID: owner.UID, Strategy: st, Budget: 100})
			if err != nil || got.Outcome != s3bucket.OutcomeDeleted || exists(bucket) {
				t.Errorf("%s: Delete = %+v, %v; exists=%v", st, got, err, exists(bucket))
			}
		}
	})
	t.Run("a missing bucket is gone", func(t *testing.T) {
		got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "never-created", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 100})
		if err != nil || got.Outcome != s3bucket.OutcomeGone {
			t.Errorf("Delete = %+v, %v; want Gone", got, err)
		}
	})
	t.Run("a bucket without our tag is never deleted, not even by ForceEmpty", func(t *testing.T) {
		if err := c.MakeBucket(ctx, "not-ours", miniogo.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
		put(t, c, "not-ours", "data")
		got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "not-ours", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 100})
		if err != nil || got.Outcome != s3bucket.OutcomeNotOurs || len(versions(t, c, "not-ours")) != 1 {
			t.Errorf("Delete = %+v, %v; want NotOurs with the data kept", got, err)
		}
	})
	t.Run("Fail keeps a non-empty bucket and its data", func(t *testing.T) {
		owned(t, "full-fail", miniogo.MakeBucketOptions{})
		put(t, c, "full-fail", "data")
		got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "full-fail", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyFail, Budget: 100})
		if err != nil || got.Outcome != s3bucket.OutcomeBlockedNonEmpty || len(versions(t, c, "full-fail")) != 1 {
			t.Errorf("Delete = %+v, %v; want BlockedNonEmpty with the data kept", got, err)
		}
	})
	t.Run("DeleteIfEmpty leaves a non-empty bucket with its data", func(t *testing.T) {
		owned(t, "full-ifempty", miniogo.MakeBucketOptions{})
		put(t, c, "full-ifempty", "data")
		got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "full-ifempty", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyDeleteIfEmpty, Budget: 100})
		if err != nil || got.Outcome != s3bucket.OutcomeLeftNonEmpty || len(versions(t, c, "full-ifempty")) != 1 {
			t.Errorf("Delete = %+v, %v; want LeftNonEmpty with the data kept", got, err)
		}
	})
	t.Run("ForceEmpty removes every version and delete marker in budgeted steps", func(t *testing.T) {
		owned(t, "full-versioned", miniogo.MakeBucketOptions{})
		if err := c.EnableVersioning(ctx, "full-versioned"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			put(t, c, "full-versioned", "a")
			put(t, c, "full-versioned", "dir/b")
		}
		if err := c.RemoveObject(ctx, "full-versioned", "a", miniogo.RemoveObjectOptions{}); err != nil { // a delete marker
			t.Fatal(err)
		}
		first, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "full-versioned", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 4})
		if err != nil || first.Outcome != s3bucket.OutcomeEmptying || first.Removed != 4 {
			t.Fatalf("first Delete = %+v, %v; want Emptying after 4", first, err)
		}
		second, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "full-versioned", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 4})
		if err != nil || second.Outcome != s3bucket.OutcomeDeleted || second.Removed != 3 || exists("full-versioned") {
			t.Errorf("second Delete = %+v, %v; want Deleted after the other 3 (6 versions and 1 marker)", second, err)
		}
	})
	t.Run("ForceEmpty refuses a bucket with object lock", func(t *testing.T) {
		owned(t, "full-locked", miniogo.MakeBucketOptions{ObjectLocking: true})
		put(t, c, "full-locked", "data")
		got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "full-locked", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 100})
		if err != nil || got.Outcome != s3bucket.OutcomeBlockedObjectLock || len(versions(t, c, "full-locked")) != 1 {
			t.Errorf("Delete = %+v, %v; want BlockedObjectLock with the data kept", got, err)
		}
	})
}

// TestAnInterruptedCreationIsFinished: a bucket that exists without a tag is taken for
// the StorageBucket's own only when its status records creating it — the state a create
// leaves when tagging never happened — and is then tagged and deleted as its own.
func TestAnInterruptedCreationIsFinished(t *testing.T) {
	s3 := minio.StartForTest(t, minio.Options{})
	c, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	proxy := s3.StartProxyForTest(t)
	through, err := miniogo.New(proxy.Endpoint, &miniogo.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, ""), Region: s3.Region})
	if err != nil {
		t.Fatal(err)
	}
	recorded := s3bucket.Request{Bucket: "interrupted", Region: s3.Region, Owner: owner, CreateRecorded: true}

	proxy.Fail(minio.Tagging(minio.InternalError, http.MethodPut))
	if _, err := s3bucket.Ensure(ctx, through, recorded); err == nil {
		t.Fatal("Ensure succeeded although tagging failed")
	}
	if ok, err := c.BucketExists(ctx, "interrupted"); err != nil || !ok {
		t.Fatalf("the bucket was not created (%v)", err)
	}
	proxy.Fail(nil)

	unrecorded := recorded
	unrecorded.CreateRecorded = false
	if got, err := s3bucket.Ensure(ctx, through, unrecorded); err != nil || got.State != s3bucket.StateNotOurs {
		t.Fatalf("without the record: Ensure = %+v, %v; want NotOurs", got, err)
	}
	got, err := s3bucket.Ensure(ctx, through, recorded)
	if err != nil || got.State != s3bucket.StateResumed {
		t.Fatalf("Ensure = %+v, %v; want Resumed", got, err)
	}
	if tg := tagMap(t, c, "interrupted"); tg[s3bucket.TagOwnerUID] != owner.UID {
		t.Errorf("tags = %v, want the owner's UID", tg)
	}
	if got, err := s3bucket.Ensure(ctx, through, recorded); err != nil || got.State != s3bucket.StateOwned {
		t.Errorf("Ensure after tagging = %+v, %v; want Owned", got, err)
	}
}

func TestAnEndpointWithoutTaggingIsReportedAsSuch(t *testing.T) {
	s3 := minio.StartForTest(t, minio.Options{})
	c, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	proxy := s3.StartProxyForTest(t)
	proxy.Fail(minio.Tagging(minio.NotImplemented))
	through, err := miniogo.New(proxy.Endpoint, &miniogo.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, ""), Region: s3.Region})
	if err != nil {
		t.Fatal(err)
	}
	recorded := s3bucket.Request{Bucket: "untaggable", Region: s3.Region, Owner: owner, CreateRecorded: true}
	for range 2 { // creating, then finding the untagged bucket
		_, err := s3bucket.Ensure(ctx, through, recorded)
		var f *taxonomy.Failure
		if !errors.As(err, &f) || f.Reason != taxonomy.ReasonTaggingNotSupported || f.Check != taxonomy.CheckManaged {
			t.Fatalf("Ensure error = %v, want Managed/TaggingNotSupported", err)
		}
	}
	put(t, c, "untaggable", "data")
	got, err := s3bucket.Delete(ctx, through, s3bucket.DeleteRequest{Bucket: "untaggable", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 100})
	if err != nil || got.Outcome != s3bucket.OutcomeNotOurs {
		t.Errorf("Delete without the record = %+v, %v; want NotOurs", got, err)
	}
	got, err = s3bucket.Delete(ctx, through, s3bucket.DeleteRequest{Bucket: "untaggable", UID: owner.UID, CreateRecorded: true,
		Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 100})
	if err != nil || got.Outcome != s3bucket.OutcomeDeleted {
		t.Errorf("Delete with the record = %+v, %v; want Deleted", got, err)
	}
}

// The fence is asked before every call that creates or deletes, and its refusal stops
// the call: a replica whose StorageBucket is gone, replaced or no longer its own never
// creates, tags or deletes.
func TestAFenceThatRefusesStopsEveryChange(t *testing.T) {
	c, ctx := setup(t)
	refused := errors.New("not ours any more")
	asked := 0
	refuse := func(context.Context) error { asked++; return refused }

	got, err := s3bucket.Ensure(ctx, c, s3bucket.Request{Bucket: "fenced-create", Region: "us-east-1", Owner: owner,
		CreateRecorded: true, Fence: refuse})
	if !errors.Is(err, refused) || asked != 1 {
		t.Errorf("Ensure of a missing bucket = %+v, %v (fence asked %d times); want the fence's error", got, err, asked)
	}
	if ok, err := c.BucketExists(ctx, "fenced-create"); err != nil || ok {
		t.Errorf("the bucket was created (%v)", err)
	}

	if err := c.MakeBucket(ctx, "fenced-adopt", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s3bucket.Ensure(ctx, c, s3bucket.Request{Bucket: "fenced-adopt", Region: "us-east-1", Owner: owner,
		Adopt: s3bucket.AdoptUntagged, Fence: refuse}); !errors.Is(err, refused) {
		t.Errorf("adopting: %v, want the fence's error", err)
	}
	if tg := tagMap(t, c, "fenced-adopt"); tg[s3bucket.TagOwnerUID] != "" {
		t.Errorf("the bucket was tagged: %v", tg)
	}

	for _, st := range []phalanksv1beta1.NonEmptyStrategy{phalanksv1beta1.NonEmptyFail, phalanksv1beta1.NonEmptyForceEmpty} {
		bucket := "fenced-delete-" + strings.ToLower(string(st))
		if err := c.MakeBucket(ctx, bucket, miniogo.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
		setTags(t, c, bucket, map[string]string{s3bucket.TagOwnerUID: owner.UID})
		if st == phalanksv1beta1.NonEmptyForceEmpty {
			put(t, c, bucket, "data")
		}
		if _, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: bucket, UID: owner.UID, Strategy: st, Budget: 100,
			Fence: refuse}); !errors.Is(err, refused) {
			t.Errorf("%s: Delete = %v, want the fence's error", st, err)
		}
		if ok, err := c.BucketExists(ctx, bucket); err != nil || !ok {
			t.Errorf("%s: the bucket was deleted (%v)", st, err)
		}
		if st == phalanksv1beta1.NonEmptyForceEmpty && len(versions(t, c, bucket)) != 1 {
			t.Errorf("%s: objects were deleted", st)
		}
	}
}

// A ReadWrite probe cut short (a killed replica, a lost shard) can leave its canary
// object behind; it is the StorageBucket's own, not user data, so deletion removes it
// rather than calling the bucket non-empty.
func TestDeleteRemovesTheStorageBucketsOwnCanaryOnly(t *testing.T) {
	c, ctx := setup(t)
	for _, versioned := range []bool{false, true} {
		bucket := fmt.Sprintf("canary-left-%t", versioned)
		if err := c.MakeBucket(ctx, bucket, miniogo.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
		if versioned {
			if err := c.EnableVersioning(ctx, bucket); err != nil {
				t.Fatal(err)
			}
		}
		setTags(t, c, bucket, map[string]string{s3bucket.TagOwnerUID: owner.UID})
		put(t, c, bucket, phalanksv1beta1.CanaryPrefix+owner.UID)
		got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: bucket, UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyFail, Budget: 100})
		if err != nil || got.Outcome != s3bucket.OutcomeDeleted {
			t.Errorf("versioned=%t: Delete with only our canary = %+v, %v; want Deleted", versioned, got, err)
		}
	}
	// Another StorageBucket's canary is data like any other.
	if err := c.MakeBucket(ctx, "canary-other", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	setTags(t, c, "canary-other", map[string]string{s3bucket.TagOwnerUID: owner.UID})
	put(t, c, "canary-other", phalanksv1beta1.CanaryPrefix+"another-uid")
	got, err := s3bucket.Delete(ctx, c, s3bucket.DeleteRequest{Bucket: "canary-other", UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyFail, Budget: 100})
	if err != nil || got.Outcome != s3bucket.OutcomeBlockedNonEmpty {
		t.Errorf("Delete with another's canary = %+v, %v; want BlockedNonEmpty", got, err)
	}
}

// ForceEmpty asks the fence before each batch of object versions it deletes and each
// incomplete upload it aborts, not once for its whole budget: a replica that loses the
// StorageBucket half way (its slot taken over, the StorageBucket gone) deletes nothing
// after the batch it was in.
func TestForceEmptyIsFencedBatchByBatch(t *testing.T) {
	c, ctx := setup(t)
	const bucket = "fenced-batches"
	if err := c.MakeBucket(ctx, bucket, miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	setTags(t, c, bucket, map[string]string{s3bucket.TagOwnerUID: owner.UID})
	objects := 2*s3bucket.RemoveBatch + 10
	keys := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range keys {
				if _, err := c.PutObject(ctx, bucket, k, bytes.NewReader([]byte("data")), 4, miniogo.PutObjectOptions{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range objects {
		keys <- fmt.Sprintf("object-%05d", i)
	}
	close(keys)
	wg.Wait()
	if _, err := (&miniogo.Core{Client: c}).NewMultipartUpload(ctx, bucket, "unfinished", miniogo.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	refused := errors.New("not ours any more")
	asked, allowed := 0, 1
	fence := func(context.Context) error {
		asked++
		if asked > allowed {
			return refused
		}
		return nil
	}
	req := s3bucket.DeleteRequest{Bucket: bucket, UID: owner.UID, Strategy: phalanksv1beta1.NonEmptyForceEmpty, Budget: 5000, Fence: fence}
	if _, err := s3bucket.Delete(ctx, c, req); !errors.Is(err, refused) {
		t.Fatalf("Delete with the fence refusing its second question = %v, want the fence's error", err)
	}
	if left := len(versions(t, c, bucket)); left != objects-s3bucket.RemoveBatch || asked != 2 {
		t.Fatalf("after the fence refused its second question: %d object versions left, fence asked %d times; want %d left (one batch deleted) and 2 questions",
			left, asked, objects-s3bucket.RemoveBatch)
	}

	asked, allowed = 0, 100
	got, err := s3bucket.Delete(ctx, c, req)
	if err != nil || got.Outcome != s3bucket.OutcomeDeleted {
		t.Fatalf("Delete = %+v, %v; want Deleted", got, err)
	}
	// Two batches (1,000 and 10), one upload, the bucket.
	if asked != 4 {
		t.Errorf("the fence was asked %d times; want 4: before each of two batches, the upload's abort and the bucket's deletion", asked)
	}
}
