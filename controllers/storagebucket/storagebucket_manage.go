package storagebucket

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// manage establishes ownership of the bucket: create it when missing (once the status
// records that this StorageBucket creates it), finish a recorded creation that was
// interrupted before tagging, adopt it when asked, or find it is not ours. Confirmed
// ownership is remembered until the spec or the inputs change.
func (r *Reconciler) manage(ctx context.Context, sb *phalanksv1beta1.StorageBucket, in inputs, st *bucketState, timeout time.Duration) *manageResult {
	if st.confirmedFor(st.ownedFor) {
		return &manageResult{owned: true}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	endpoint, found := in.endpoint, ""
	got, err := r.ensure(ctx, sb, st, endpoint)
	var f *taxonomy.Failure
	if err != nil && !fenced(err) {
		f = taxonomy.Classify(err, subjectIn(in.host, sb.Spec.BucketName, endpoint.Region, timeout))
	}
	if region, named := f.OtherRegion(endpoint.Region); in.discoverRegion && named {
		// The endpoint named the bucket's region: once more, signed for it.
		endpoint.Region, found = region, region
		got, err = r.ensure(ctx, sb, st, endpoint)
		f = nil
		if err != nil && !fenced(err) {
			f = taxonomy.Classify(err, subjectIn(in.host, sb.Spec.BucketName, endpoint.Region, timeout))
		}
	}
	if fenced(err) {
		return &manageResult{fenced: err}
	}
	if f != nil {
		if f.Check == taxonomy.CheckBucketAvailable || f.Check == taxonomy.CheckAuthenticated {
			f = &taxonomy.Failure{Reason: f.Reason, Check: taxonomy.CheckManaged, Message: "managing the bucket: " + f.Message, Region: f.Region}
		}
		return &manageResult{failure: f, region: found}
	}
	bucket := sb.Spec.BucketName
	switch got.State {
	case s3bucket.StateMissing:
		return &manageResult{recordCreate: true, region: found}
	case s3bucket.StateCreated:
		r.event(sb, corev1.EventTypeNormal, eventBucketCreated, "Create", fmt.Sprintf("created bucket %q in region %q and tagged it as owned by this StorageBucket", bucket, endpoint.Region))
	case s3bucket.StateResumed:
		r.event(sb, corev1.EventTypeNormal, eventBucketCreated, "Create", fmt.Sprintf("finished creating bucket %q: it had been created without its ownership tag (the creation was interrupted) and is now tagged as owned by this StorageBucket", bucket))
	case s3bucket.StateAdopted:
		r.event(sb, corev1.EventTypeNormal, eventBucketAdopted, "Adopt", fmt.Sprintf("adopted existing bucket %q as asked by annotation %s", bucket, phalanksv1beta1.AnnotationAdopt))
	case s3bucket.StateNotOurs:
		return &manageResult{failure: notOursFailure(bucket, got.OtherUID)}
	}
	st.ownedFor = st.ownershipKey()
	return &manageResult{owned: true, region: found}
}

// ensure runs the Manage step's S3 calls for sb's bucket on endpoint, in its region.
func (r *Reconciler) ensure(ctx context.Context, sb *phalanksv1beta1.StorageBucket, st *bucketState, endpoint s3probe.Endpoint) (s3bucket.Ensured, error) {
	conn, err := r.prober.Pool.Conn(endpoint)
	if err != nil {
		return s3bucket.Ensured{}, err
	}
	return s3bucket.Ensure(ctx, conn.Client, s3bucket.Request{
		Bucket: sb.Spec.BucketName, Region: endpoint.Region,
		Owner:          s3bucket.Owner{UID: string(sb.UID), Name: sb.Namespace + "/" + sb.Name},
		Adopt:          sb.Annotations[phalanksv1beta1.AnnotationAdopt],
		CreateRecorded: createRecorded(sb, st),
		Fence:          r.fence(sb, false),
	})
}

// subjectIn is what a request about bucket on host, signed for region, was about.
func subjectIn(host, bucket, region string, timeout time.Duration) taxonomy.Subject {
	return taxonomy.Subject{Host: host, Bucket: bucket, Region: region, Timeout: timeout}
}

// createRecorded reports whether the status records that this StorageBucket creates
// its bucket where the spec says, or this process wrote that record a moment ago.
func createRecorded(sb *phalanksv1beta1.StorageBucket, st *bucketState) bool {
	return sb.Status.CreatedBucket.Records(sb.Spec) || st.createRecordedFor == placement(sb)
}

// placement names where the spec puts the bucket.
func placement(sb *phalanksv1beta1.StorageBucket) string {
	return sb.Spec.Endpoint + " " + sb.Spec.Region
}

func notOursFailure(bucket, otherUID string) *taxonomy.Failure {
	why := fmt.Sprintf("it carries no %s tag; annotate the StorageBucket with %s: \"true\" to adopt it",
		s3bucket.TagOwnerUID, phalanksv1beta1.AnnotationAdopt)
	if otherUID != "" {
		why = fmt.Sprintf("its %s tag names StorageBucket UID %s; if that StorageBucket is gone, annotate this one with %s: %q to adopt it",
			s3bucket.TagOwnerUID, otherUID, phalanksv1beta1.AnnotationAdopt, otherUID)
	}
	return taxonomy.NewFailure(taxonomy.ReasonErrResourceExists, nil,
		"bucket %q already exists and is not managed by this StorageBucket (%s)", bucket, why)
}
