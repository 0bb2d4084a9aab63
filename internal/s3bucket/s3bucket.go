// Package s3bucket manages the life of a bucket on an S3-compatible endpoint for its
// StorageBucket: creating it with an ownership tag, telling whose it is, adopting it
// only when asked, and deleting it (emptying it first only when told to).
//
// Ownership is a bucket tag (phalanks.io/storagebucket-uid) naming the StorageBucket's
// UID. A bucket without our tag, or with another UID in it, is never changed — with one
// exception: a bucket the StorageBucket's status says it creates (the record is written
// before the bucket is created) and that carries no tag yet is the result of a creation
// interrupted between creating and tagging, and is finished.
package s3bucket

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/tags"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// Tag keys on a managed bucket.
const (
	// TagOwnerUID names the UID of the StorageBucket that owns the bucket.
	TagOwnerUID = phalanksv1beta1.OwnerTagKey
	// TagOwnerName names the owner as namespace/name, for people reading the tags.
	TagOwnerName = "phalanks.io/storagebucket"
	// AdoptUntagged is the adopt value that takes over a bucket without an ownership tag.
	AdoptUntagged = "true"
)

// Owner is the StorageBucket a bucket belongs to.
type Owner struct {
	UID string
	// Name is namespace/name.
	Name string
}

// State is whose a bucket is after Ensure.
type State string

// Ownership states.
const (
	// StateMissing: the bucket does not exist and the creation is not recorded yet;
	// nothing was changed. Record it (Request.CreateRecorded) and call Ensure again.
	StateMissing State = "Missing"
	// StateCreated: the bucket was missing and is now created and tagged.
	StateCreated State = "Created"
	// StateResumed: the bucket this StorageBucket recorded creating existed without a tag
	// (its creation was interrupted before tagging) and is now tagged.
	StateResumed State = "Resumed"
	// StateOwned: the bucket carries the owner's tag.
	StateOwned State = "Owned"
	// StateAdopted: the bucket carried no (or the named former) owner tag and adopt
	// asked to take it over; it now carries the owner's tag.
	StateAdopted State = "Adopted"
	// StateNotOurs: the bucket exists and belongs to something else; it was not touched.
	StateNotOurs State = "NotOurs"
)

// Ensured is the outcome of Ensure.
type Ensured struct {
	State State
	// OtherUID is the UID in the ownership tag of a bucket that is not ours, if any.
	OtherUID string
}

// Request is what Ensure establishes.
type Request struct {
	Bucket, Region string
	Owner          Owner
	// Adopt is the StorageBucket's adopt annotation: "true" takes over a bucket without
	// an ownership tag, a UID a bucket whose ownership tag names it.
	Adopt string
	// CreateRecorded says the StorageBucket's status records that it creates this
	// bucket on this endpoint. Only then is a missing bucket created, and an untagged
	// one taken for the result of an interrupted creation.
	CreateRecorded bool
	// Fence, when set, is asked right before every call that creates or changes
	// something (creating the bucket, tagging it); an error from it ends Ensure with
	// that error and nothing changed.
	Fence func(context.Context) error
}

// fence asks f, when set.
func fence(ctx context.Context, f func(context.Context) error) error {
	if f == nil {
		return nil
	}
	return f(ctx)
}

// Ensure makes sure the bucket exists and belongs to the owner: it creates a missing
// bucket in the region and tags it (once the creation is recorded), finishes a recorded
// creation that was interrupted before tagging, and tags an existing bucket only when
// adopt says so. Any other existing bucket is left exactly as it is.
func Ensure(ctx context.Context, c *miniogo.Client, r Request) (Ensured, error) {
	bucket, owner := r.Bucket, r.Owner
	exists, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return Ensured{}, fmt.Errorf("check bucket %q: %w", bucket, err)
	}
	if !exists {
		if !r.CreateRecorded {
			return Ensured{State: StateMissing}, nil
		}
		if err := fence(ctx, r.Fence); err != nil {
			return Ensured{}, err
		}
		err := c.MakeBucket(ctx, bucket, miniogo.MakeBucketOptions{Region: r.Region})
		switch code := miniogo.ToErrorResponse(err).Code; {
		case err == nil:
			if err := setOwner(ctx, c, bucket, owner, nil, r.Fence); err != nil {
				return Ensured{}, err
			}
			return Ensured{State: StateCreated}, nil
		case code == "BucketAlreadyExists":
			// Another account holds the name; nothing we could inspect or adopt.
			return Ensured{State: StateNotOurs}, nil
		case code != "BucketAlreadyOwnedByYou":
			return Ensured{}, fmt.Errorf("create bucket %q in region %q: %w", bucket, r.Region, err)
		}
		// Created already, by an earlier attempt of ours that did not learn of its
		// success, or concurrently with our credentials: inspect it below.
	}
	current, err := bucketTags(ctx, c, bucket)
	if err != nil {
		return Ensured{}, err
	}
	uid, adopt := current[TagOwnerUID], r.Adopt
	switch {
	case uid == owner.UID:
		return Ensured{State: StateOwned}, nil
	case uid == "" && r.CreateRecorded:
		if err := setOwner(ctx, c, bucket, owner, current, r.Fence); err != nil {
			return Ensured{}, err
		}
		return Ensured{State: StateResumed}, nil
	case (uid == "" && adopt == AdoptUntagged) || (uid != "" && adopt == uid):
		if err := setOwner(ctx, c, bucket, owner, current, r.Fence); err != nil {
			return Ensured{}, err
		}
		return Ensured{State: StateAdopted}, nil
	}
	return Ensured{State: StateNotOurs, OtherUID: uid}, nil
}

// OwnedBy reports whether the bucket exists and is owner's: it carries the owner's tag,
// or it carries no tag and the owner recorded creating it.
func OwnedBy(ctx context.Context, c *miniogo.Client, bucket, uid string, createRecorded bool) (exists, owned bool, err error) {
	exists, err = c.BucketExists(ctx, bucket)
	if err != nil || !exists {
		return exists, false, err
	}
	current, err := bucketTags(ctx, c, bucket)
	var failure *taxonomy.Failure
	if errors.As(err, &failure) && failure.Reason == taxonomy.ReasonTaggingNotSupported {
		// An endpoint without tagging: only the record tells whose the bucket is.
		return true, createRecorded, nil
	}
	if err != nil {
		return true, false, err
	}
	tag := current[TagOwnerUID]
	return true, tag == uid || (tag == "" && createRecorded), nil
}

// bucketTags returns the bucket's tags; a bucket without tags gives an empty map.
func bucketTags(ctx context.Context, c *miniogo.Client, bucket string) (map[string]string, error) {
	t, err := c.GetBucketTagging(ctx, bucket)
	if err != nil {
		if miniogo.ToErrorResponse(err).Code == "NoSuchTagSet" {
			return map[string]string{}, nil
		}
		if notImplemented(err) {
			return nil, taggingNotSupported(bucket, err)
		}
		return nil, fmt.Errorf("read tags of bucket %q: %w", bucket, err)
	}
	return t.ToMap(), nil
}

// notImplemented reports whether the endpoint says it does not implement the request.
func notImplemented(err error) bool {
	resp := miniogo.ToErrorResponse(err)
	return resp.Code == "NotImplemented" || resp.StatusCode == http.StatusNotImplemented
}

func taggingNotSupported(bucket string, err error) *taxonomy.Failure {
	return taxonomy.NewFailure(taxonomy.ReasonTaggingNotSupported, err,
		"the endpoint does not support bucket tagging, which managementPolicy Manage needs to mark bucket %q as this StorageBucket's; "+
			"use managementPolicy Observe with this endpoint", bucket)
}

// setOwner writes the ownership tags, keeping every other tag: PutBucketTagging
// replaces the whole set.
func setOwner(ctx context.Context, c *miniogo.Client, bucket string, owner Owner, current map[string]string, f func(context.Context) error) error {
	merged := map[string]string{}
	for k, v := range current {
		merged[k] = v
	}
	merged[TagOwnerUID] = owner.UID
	merged[TagOwnerName] = owner.Name
	t, err := tags.NewTags(merged, false)
	if err != nil {
		return taxonomy.NewFailure(taxonomy.ReasonUnclassified, err, "cannot tag bucket %q: %s", bucket, err)
	}
	if err := fence(ctx, f); err != nil {
		return err
	}
	if err := c.SetBucketTagging(ctx, bucket, t); err != nil {
		if notImplemented(err) {
			return taggingNotSupported(bucket, err)
		}
		return fmt.Errorf("tag bucket %q: %w", bucket, err)
	}
	return nil
}

// Outcome is what Delete did.
type Outcome string

// Deletion outcomes.
const (
	// OutcomeDeleted: the bucket is deleted.
	OutcomeDeleted Outcome = "Deleted"
	// OutcomeGone: there was no bucket to delete.
	OutcomeGone Outcome = "Gone"
	// OutcomeNotOurs: the bucket does not carry the owner's tag; it was left alone.
	OutcomeNotOurs Outcome = "NotOurs"
	// OutcomeLeftNonEmpty: DeleteIfEmpty found objects and left the bucket with them.
	OutcomeLeftNonEmpty Outcome = "LeftNonEmpty"
	// OutcomeBlockedNonEmpty: Fail found objects; nothing was deleted.
	OutcomeBlockedNonEmpty Outcome = "BlockedNonEmpty"
	// OutcomeBlockedObjectLock: ForceEmpty refused a bucket with object lock.
	OutcomeBlockedObjectLock Outcome = "BlockedObjectLock"
	// OutcomeEmptying: ForceEmpty deleted its budget of versions; more remain.
	OutcomeEmptying Outcome = "Emptying"
)

// Deleted is the result of Delete.
type Deleted struct {
	Outcome Outcome
	// Removed counts the object versions and delete markers ForceEmpty deleted.
	Removed int
}

// DeleteRequest is what Delete deletes, and how.
type DeleteRequest struct {
	Bucket string
	// UID is the StorageBucket's; only a bucket that is its (see OwnedBy) is deleted.
	UID            string
	CreateRecorded bool
	Strategy       phalanksv1beta1.NonEmptyStrategy
	// Budget bounds the object versions ForceEmpty deletes per call.
	Budget int
	// Fence, when set, is asked right before every call that deletes something: each
	// version of the StorageBucket's own canary, each batch of at most RemoveBatch
	// object versions, each incomplete upload, the bucket. An error from it ends Delete
	// with that error.
	Fence func(context.Context) error
}

// Delete deletes the bucket if it is the StorageBucket's (see OwnedBy). The
// StorageBucket's own ReadWrite canary, if a probe that was cut short left it behind,
// is deleted first: it is not user data. A bucket with other objects (any version or
// delete marker) is deleted only under ForceEmpty, which first removes up to budget
// versions per call and refuses a bucket with object lock enabled.
func Delete(ctx context.Context, c *miniogo.Client, r DeleteRequest) (Deleted, error) {
	bucket := r.Bucket
	exists, owned, err := OwnedBy(ctx, c, bucket, r.UID, r.CreateRecorded)
	switch {
	case err != nil:
		return Deleted{}, err
	case !exists:
		return Deleted{Outcome: OutcomeGone}, nil
	case !owned:
		return Deleted{Outcome: OutcomeNotOurs}, nil
	}
	if err := removeCanary(ctx, c, bucket, phalanksv1beta1.CanaryPrefix+r.UID, r.Fence); err != nil {
		return Deleted{}, err
	}
	empty, err := isEmpty(ctx, c, bucket)
	if err != nil {
		return Deleted{}, err
	}
	if empty {
		return removeBucket(ctx, c, bucket, r.Strategy, 0, r.Fence)
	}
	switch r.Strategy {
	case phalanksv1beta1.NonEmptyDeleteIfEmpty:
		return Deleted{Outcome: OutcomeLeftNonEmpty}, nil
	case phalanksv1beta1.NonEmptyForceEmpty:
		return forceEmpty(ctx, c, bucket, r.Budget, r.Fence)
	default:
		return Deleted{Outcome: OutcomeBlockedNonEmpty}, nil
	}
}

// removeCanary deletes every version of the canary object key.
func removeCanary(ctx context.Context, c *miniogo.Client, bucket, key string, f func(context.Context) error) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var versions []miniogo.ObjectInfo
	for obj := range c.ListObjectsIter(lctx, bucket, miniogo.ListObjectsOptions{Prefix: key, WithVersions: true, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("list the canary object of bucket %q: %w", bucket, obj.Err)
		}
		if obj.Key == key {
			versions = append(versions, obj)
		}
	}
	for _, v := range versions {
		if err := fence(ctx, f); err != nil {
			return err
		}
		if err := c.RemoveObject(ctx, bucket, key, miniogo.RemoveObjectOptions{VersionID: v.VersionID}); err != nil {
			return fmt.Errorf("delete the canary object left in bucket %q: %w", bucket, err)
		}
	}
	return nil
}

func removeBucket(ctx context.Context, c *miniogo.Client, bucket string, strategy phalanksv1beta1.NonEmptyStrategy, removed int,
	f func(context.Context) error) (Deleted, error) {
	if err := fence(ctx, f); err != nil {
		return Deleted{Removed: removed}, err
	}
	err := c.RemoveBucket(ctx, bucket)
	switch miniogo.ToErrorResponse(err).Code {
	case "":
		if err != nil {
			return Deleted{Removed: removed}, fmt.Errorf("delete bucket %q: %w", bucket, err)
		}
		return Deleted{Outcome: OutcomeDeleted, Removed: removed}, nil
	case "NoSuchBucket":
		return Deleted{Outcome: OutcomeGone, Removed: removed}, nil
	case "BucketNotEmpty":
		// An object arrived between the listing and the delete.
		if strategy == phalanksv1beta1.NonEmptyDeleteIfEmpty {
			return Deleted{Outcome: OutcomeLeftNonEmpty, Removed: removed}, nil
		}
		if strategy == phalanksv1beta1.NonEmptyForceEmpty {
			return Deleted{Outcome: OutcomeEmptying, Removed: removed}, nil
		}
		return Deleted{Outcome: OutcomeBlockedNonEmpty, Removed: removed}, nil
	}
	return Deleted{Removed: removed}, fmt.Errorf("delete bucket %q: %w", bucket, err)
}

// isEmpty reports whether the bucket holds no object version and no delete marker.
func isEmpty(ctx context.Context, c *miniogo.Client, bucket string) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for obj := range c.ListObjectsIter(ctx, bucket, miniogo.ListObjectsOptions{WithVersions: true, Recursive: true, MaxKeys: 1}) {
		if obj.Err != nil {
			return false, fmt.Errorf("list bucket %q: %w", bucket, obj.Err)
		}
		return false, nil
	}
	return true, nil
}

// ObjectLockEnabled reports whether the bucket has object lock enabled.
func ObjectLockEnabled(ctx context.Context, c *miniogo.Client, bucket string) (bool, error) {
	enabled, _, _, _, err := c.GetObjectLockConfig(ctx, bucket)
	if err != nil {
		if miniogo.ToErrorResponse(err).Code == "ObjectLockConfigurationNotFoundError" || notImplemented(err) {
			// No configuration, or an endpoint that has no object lock at all.
			return false, nil
		}
		return false, fmt.Errorf("read object lock configuration of bucket %q: %w", bucket, err)
	}
	return enabled == "Enabled", nil
}

func forceEmpty(ctx context.Context, c *miniogo.Client, bucket string, budget int, f func(context.Context) error) (Deleted, error) {
	locked, err := ObjectLockEnabled(ctx, c, bucket)
	if err != nil {
		return Deleted{}, err
	}
	if locked {
		return Deleted{Outcome: OutcomeBlockedObjectLock}, nil
	}
	removed, more, err := removeVersions(ctx, c, bucket, budget, f)
	if err != nil {
		return Deleted{Removed: removed}, err
	}
	if err := abortUploads(ctx, c, bucket, f); err != nil {
		return Deleted{Removed: removed}, err
	}
	if more {
		return Deleted{Outcome: OutcomeEmptying, Removed: removed}, nil
	}
	return removeBucket(ctx, c, bucket, phalanksv1beta1.NonEmptyForceEmpty, removed, f)
}

// RemoveBatch is how many object versions one multi-object delete request removes:
// S3's limit, and the unit the fence is asked for.
const RemoveBatch = 1000

// removeVersions deletes up to budget object versions and delete markers, a batch of
// at most RemoveBatch at a time, each fenced, reporting whether more remain.
func removeVersions(ctx context.Context, c *miniogo.Client, bucket string, budget int, f func(context.Context) error) (removed int, more bool, err error) {
	listCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	batch := make([]miniogo.ObjectInfo, 0, min(budget, RemoveBatch))
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := fence(ctx, f); err != nil {
			return err
		}
		removed += len(batch)
		err := removeBatch(ctx, c, bucket, batch)
		batch = batch[:0]
		return err
	}
	for obj := range c.ListObjectsIter(listCtx, bucket, miniogo.ListObjectsOptions{WithVersions: true, Recursive: true}) {
		if obj.Err != nil {
			return removed, false, fmt.Errorf("empty bucket %q: list versions: %w", bucket, obj.Err)
		}
		if removed+len(batch) == budget {
			more = true
			break
		}
		batch = append(batch, miniogo.ObjectInfo{Key: obj.Key, VersionID: obj.VersionID})
		if len(batch) == RemoveBatch {
			if err := flush(); err != nil {
				return removed, false, err
			}
		}
	}
	if err := flush(); err != nil {
		return removed, false, err
	}
	return removed, more, nil
}

// removeBatch deletes the object versions with one multi-object delete request.
func removeBatch(ctx context.Context, c *miniogo.Client, bucket string, batch []miniogo.ObjectInfo) error {
	objects := make(chan miniogo.ObjectInfo, len(batch))
	for _, o := range batch {
		objects <- o
	}
	close(objects)
	var errs []error
	for e := range c.RemoveObjects(ctx, bucket, objects, miniogo.RemoveObjectsOptions{}) {
		errs = append(errs, fmt.Errorf("%s@%s: %w", e.ObjectName, e.VersionID, e.Err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("empty bucket %q (%d errors): %w", bucket, len(errs), errors.Join(errs[:min(len(errs), 3)]...))
	}
	return nil
}

// abortUploads aborts every incomplete multipart upload in the bucket, each fenced.
func abortUploads(ctx context.Context, c *miniogo.Client, bucket string, f func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for up := range c.ListIncompleteUploads(ctx, bucket, "", true) {
		if up.Err != nil {
			return fmt.Errorf("list incomplete uploads of bucket %q: %w", bucket, up.Err)
		}
		if err := fence(ctx, f); err != nil {
			return err
		}
		if err := c.RemoveIncompleteUpload(ctx, bucket, up.Key); err != nil {
			return fmt.Errorf("abort upload of %q in bucket %q: %w", up.Key, bucket, err)
		}
	}
	return nil
}
