// Package taxonomy is the fixed vocabulary of what can go wrong with a StorageBucket: the
// condition reasons users see, the check each one makes fail, and the classification of
// whatever an S3 endpoint, the network or TLS returned into one of them. Probing
// (internal/s3probe), bucket management (internal/s3bucket) and the controller all speak it.
//
// A Failure's message goes into a status condition and an event, so it is built only from
// what the operator knows or can vouch for: the endpoint's host, the bucket, a validated
// S3 error code or HTTP status text. It never holds credentials, a response body, or
// per-request detail (ports, request IDs, timings).
package taxonomy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"time"

	miniogo "github.com/minio/minio-go/v7"
)

// Reason names why a check failed. Reasons are the condition reasons users see, so the
// set is fixed and each one says what to look at.
type Reason string

// The reasons. Each one belongs to the Check it makes fail (see CheckOf).
const (
	// ReasonDNSFailure: the endpoint's host name does not resolve.
	ReasonDNSFailure Reason = "DNSFailure"
	// ReasonConnectionRefused: nothing listens on the endpoint's port.
	ReasonConnectionRefused Reason = "ConnectionRefused"
	// ReasonConnectionReset: the endpoint closed the connection mid-request.
	ReasonConnectionReset Reason = "ConnectionReset"
	// ReasonNetworkUnreachable: no route to the endpoint.
	ReasonNetworkUnreachable Reason = "NetworkUnreachable"
	// ReasonTimeout: the endpoint did not answer within the probe timeout.
	ReasonTimeout Reason = "Timeout"
	// ReasonEndpointNotAllowed: the endpoint resolves to an address the operator's
	// endpoint policy denies (loopback, link-local, cloud metadata, or a range the
	// operator's administrator denied); no connection was made.
	ReasonEndpointNotAllowed Reason = "EndpointNotAllowed"
	// ReasonTLSUnknownAuthority: the certificate chains to a CA that is not trusted
	// (set caBundle for a private CA).
	ReasonTLSUnknownAuthority Reason = "TLSUnknownAuthority"
	// ReasonCertificateExpired: the endpoint's certificate (or one in its chain) expired.
	ReasonCertificateExpired Reason = "CertificateExpired"
	// ReasonCertificateInvalid: the certificate does not name the endpoint's host, or is
	// otherwise not valid for it.
	ReasonCertificateInvalid Reason = "CertificateInvalid"
	// ReasonTLSHandshakeFailed: the TLS handshake failed for another reason (for example
	// the endpoint does not speak TLS).
	ReasonTLSHandshakeFailed Reason = "TLSHandshakeFailed"
	// ReasonServerError: the endpoint answered with a server error (5xx, SlowDown).
	ReasonServerError Reason = "ServerError"
	// ReasonInvalidCredentials: the endpoint does not know the access key, or the
	// secret key does not match it.
	ReasonInvalidCredentials Reason = "InvalidCredentials"
	// ReasonAccessDenied: the endpoint accepted the request's identity (or none was
	// sent) but denies the operation.
	ReasonAccessDenied Reason = "AccessDenied"
	// ReasonNoSuchBucket: the bucket does not exist.
	ReasonNoSuchBucket Reason = "NoSuchBucket"
	// ReasonWrongRegion: the bucket (or endpoint) lives in another region than the
	// StorageBucket's region.
	ReasonWrongRegion Reason = "WrongRegion"
	// ReasonCanaryMismatch: the canary object read back differs from what was written.
	ReasonCanaryMismatch Reason = "CanaryMismatch"
	// ReasonObjectLockEnabled: object lock forbids the operation (deleting versions).
	ReasonObjectLockEnabled Reason = "ObjectLockEnabled"
	// ReasonBucketNotEmpty: the bucket still holds objects.
	ReasonBucketNotEmpty Reason = "BucketNotEmpty"
	// ReasonErrResourceExists: the bucket exists and is not owned by this StorageBucket.
	ReasonErrResourceExists Reason = "ErrResourceExists"
	// ReasonTaggingNotSupported: the endpoint does not implement bucket tagging, which
	// managementPolicy Manage needs to record whose bucket it is.
	ReasonTaggingNotSupported Reason = "TaggingNotSupported"
	// ReasonSecretNotFound: the credentials Secret does not exist.
	ReasonSecretNotFound Reason = "SecretNotFound"
	// ReasonSecretNotLabeled: the referenced Secret exists but does not carry the label
	// that allows StorageBuckets to use it; the operator does not read it.
	ReasonSecretNotLabeled Reason = "SecretNotLabeled"
	// ReasonSecretKeyMissing: the credentials Secret lacks a key, or its value is empty.
	ReasonSecretKeyMissing Reason = "SecretKeyMissing"
	// ReasonCABundleNotFound: the CA bundle's ConfigMap, Secret or key does not exist.
	ReasonCABundleNotFound Reason = "CABundleNotFound"
	// ReasonInvalidCABundle: the CA bundle holds no PEM certificate.
	ReasonInvalidCABundle Reason = "InvalidCABundle"
	// ReasonUnclassified: an error outside the taxonomy; the message has what can be
	// said about it.
	ReasonUnclassified Reason = "UnclassifiedError"
)

// Check is one of the health checks a probe makes, in the order they build on each
// other. The StorageBucket condition of the same name reports it.
type Check string

// The checks, in order.
const (
	CheckReachable       Check = "Reachable"
	CheckAuthenticated   Check = "Authenticated"
	CheckBucketAvailable Check = "BucketAvailable"
	CheckManaged         Check = "Managed"
)

// CheckOf returns the check a failure with this reason makes fail.
func CheckOf(r Reason) Check {
	switch r {
	case ReasonDNSFailure, ReasonConnectionRefused, ReasonConnectionReset, ReasonNetworkUnreachable, ReasonTimeout,
		ReasonEndpointNotAllowed, ReasonTLSUnknownAuthority, ReasonCertificateExpired, ReasonCertificateInvalid,
		ReasonTLSHandshakeFailed, ReasonServerError, ReasonCABundleNotFound, ReasonInvalidCABundle, ReasonUnclassified:
		return CheckReachable
	case ReasonInvalidCredentials, ReasonAccessDenied, ReasonSecretNotFound, ReasonSecretNotLabeled, ReasonSecretKeyMissing:
		return CheckAuthenticated
	case ReasonErrResourceExists, ReasonBucketNotEmpty, ReasonTaggingNotSupported:
		return CheckManaged
	default:
		return CheckBucketAvailable
	}
}

// EndpointDown reports whether a failure with this reason says the endpoint as a whole
// did not answer (rather than something about one bucket): its other buckets cannot be
// reached either, and its recovery should re-check every one of them.
func EndpointDown(r Reason) bool {
	switch r {
	case ReasonDNSFailure, ReasonConnectionRefused, ReasonConnectionReset, ReasonNetworkUnreachable, ReasonTimeout:
		return true
	}
	return false
}

// Failure is a classified probe or management error. Its Message is safe and stable
// enough for a status condition (see the package comment), so repeating the same failure
// does not change the status.
type Failure struct {
	Reason  Reason
	Check   Check
	Message string
	// Region is the region the endpoint named, for ReasonWrongRegion.
	Region string
	// CertNotAfter is the expiry of a certificate that failed verification, when known.
	CertNotAfter time.Time

	cause error
}

func (f *Failure) Error() string { return string(f.Reason) + ": " + f.Message }

// Unwrap returns the underlying error, for logs.
func (f *Failure) Unwrap() error { return f.cause }

// OtherRegion returns the region the endpoint named when it refused a request signed for
// the region signed as meant for another one (ReasonWrongRegion), and whether it named
// one other than signed: the region to sign the request for once more. A nil failure
// names none.
func (f *Failure) OtherRegion(signed string) (string, bool) {
	if f == nil || f.Reason != ReasonWrongRegion || f.Region == "" || f.Region == signed {
		return "", false
	}
	return f.Region, true
}

// NewFailure returns a failure with a reason, a message and an optional cause.
func NewFailure(r Reason, cause error, format string, args ...any) *Failure {
	return &Failure{Reason: r, Check: CheckOf(r), Message: fmt.Sprintf(format, args...), cause: cause}
}

// Subject is what a classified request was about, to word the message.
type Subject struct {
	// Host is the endpoint's host:port.
	Host    string
	Bucket  string
	Region  string
	Timeout time.Duration
}

// Classify turns an error from a connection or an S3 request into a Failure. A nil
// error gives nil.
func Classify(err error, s Subject) *Failure {
	if err == nil {
		return nil
	}
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	if fail := classifyS3(err, s); fail != nil {
		return fail
	}
	if fail := classifyTLS(err, s); fail != nil {
		return fail
	}
	return classifyNetwork(err, s)
}

func classifyNetwork(err error, s Subject) *Failure {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return NewFailure(ReasonTimeout, err, "no answer from %s within %s", s.Host, s.Timeout)
	case errors.As(err, &dnsErr):
		return NewFailure(ReasonDNSFailure, err, "cannot resolve %s: %s", dnsErr.Name, dnsErr.Err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return NewFailure(ReasonConnectionRefused, err, "connection to %s refused", s.Host)
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return NewFailure(ReasonConnectionReset, err, "%s closed the connection", s.Host)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return NewFailure(ReasonNetworkUnreachable, err, "no route to %s", s.Host)
	case errors.Is(err, context.Canceled):
		return NewFailure(ReasonUnclassified, err, "probe of %s canceled", s.Host)
	}
	return NewFailure(ReasonUnclassified, err, "%s", stableText(err))
}

func classifyTLS(err error, s Subject) *Failure {
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknownCA):
		issuer := "unknown issuer"
		if unknownCA.Cert != nil {
			issuer = "issuer " + unknownCA.Cert.Issuer.String()
		}
		return NewFailure(ReasonTLSUnknownAuthority, err,
			"the certificate of %s is signed by an unknown authority (%s); set caBundle to trust a private CA", s.Host, issuer)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		f := NewFailure(ReasonCertificateExpired, err, "the certificate of %s is not valid now (expired or not yet valid)", s.Host)
		if invalid.Cert != nil {
			f.CertNotAfter = invalid.Cert.NotAfter
			f.Message = fmt.Sprintf("the certificate of %s expired at %s", s.Host, invalid.Cert.NotAfter.UTC().Format(time.RFC3339))
		}
		return f
	case errors.As(err, &hostname):
		return NewFailure(ReasonCertificateInvalid, err, "the certificate of %s is not valid for host %q; it names %s",
			s.Host, hostname.Host, certNames(hostname.Certificate))
	case errors.As(err, &invalid):
		return NewFailure(ReasonCertificateInvalid, err, "the certificate of %s is invalid: %s", s.Host, invalid.Error())
	case errors.As(err, &verify):
		return NewFailure(ReasonCertificateInvalid, err, "the certificate of %s failed verification: %s", s.Host, stableText(verify.Err))
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return NewFailure(ReasonTLSHandshakeFailed, err, "TLS handshake with %s failed: the endpoint does not speak TLS", s.Host)
	case errors.As(err, &alert):
		return NewFailure(ReasonTLSHandshakeFailed, err, "TLS handshake with %s failed: %s", s.Host, alert.Error())
	case strings.Contains(err.Error(), "tls: "):
		return NewFailure(ReasonTLSHandshakeFailed, err, "TLS handshake with %s failed: %s", s.Host, stableText(err))
	}
	return nil
}

func certNames(c *x509.Certificate) string {
	if c == nil {
		return "no names"
	}
	names := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no subject alternative names"
	}
	return strings.Join(names, ", ")
}

// S3 error codes that mean the credentials themselves are wrong. InvalidTokenId is
// MinIO's answer to temporary keys sent without their session token (or with another's),
// InvalidClientTokenId AWS's, XAdminUserNotFound versitygw's to an unknown access key.
var invalidCredentialCodes = map[string]bool{
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "InvalidToken": true, "ExpiredToken": true,
	"TokenRefreshRequired": true, "InvalidSecurity": true, "XMinioInvalidIAMCredentials": true,
	"InvalidTokenId": true, "InvalidClientTokenId": true, "XAdminUserNotFound": true,
}

func classifyS3(err error, s Subject) *Failure {
	var resp miniogo.ErrorResponse
	if !errors.As(err, &resp) || (resp.StatusCode == 0 && resp.Code == "") {
		return nil
	}
	// The answer's message (and, for an answer that is not an S3 error document, its
	// body) is read to classify it, never quoted: the endpoint is whatever a user named.
	detail := answerCode(resp)
	switch {
	case invalidCredentialCodes[resp.Code]:
		return NewFailure(ReasonInvalidCredentials, err, "%s rejected the credentials (%s)", s.Host, detail)
	case resp.Code == "AuthorizationHeaderMalformed" && regionMismatch(resp, s.Region) != "":
		return wrongRegion(err, s, regionMismatch(resp, s.Region))
	case resp.Code == "PermanentRedirect" || resp.Code == "IllegalLocationConstraintException" ||
		resp.Code == "InvalidRegion" || resp.StatusCode == http.StatusMovedPermanently:
		return wrongRegion(err, s, regionMismatch(resp, s.Region))
	case resp.Code == "ObjectLocked" || strings.Contains(strings.ToLower(resp.Message), "object lock") ||
		strings.Contains(resp.Message, "WORM"):
		return NewFailure(ReasonObjectLockEnabled, err, "object lock on bucket %q forbids the operation (%s)", s.Bucket, detail)
	case resp.Code == "AccessDenied" || resp.Code == "AllAccessDisabled" || resp.StatusCode == http.StatusForbidden:
		return NewFailure(ReasonAccessDenied, err, "%s denied access to bucket %q (%s)", s.Host, s.Bucket, detail)
	case resp.Code == "NoSuchBucket":
		return NewFailure(ReasonNoSuchBucket, err, "bucket %q does not exist on %s", s.Bucket, s.Host)
	case resp.Code == "BucketNotEmpty":
		return NewFailure(ReasonBucketNotEmpty, err, "bucket %q is not empty", s.Bucket)
	case resp.StatusCode >= 500 || resp.Code == "SlowDown" || resp.Code == "ServiceUnavailable" || resp.Code == "InternalError":
		return NewFailure(ReasonServerError, err, "%s answered with a server error (%s)", s.Host, detail)
	}
	return &Failure{Reason: ReasonUnclassified, Check: CheckBucketAvailable, cause: err,
		Message: fmt.Sprintf("%s answered %d (%s)", s.Host, resp.StatusCode, detail)}
}

// s3Code is what an S3 error code looks like (AccessDenied, XMinioInvalidIAMCredentials).
var s3Code = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9.]{0,63}$`)

// answerCode names an error answer by its S3 error code when it has one, and by its HTTP
// status text otherwise.
func answerCode(resp miniogo.ErrorResponse) string {
	if s3Code.MatchString(resp.Code) {
		return resp.Code
	}
	if t := http.StatusText(resp.StatusCode); t != "" {
		return t
	}
	return fmt.Sprintf("HTTP %d", resp.StatusCode)
}

// regionName is what a region looks like; anything else the endpoint names is not quoted.
var regionName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// regionMismatch returns the region the endpoint says the bucket is in, when it is not
// the one the request was signed for; empty when the error names no other region.
func regionMismatch(resp miniogo.ErrorResponse, want string) string {
	region := resp.Region
	if region == "" {
		if m := expectingRegion.FindStringSubmatch(resp.Message); m != nil {
			region = m[1]
		}
	}
	if region == want || !regionName.MatchString(region) {
		return ""
	}
	return region
}

// expectingRegion finds the region in AWS's message ("expecting 'eu-west-1'") and
// versitygw's ("expecting \"eu-west-1\"").
var expectingRegion = regexp.MustCompile(`expecting ['"]([^'"]+)['"]`)

func wrongRegion(err error, s Subject, region string) *Failure {
	f := NewFailure(ReasonWrongRegion, err, "bucket %q is not in region %q; the endpoint redirects elsewhere", s.Bucket, s.Region)
	if region != "" {
		f.Region = region
		f.Message = fmt.Sprintf("bucket %q is in region %q, not %q; set spec.region to %q", s.Bucket, region, s.Region, region)
	}
	return f
}

// Per-request detail that would make a repeated failure look like a new one.
var (
	localAddr = regexp.MustCompile(`(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):\d+->`)
	requestID = regexp.MustCompile(`(?i)(request ?id|host ?id)[:=]\s*\S+`)
)

// stableText is a local error's text without per-connection detail, at most 256 bytes.
func stableText(err error) string {
	t := localAddr.ReplaceAllString(err.Error(), "")
	t = requestID.ReplaceAllString(t, "")
	if len(t) > 256 {
		t = t[:256] + "…"
	}
	return t
}

// StableText is err's text as a Failure message may hold it: without per-connection
// detail, at most 256 bytes. Use it only for errors raised locally.
func StableText(err error) string { return stableText(err) }
