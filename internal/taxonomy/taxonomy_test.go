package taxonomy_test

import (
	"fmt"
	"strings"
	"testing"

	miniogo "github.com/minio/minio-go/v7"

	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// TestClassifiesS3Answers covers the answers MinIO does not give (AWS redirects,
// throttling, object lock): the error responses are built the way minio-go decodes them.
func TestClassifiesS3Answers(t *testing.T) {
	s := taxonomy.Subject{Host: "s3.eu-central-1.amazonaws.com", Bucket: "photos", Region: "eu-central-1"}
	for name, tc := range map[string]struct {
		resp       miniogo.ErrorResponse
		wantReason taxonomy.Reason
		wantCheck  taxonomy.Check
		wantInMsg  string
	}{
		"an AWS 301 to another region is WrongRegion naming it": {
			resp:       miniogo.ErrorResponse{StatusCode: 301, Code: "301 Moved Permanently", Region: "us-west-2"},
			wantReason: taxonomy.ReasonWrongRegion, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: `set spec.region to "us-west-2"`,
		},
		"PermanentRedirect without a region is still WrongRegion": {
			resp:       miniogo.ErrorResponse{StatusCode: 301, Code: "PermanentRedirect"},
			wantReason: taxonomy.ReasonWrongRegion, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: `not in region "eu-central-1"`,
		},
		"AuthorizationHeaderMalformed naming the expected region is WrongRegion": {
			resp: miniogo.ErrorResponse{StatusCode: 400, Code: "AuthorizationHeaderMalformed",
				Message: "The authorization header is malformed; the region 'eu-central-1' is wrong; expecting 'ap-south-1'"},
			wantReason: taxonomy.ReasonWrongRegion, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: `"ap-south-1"`,
		},
		"versitygw's AuthorizationHeaderMalformed, the region in double quotes, is WrongRegion": {
			resp: miniogo.ErrorResponse{StatusCode: 400, Code: "AuthorizationHeaderMalformed",
				Message: `The authorization header is malformed; the region "eu-central-1" is wrong; expecting "us-east-1"`},
			wantReason: taxonomy.ReasonWrongRegion, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: `set spec.region to "us-east-1"`,
		},
		"versitygw's 404 XAdminUserNotFound for an unknown access key is InvalidCredentials, not NoSuchBucket": {
			resp:       miniogo.ErrorResponse{StatusCode: 404, Code: "XAdminUserNotFound", Message: "No user exists with the provided access key ID."},
			wantReason: taxonomy.ReasonInvalidCredentials, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: "XAdminUserNotFound",
		},
		"an expired session token is InvalidCredentials": {
			resp:       miniogo.ErrorResponse{StatusCode: 400, Code: "ExpiredToken", Message: "The provided token has expired."},
			wantReason: taxonomy.ReasonInvalidCredentials, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: "ExpiredToken",
		},
		"temporary keys without their session token (MinIO's 403 InvalidTokenId) are InvalidCredentials": {
			resp:       miniogo.ErrorResponse{StatusCode: 403, Code: "InvalidTokenId", Message: "The security token included in the request is invalid"},
			wantReason: taxonomy.ReasonInvalidCredentials, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: "InvalidTokenId",
		},
		"a bare 403 is AccessDenied": {
			resp:       miniogo.ErrorResponse{StatusCode: 403, Code: "AccessDenied", Message: "Access Denied"},
			wantReason: taxonomy.ReasonAccessDenied, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: `"photos"`,
		},
		"SlowDown is ServerError": {
			resp:       miniogo.ErrorResponse{StatusCode: 503, Code: "SlowDown", Message: "Please reduce your request rate."},
			wantReason: taxonomy.ReasonServerError, wantCheck: taxonomy.CheckReachable, wantInMsg: "SlowDown",
		},
		"a 500 without a body is ServerError": {
			resp:       miniogo.ErrorResponse{StatusCode: 500, Code: "500 Internal Server Error"},
			wantReason: taxonomy.ReasonServerError, wantCheck: taxonomy.CheckReachable, wantInMsg: "Internal Server Error",
		},
		"a locked object version is ObjectLockEnabled": {
			resp:       miniogo.ErrorResponse{StatusCode: 403, Code: "ObjectLocked", Message: "Object is WORM protected and cannot be overwritten"},
			wantReason: taxonomy.ReasonObjectLockEnabled, wantCheck: taxonomy.CheckBucketAvailable,
		},
		"an unknown client error is UnclassifiedError on the bucket, with the code": {
			resp: miniogo.ErrorResponse{StatusCode: 409, Code: "InvalidBucketState", Message: "The request is not valid with the current state of the bucket.",
				RequestID: "REQ123"},
			wantReason: taxonomy.ReasonUnclassified, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: "InvalidBucketState",
		},
		"an answer that is not an S3 error document is named by its status, never by its body": {
			resp: miniogo.ErrorResponse{StatusCode: 418, Code: "418 I'm a teapot",
				Message: "internal-service-body: instance-id i-0123 token=abc"},
			wantReason: taxonomy.ReasonUnclassified, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: "I'm a teapot",
		},
		"a server error's body is not quoted either": {
			resp:       miniogo.ErrorResponse{StatusCode: 502, Code: "502 Bad Gateway", Message: "internal-service-body: upstream 10.0.0.7 down"},
			wantReason: taxonomy.ReasonServerError, wantCheck: taxonomy.CheckReachable, wantInMsg: "Bad Gateway",
		},
		"a region header that is not a region name is not quoted": {
			resp:       miniogo.ErrorResponse{StatusCode: 301, Code: "PermanentRedirect", Region: "internal-service-body <html>"},
			wantReason: taxonomy.ReasonWrongRegion, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: `not in region "eu-central-1"`,
		},
		"a denial's own message is not quoted": {
			resp:       miniogo.ErrorResponse{StatusCode: 403, Code: "AccessDenied", Message: "internal-service-body"},
			wantReason: taxonomy.ReasonAccessDenied, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: "(AccessDenied)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := taxonomy.Classify(fmt.Errorf("head bucket: %w", tc.resp), s)
			if strings.Contains(f.Message, "internal-service-body") {
				t.Errorf("message %q quotes what the endpoint answered", f.Message)
			}
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
	for _, r := range []taxonomy.Reason{
		taxonomy.ReasonDNSFailure, taxonomy.ReasonConnectionRefused, taxonomy.ReasonTimeout, taxonomy.ReasonTLSUnknownAuthority,
		taxonomy.ReasonCertificateExpired, taxonomy.ReasonCertificateInvalid, taxonomy.ReasonTLSHandshakeFailed,
		taxonomy.ReasonServerError, taxonomy.ReasonCABundleNotFound, taxonomy.ReasonInvalidCABundle,
		taxonomy.ReasonEndpointNotAllowed, taxonomy.ReasonUnclassified,
	} {
		if c := taxonomy.CheckOf(r); c != taxonomy.CheckReachable {
			t.Errorf("%s belongs to %s, want Reachable", r, c)
		}
	}
	for _, r := range []taxonomy.Reason{taxonomy.ReasonInvalidCredentials, taxonomy.ReasonAccessDenied, taxonomy.ReasonSecretNotFound, taxonomy.ReasonSecretKeyMissing,
		taxonomy.ReasonSecretNotLabeled} {
		if c := taxonomy.CheckOf(r); c != taxonomy.CheckAuthenticated {
			t.Errorf("%s belongs to %s, want Authenticated", r, c)
		}
	}
	for _, r := range []taxonomy.Reason{taxonomy.ReasonNoSuchBucket, taxonomy.ReasonWrongRegion, taxonomy.ReasonCanaryMismatch, taxonomy.ReasonObjectLockEnabled} {
		if c := taxonomy.CheckOf(r); c != taxonomy.CheckBucketAvailable {
			t.Errorf("%s belongs to %s, want BucketAvailable", r, c)
		}
	}
	for _, r := range []taxonomy.Reason{taxonomy.ReasonErrResourceExists, taxonomy.ReasonTaggingNotSupported, taxonomy.ReasonBucketNotEmpty} {
		if c := taxonomy.CheckOf(r); c != taxonomy.CheckManaged {
			t.Errorf("%s belongs to %s, want Managed", r, c)
		}
	}
}

// TestNoReasonIsAConditionStatus: a reason named like a condition status (the reason
// Unknown of earlier releases) reads as "Ready: Unknown, reason Unknown" and hides what
// went wrong.
func TestNoReasonIsAConditionStatus(t *testing.T) {
	for _, r := range []taxonomy.Reason{
		taxonomy.ReasonDNSFailure, taxonomy.ReasonConnectionRefused, taxonomy.ReasonConnectionReset, taxonomy.ReasonNetworkUnreachable,
		taxonomy.ReasonTimeout, taxonomy.ReasonEndpointNotAllowed, taxonomy.ReasonTLSUnknownAuthority, taxonomy.ReasonCertificateExpired,
		taxonomy.ReasonCertificateInvalid, taxonomy.ReasonTLSHandshakeFailed, taxonomy.ReasonServerError, taxonomy.ReasonInvalidCredentials,
		taxonomy.ReasonAccessDenied, taxonomy.ReasonNoSuchBucket, taxonomy.ReasonWrongRegion, taxonomy.ReasonCanaryMismatch,
		taxonomy.ReasonObjectLockEnabled, taxonomy.ReasonBucketNotEmpty, taxonomy.ReasonErrResourceExists, taxonomy.ReasonTaggingNotSupported,
		taxonomy.ReasonSecretNotFound, taxonomy.ReasonSecretNotLabeled, taxonomy.ReasonSecretKeyMissing, taxonomy.ReasonCABundleNotFound,
		taxonomy.ReasonInvalidCABundle, taxonomy.ReasonUnclassified,
	} {
		switch r {
		case "True", "False", "Unknown":
			t.Errorf("reason %q is also a condition status", r)
		}
	}
}

// Only a WrongRegion failure that names a region other than the one signed for asks for
// another try: not one that names none, nor the same region again (which would retry
// for ever), nor another reason that happens to carry a region.
func TestOnlyAWrongRegionNamingAnotherRegionIsRetried(t *testing.T) {
	for _, c := range []struct {
		name  string
		f     *taxonomy.Failure
		want  string
		named bool
	}{
		{"none", nil, "", false},
		{"another region", &taxonomy.Failure{Reason: taxonomy.ReasonWrongRegion, Region: "eu-central-1"}, "eu-central-1", true},
		{"no region named", &taxonomy.Failure{Reason: taxonomy.ReasonWrongRegion}, "", false},
		{"the same region", &taxonomy.Failure{Reason: taxonomy.ReasonWrongRegion, Region: "us-east-1"}, "", false},
		{"another reason", &taxonomy.Failure{Reason: taxonomy.ReasonAccessDenied, Region: "eu-central-1"}, "", false},
	} {
		if got, named := c.f.OtherRegion("us-east-1"); got != c.want || named != c.named {
			t.Errorf("%s: OtherRegion = %q, %v; want %q, %v", c.name, got, named, c.want, c.named)
		}
	}
}
