package s3probe_test

import (
	"fmt"
	"strings"
	"testing"

	miniogo "github.com/minio/minio-go/v7"

	"github.com/phalanks/phalanks-operator/internal/s3probe"
)

// TestClassifiesS3Answers covers the answers MinIO does not give (AWS redirects,
// throttling, object lock): the error responses are built the way minio-go decodes them.
func TestClassifiesS3Answers(t *testing.T) {
	s := s3probe.Subject{Host: "s3.eu-central-1.amazonaws.com", Bucket: "photos", Region: "eu-central-1"}
	for name, tc := range map[string]struct {
		resp       miniogo.ErrorResponse
		wantReason s3probe.Reason
		wantCheck  s3probe.Check
		wantInMsg  string
	}{
		"an AWS 301 to another region is WrongRegion naming it": {
			resp:       miniogo.ErrorResponse{StatusCode: 301, Code: "301 Moved Permanently", Region: "us-west-2"},
			wantReason: s3probe.ReasonWrongRegion, wantCheck: s3probe.CheckBucketAvailable, wantInMsg: `set spec.region to "us-west-2"`,
		},
		"PermanentRedirect without a region is still WrongRegion": {
			resp:       miniogo.ErrorResponse{StatusCode: 301, Code: "PermanentRedirect"},
			wantReason: s3probe.ReasonWrongRegion, wantCheck: s3probe.CheckBucketAvailable, wantInMsg: `not in region "eu-central-1"`,
		},
		"AuthorizationHeaderMalformed naming the expected region is WrongRegion": {
			resp: miniogo.ErrorResponse{StatusCode: 400, Code: "AuthorizationHeaderMalformed",
				Message: "The authorization header is malformed; the region 'eu-central-1' is wrong; expecting 'ap-south-1'"},
			wantReason: s3probe.ReasonWrongRegion, wantCheck: s3probe.CheckBucketAvailable, wantInMsg: `"ap-south-1"`,
		},
		"an expired session token is InvalidCredentials": {
			resp:       miniogo.ErrorResponse{StatusCode: 400, Code: "ExpiredToken", Message: "The provided token has expired."},
			wantReason: s3probe.ReasonInvalidCredentials, wantCheck: s3probe.CheckAuthenticated, wantInMsg: "ExpiredToken",
		},
		"a bare 403 is AccessDenied": {
			resp:       miniogo.ErrorResponse{StatusCode: 403, Code: "AccessDenied", Message: "Access Denied"},
			wantReason: s3probe.ReasonAccessDenied, wantCheck: s3probe.CheckAuthenticated, wantInMsg: `"photos"`,
		},
		"SlowDown is ServerError": {
			resp:       miniogo.ErrorResponse{StatusCode: 503, Code: "SlowDown", Message: "Please reduce your request rate."},
			wantReason: s3probe.ReasonServerError, wantCheck: s3probe.CheckReachable, wantInMsg: "SlowDown",
		},
		"a 500 without a body is ServerError": {
			resp:       miniogo.ErrorResponse{StatusCode: 500, Code: "500 Internal Server Error"},
			wantReason: s3probe.ReasonServerError, wantCheck: s3probe.CheckReachable, wantInMsg: "Internal Server Error",
		},
		"a locked object version is ObjectLockEnabled": {
			resp:       miniogo.ErrorResponse{StatusCode: 403, Code: "ObjectLocked", Message: "Object is WORM protected and cannot be overwritten"},
			wantReason: s3probe.ReasonObjectLockEnabled, wantCheck: s3probe.CheckBucketAvailable,
		},
		"an unknown client error is Unknown on the bucket, with the code": {
			resp: miniogo.ErrorResponse{StatusCode: 409, Code: "InvalidBucketState", Message: "The request is not valid with the current state of the bucket.",
				RequestID: "REQ123"},
			wantReason: s3probe.ReasonUnknown, wantCheck: s3probe.CheckBucketAvailable, wantInMsg: "InvalidBucketState",
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := s3probe.Classify(fmt.Errorf("head bucket: %w", tc.resp), s)
			if f.Reason != tc.wantReason || f.Check != tc.wantCheck {
				t.Fatalf("got %s/%s (%s), want %s/%s", f.Check, f.Reason, f.Message, tc.wantCheck, tc.wantReason)
			}
			if !strings.Contains(f.Message, tc.wantInMsg) {
				t.Errorf("message %q does not mention %q", f.Message, tc.wantInMsg)
			}
			if strings.Contains(f.Message, "REQ123") {
				t.Errorf("message %q holds a request ID", f.Message)
			}
		})
	}
}

func TestEveryReasonBelongsToACheck(t *testing.T) {
	for _, r := range []s3probe.Reason{
		s3probe.ReasonDNSFailure, s3probe.ReasonConnectionRefused, s3probe.ReasonTimeout, s3probe.ReasonTLSUnknownAuthority,
		s3probe.ReasonCertificateExpired, s3probe.ReasonCertificateInvalid, s3probe.ReasonTLSHandshakeFailed,
		s3probe.ReasonServerError, s3probe.ReasonCABundleNotFound, s3probe.ReasonInvalidCABundle,
	} {
		if c := s3probe.CheckOf(r); c != s3probe.CheckReachable {
			t.Errorf("%s belongs to %s, want Reachable", r, c)
		}
	}
	for _, r := range []s3probe.Reason{s3probe.ReasonInvalidCredentials, s3probe.ReasonAccessDenied, s3probe.ReasonSecretNotFound, s3probe.ReasonSecretKeyMissing} {
		if c := s3probe.CheckOf(r); c != s3probe.CheckAuthenticated {
			t.Errorf("%s belongs to %s, want Authenticated", r, c)
		}
	}
	for _, r := range []s3probe.Reason{s3probe.ReasonNoSuchBucket, s3probe.ReasonWrongRegion, s3probe.ReasonCanaryMismatch, s3probe.ReasonObjectLockEnabled} {
		if c := s3probe.CheckOf(r); c != s3probe.CheckBucketAvailable {
			t.Errorf("%s belongs to %s, want BucketAvailable", r, c)
		}
	}
	if c := s3probe.CheckOf(s3probe.ReasonErrResourceExists); c != s3probe.CheckManaged {
		t.Errorf("ErrResourceExists belongs to %s, want Managed", c)
	}
}
