package v1beta1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names the operator sets on StorageBuckets and on the buckets it manages.
const (
	// AnnotationAdopt on a StorageBucket under managementPolicy Manage lets the operator
	// take over an existing bucket: "true" adopts a bucket that carries no ownership tag,
	// and a StorageBucket UID adopts a bucket whose ownership tag names that UID (the
	// bucket of a deleted StorageBucket whose deletionPolicy was Retain). Without it an
	// existing bucket that is not tagged with this StorageBucket's UID is never changed.
	AnnotationAdopt = "phalanks.io/adopt"

	// OwnerTagKey is the bucket tag whose value is the UID of the StorageBucket that
	// manages the bucket.
	OwnerTagKey = "phalanks.io/storagebucket-uid"

	// FinalizerBucketDeletion holds a StorageBucket with deletionPolicy Delete until its
	// bucket is deleted (or the nonEmptyStrategy releases it).
	FinalizerBucketDeletion = "phalanks.io/bucket-deletion"

	// CanaryPrefix is the key prefix under which the ReadWrite probe writes its canary
	// object, followed by the StorageBucket UID.
	CanaryPrefix = ".phalanks-probe/"

	// LabelSecretAllowed, with the value "true", marks a Secret that StorageBuckets may
	// use (for credentials or a CA bundle). The operator reads no other Secret, so that
	// someone who may create StorageBuckets but not read Secrets cannot have the operator
	// send the value of an arbitrary Secret to an endpoint of their choosing.
	LabelSecretAllowed = "phalanks.io/storagebucket-secret" //nolint:gosec // G101: a label key, not a credential
)

// AddressingStyle selects how requests name the bucket.
// +kubebuilder:validation:Enum=Auto;Path;VirtualHost
type AddressingStyle string

const (
	// AddressingAuto uses virtual-host style where the endpoint is known to support it
	// (AWS, some others) and path style everywhere else.
	AddressingAuto AddressingStyle = "Auto"
	// AddressingPath sends requests to https://endpoint/bucket/key.
	AddressingPath AddressingStyle = "Path"
	// AddressingVirtualHost sends requests to https://bucket.endpoint/key.
	AddressingVirtualHost AddressingStyle = "VirtualHost"
)

// ProbeDepth is how far into the bucket's data path a health check goes. Each depth
// includes the checks of the ones before it.
// +kubebuilder:validation:Enum=Connect;HeadBucket;List;ReadWrite
type ProbeDepth string

const (
	// ProbeConnect opens a TCP connection and, for https, completes the TLS handshake.
	ProbeConnect ProbeDepth = "Connect"
	// ProbeHeadBucket sends an authenticated HeadBucket request.
	ProbeHeadBucket ProbeDepth = "HeadBucket"
	// ProbeList lists at most one object (ListObjectsV2 with max-keys=1).
	ProbeList ProbeDepth = "List"
	// ProbeReadWrite writes, reads back, compares and deletes a canary object under
	// the reserved prefix ".phalanks-probe/". On versioned buckets it deletes the exact
	// version it wrote, so no version or delete marker is left behind.
	ProbeReadWrite ProbeDepth = "ReadWrite"
)

// ManagementPolicy says whether the operator may change the bucket.
// +kubebuilder:validation:Enum=Observe;Manage
type ManagementPolicy string

const (
	// ManagementObserve only probes the bucket and never changes it.
	ManagementObserve ManagementPolicy = "Observe"
	// ManagementManage creates the bucket when it is missing and tags it with the
	// StorageBucket's UID. A bucket that exists without that tag is never changed.
	ManagementManage ManagementPolicy = "Manage"
)

// DeletionPolicy says what happens to a managed bucket when its StorageBucket is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionRetain keeps the bucket and its data.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete deletes the bucket, following the nonEmptyStrategy.
	DeletionDelete DeletionPolicy = "Delete"
)

// NonEmptyStrategy says how deleting a managed bucket that still holds objects proceeds.
// +kubebuilder:validation:Enum=Fail;DeleteIfEmpty;ForceEmpty
type NonEmptyStrategy string

const (
	// NonEmptyFail keeps the StorageBucket (its finalizer stays) and reports
	// BucketNotEmpty until the bucket is empty or the policy changes.
	NonEmptyFail NonEmptyStrategy = "Fail"
	// NonEmptyDeleteIfEmpty deletes an empty bucket; a non-empty one is left in place
	// with its data and the StorageBucket is released.
	NonEmptyDeleteIfEmpty NonEmptyStrategy = "DeleteIfEmpty"
	// NonEmptyForceEmpty deletes every object version and delete marker, then the
	// bucket. It refuses a bucket with object lock enabled.
	NonEmptyForceEmpty NonEmptyStrategy = "ForceEmpty"
)

// CredentialsSecretReference names a Secret in the StorageBucket's namespace that holds
// an S3 access key pair, and for temporary credentials their session token.
type CredentialsSecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// accessKeyIDKey is the Secret key holding the access key ID.
	// +optional
	// +kubebuilder:default="AWS_ACCESS_KEY_ID"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	AccessKeyIDKey string `json:"accessKeyIDKey,omitempty"`

	// secretAccessKeyKey is the Secret key holding the secret access key.
	// +optional
	// +kubebuilder:default="AWS_SECRET_ACCESS_KEY"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`

	// sessionTokenKey is the Secret key holding the session token of temporary
	// credentials (issued by an STS or a vault outside the cluster, e.g. the key
	// AWS_SESSION_TOKEN). Unset, the key pair is used without one. Whoever issues the
	// credentials replaces all three in the Secret before they expire; the next probe
	// uses the new ones.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SessionTokenKey string `json:"sessionTokenKey,omitempty"`
}

// Default key names in the credentials Secret, as the AWS tools name them.
const (
	DefaultAccessKeyIDKey     = "AWS_ACCESS_KEY_ID"
	DefaultSecretAccessKeyKey = "AWS_SECRET_ACCESS_KEY" //nolint:gosec // G101: a key name, not a credential
)

// Keys returns the Secret keys of the access key ID and the secret access key, with
// the defaults for unset ones.
func (r CredentialsSecretReference) Keys() (accessKeyID, secretAccessKey string) {
	accessKeyID, secretAccessKey = r.AccessKeyIDKey, r.SecretAccessKeyKey
	if accessKeyID == "" {
		accessKeyID = DefaultAccessKeyIDKey
	}
	if secretAccessKey == "" {
		secretAccessKey = DefaultSecretAccessKeyKey
	}
	return accessKeyID, secretAccessKey
}

// KeyReference names one key of a ConfigMap or Secret in the StorageBucket's namespace.
type KeyReference struct {
	// name of the ConfigMap or Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key whose value is the PEM-encoded CA bundle.
	// +optional
	// +kubebuilder:default="ca.crt"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// CABundleSource points at PEM-encoded CA certificates that the endpoint's certificate
// must chain to, in place of the system roots. Set exactly one of its fields.
// +kubebuilder:validation:XValidation:rule="has(self.configMapKeyRef) != has(self.secretKeyRef)",message="caBundle needs exactly one of configMapKeyRef and secretKeyRef"
type CABundleSource struct {
	// configMapKeyRef selects a ConfigMap key.
	// +optional
	ConfigMapKeyRef *KeyReference `json:"configMapKeyRef,omitempty"`

	// secretKeyRef selects a Secret key.
	// +optional
	SecretKeyRef *KeyReference `json:"secretKeyRef,omitempty"`
}

// HealthCheck configures the periodic probe.
// +kubebuilder:validation:XValidation:rule="duration(self.interval) >= duration('5s')",message="healthCheck.interval must be at least 5s"
// +kubebuilder:validation:XValidation:rule="duration(self.interval) <= duration('24h')",message="healthCheck.interval must be at most 24h"
// +kubebuilder:validation:XValidation:rule="duration(self.timeout) < duration(self.interval)",message="healthCheck.timeout must be shorter than healthCheck.interval"
// +kubebuilder:validation:XValidation:rule="duration(self.timeout) >= duration('100ms')",message="healthCheck.timeout must be at least 100ms"
// +kubebuilder:validation:XValidation:rule="duration(self.timeout) <= duration('60s')",message="healthCheck.timeout must be at most 60s"
type HealthCheck struct {
	// interval between two probes of this bucket, for example 30s or 5m; at least 5s and
	// at most 24h. Each bucket probes at its own fixed phase within the interval, so many
	// buckets with the same interval spread evenly over it.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Probe interval",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Interval *metav1.Duration `json:"interval,omitempty"`

	// timeout of one probe, at least 100ms, at most 60s and shorter than the interval. A
	// probe that takes longer fails with reason Timeout. A whole pass (managing the
	// bucket, the probe and deleting a canary) takes at most three timeouts.
	// +optional
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Probe timeout",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// depth of the probe: Connect (TCP and TLS handshake), HeadBucket (default), List
	// (ListObjectsV2 with max-keys=1) or ReadWrite (put, get, compare and delete a canary
	// object under ".phalanks-probe/"; needs write permission). Under managementPolicy
	// Manage a ReadWrite probe writes only into a bucket the StorageBucket owns.
	// +optional
	// +kubebuilder:default=HeadBucket
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Probe depth",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Connect","urn:alm:descriptor:com.tectonic.ui:select:HeadBucket","urn:alm:descriptor:com.tectonic.ui:select:List","urn:alm:descriptor:com.tectonic.ui:select:ReadWrite"}
	Depth ProbeDepth `json:"depth,omitempty"`
}

// StorageBucketSpec declares a bucket on an S3-compatible endpoint outside the cluster.
// +kubebuilder:validation:XValidation:rule="!self.endpoint.lowerAscii().startsWith('http://') || (has(self.insecureAllowHTTP) && self.insecureAllowHTTP)",message="endpoint uses plain http://, which sends credentials and data unencrypted; use https:// or set insecureAllowHTTP: true"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.managementPolicy) || oldSelf.managementPolicy != 'Manage' || !has(self.managementPolicy) || self.managementPolicy != 'Manage' || (self.endpoint == oldSelf.endpoint && has(self.region) == has(oldSelf.region) && (!has(self.region) || self.region == oldSelf.region))",message="endpoint and region cannot change while managementPolicy is Manage: the managed bucket would be left behind on the old endpoint. Set managementPolicy to Observe first (the operator then leaves that bucket as it is)"
// +kubebuilder:validation:XValidation:rule="!has(self.caBundle) || self.endpoint.lowerAscii().startsWith('https://')",message="caBundle applies only to an https:// endpoint"
// +kubebuilder:validation:XValidation:rule="self.deletionPolicy != 'Delete' || self.managementPolicy == 'Manage'",message="deletionPolicy Delete needs managementPolicy Manage: the operator only deletes buckets it manages"
type StorageBucketSpec struct {
	// bucketName is the name of the bucket on the endpoint. It follows the S3 naming
	// rules (3-63 lowercase letters, digits, dots and hyphens; starts and ends with a
	// letter or digit; not an IP address) and cannot be changed.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('.-') && !self.contains('-.')",message="bucketName must not contain '..', '.-' or '-.'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$')",message="bucketName must not look like an IP address"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('xn--') && !self.startsWith('sthree-') && !self.endsWith('-s3alias') && !self.endsWith('--ol-s3')",message="bucketName must not use a prefix or suffix that S3 reserves (xn--, sthree-, -s3alias, --ol-s3)"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bucketName is immutable"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Bucket name",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	BucketName string `json:"bucketName"`

	// endpoint is the URL of the S3-compatible service, for example
	// https://s3.eu-central-1.amazonaws.com or https://minio.example.com:9000, without a
	// path, query or user information. Plain http:// is accepted only together with
	// insecureAllowHTTP. It cannot change while managementPolicy is Manage. The operator
	// connects only to addresses its endpoint policy allows (not loopback, link-local or
	// cloud metadata addresses, unless its administrator allows them).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="endpoint must be an absolute http:// or https:// URL, for example https://s3.eu-central-1.amazonaws.com"
	// +kubebuilder:validation:XValidation:rule="!isURL(self) || url(self).getEscapedPath() in ['', '/']",message="endpoint must not have a path: name the bucket in bucketName"
	// +kubebuilder:validation:XValidation:rule="!isURL(self) || url(self).getQuery().size() == 0",message="endpoint must not have a query"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^:/?#]+://[^/?#]*@')",message="endpoint must not hold a user name or password: put credentials in the Secret that credentialsSecretRef names"
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Endpoint",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Endpoint string `json:"endpoint"`

	// insecureAllowHTTP allows an http:// endpoint. Credentials and data then cross the
	// network unencrypted; use it only for test servers.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Allow plain HTTP",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"}
	InsecureAllowHTTP bool `json:"insecureAllowHTTP,omitempty"`

	// region of the bucket, used to sign requests and to create the bucket. When it is
	// empty the operator finds the region: it signs for us-east-1 first, and when the
	// endpoint answers with the bucket's region (x-amz-bucket-region, a 301
	// PermanentRedirect, or AuthorizationHeaderMalformed naming the region it expects)
	// it sends the request once more, signed for that region, and remembers it;
	// status.region shows the region found. A region that is set is used as it is: a
	// wrong one is reported as WrongRegion, naming the right one. It cannot change, nor be
	// set or removed, while managementPolicy is Manage.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]*[a-z0-9]$`
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Region",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Region string `json:"region,omitempty"`

	// addressingStyle: Path, VirtualHost, or Auto (default): virtual-host style for
	// endpoints known to support it (AWS, Google Cloud Storage), path style elsewhere.
	// +optional
	// +kubebuilder:default=Auto
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Addressing style",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Auto","urn:alm:descriptor:com.tectonic.ui:select:Path","urn:alm:descriptor:com.tectonic.ui:select:VirtualHost"}
	AddressingStyle AddressingStyle `json:"addressingStyle,omitempty"`

	// credentialsSecretRef names the Secret holding the access key pair. Without it,
	// requests are anonymous. The Secret must carry the label
	// phalanks.io/storagebucket-secret: "true"; the operator reads no other Secret.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Credentials Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	CredentialsSecretRef *CredentialsSecretReference `json:"credentialsSecretRef,omitempty"`

	// caBundle trusts a private CA for the endpoint's certificate. TLS is always
	// verified; without a caBundle the system roots are used.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="CA bundle"
	CABundle *CABundleSource `json:"caBundle,omitempty"`

	// healthCheck configures the periodic probe.
	// +optional
	// +kubebuilder:default={interval: "60s", timeout: "5s", depth: "HeadBucket"}
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Health check"
	HealthCheck HealthCheck `json:"healthCheck,omitempty"`

	// managementPolicy: Observe (default) never changes the bucket; Manage creates it
	// in region when it is missing and tags it with this StorageBucket's UID (tag
	// phalanks.io/storagebucket-uid). An existing bucket without that tag is never
	// changed (condition Managed=False, reason ErrResourceExists) unless the
	// phalanks.io/adopt annotation asks for it.
	// +optional
	// +kubebuilder:default=Observe
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Management policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Observe","urn:alm:descriptor:com.tectonic.ui:select:Manage"}
	ManagementPolicy ManagementPolicy `json:"managementPolicy,omitempty"`

	// deletionPolicy: Retain (default) keeps the bucket when the StorageBucket is
	// deleted; Delete removes a bucket this StorageBucket manages.
	// +optional
	// +kubebuilder:default=Retain
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Deletion policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"}
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// nonEmptyStrategy applies when deletionPolicy is Delete and the bucket still holds
	// objects: Fail (default) keeps the StorageBucket and reports BucketNotEmpty until
	// the bucket is empty, DeleteIfEmpty leaves the bucket and its data in place and
	// releases the StorageBucket, ForceEmpty deletes every object version and delete
	// marker first (and refuses a bucket with object lock).
	// +optional
	// +kubebuilder:default=Fail
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Non-empty strategy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Fail","urn:alm:descriptor:com.tectonic.ui:select:DeleteIfEmpty","urn:alm:descriptor:com.tectonic.ui:select:ForceEmpty"}
	NonEmptyStrategy NonEmptyStrategy `json:"nonEmptyStrategy,omitempty"`
}

// StorageBucketStatus is the bucket's health as the last probes saw it.
//
// The status is written only when something a user acts on changes (a condition's
// status, reason or message, observedGeneration, serverCertificateNotAfter) and
// otherwise once per heartbeat (the operator's --storagebucket-status-heartbeat flag,
// default 1h), so lastProbeTime, lastProbeDuration and consecutiveFailures may trail the
// newest probe by up to one heartbeat. At a 30s interval that is at most one write per
// 120 probes of a healthy bucket. Per-probe detail is exported as Prometheus metrics.
type StorageBucketStatus struct {
	// observedGeneration is the generation of the spec the last probe used.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Observed generation",xDescriptors={"urn:alm:descriptor:text"}
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready summarises Reachable, Authenticated, BucketAvailable and (under
	// Manage) Managed; the reason of the first failing one becomes Ready's reason. The
	// reasons come from a fixed taxonomy (DNSFailure, ConnectionRefused, Timeout,
	// TLSUnknownAuthority, CertificateExpired, InvalidCredentials, AccessDenied,
	// NoSuchBucket, WrongRegion, …; see docs/storagebucket.md).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"}
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// lastProbeTime is when the bucket was last probed, refreshed with every status
	// write and at least once per heartbeat.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last probe",xDescriptors={"urn:alm:descriptor:text"}
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`

	// lastSuccessTime is when a probe last found the bucket healthy.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last success",xDescriptors={"urn:alm:descriptor:text"}
	LastSuccessTime *metav1.Time `json:"lastSuccessTime,omitempty"`

	// consecutiveFailures counts the failed probes since the last healthy one (as of
	// the last status write).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Consecutive failures",xDescriptors={"urn:alm:descriptor:text"}
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`

	// lastProbeDuration is how long the last probe took (as of the last status write).
	// +optional
	LastProbeDuration *metav1.Duration `json:"lastProbeDuration,omitempty"`

	// serverCertificateNotAfter is when the endpoint's TLS certificate expires, as seen
	// on the newest TLS connection to the endpoint.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Certificate expires",xDescriptors={"urn:alm:descriptor:text"}
	ServerCertificateNotAfter *metav1.Time `json:"serverCertificateNotAfter,omitempty"`

	// createdBucket records, under managementPolicy Manage, that this StorageBucket
	// creates its bucket: it is written before the operator first creates the bucket and
	// kept. A creation interrupted after the bucket was created and before it was tagged
	// as this StorageBucket's (a timeout, a restart) is finished on the next pass instead
	// of being taken for someone else's bucket, and deletionPolicy Delete applies to it.
	// +optional
	CreatedBucket *CreatedBucket `json:"createdBucket,omitempty"`

	// region is the region the operator found for the bucket and signs its requests
	// for, when spec.region is empty; empty when spec.region is set.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Region found",xDescriptors={"urn:alm:descriptor:text"}
	Region string `json:"region,omitempty"`
}

// CreatedBucket is where the operator creates the bucket of a StorageBucket.
type CreatedBucket struct {
	// endpoint the bucket is created on, as spec.endpoint named it.
	// +required
	Endpoint string `json:"endpoint"`

	// region the bucket is created in.
	// +required
	Region string `json:"region"`

	// time when the operator recorded that it creates the bucket.
	// +required
	Time metav1.Time `json:"time"`
}

// Records reports whether the record is for the bucket of this spec: on its endpoint,
// and in its region when the spec names one (without one, the bucket was created in
// the region the operator found, which the record keeps).
func (c *CreatedBucket) Records(spec StorageBucketSpec) bool {
	return c != nil && c.Endpoint == spec.Endpoint && (spec.Region == "" || c.Region == spec.Region)
}

// Condition types of a StorageBucket. Ready summarises the others in this order; the
// first one that is not True gives Ready its status, reason and message.
const (
	// ConditionReady is True when every check the probe depth includes passed (and,
	// under managementPolicy Manage, the bucket is owned by this StorageBucket).
	ConditionReady = "Ready"
	// ConditionReachable is True when the endpoint answered: DNS, TCP, the TLS
	// handshake with a verified certificate, and no server error.
	ConditionReachable = "Reachable"
	// ConditionAuthenticated is True when the endpoint accepted the credentials for
	// the probe's requests. Absent for depth Connect.
	ConditionAuthenticated = "Authenticated"
	// ConditionBucketAvailable is True when the bucket exists in the expected region
	// and passed the probe depth. Absent for depth Connect.
	ConditionBucketAvailable = "BucketAvailable"
	// ConditionManaged is present under managementPolicy Manage: True when the bucket
	// carries this StorageBucket's ownership tag; False when it belongs to something
	// else (ErrResourceExists) or, during deletion, when the bucket cannot be deleted
	// yet (BucketNotEmpty, ObjectLockEnabled).
	ConditionManaged = "Managed"
	// ConditionSecretLabelMissing is present, True, while the operator reads the
	// credentials Secret although it lacks LabelSecretAllowed, because the reference to
	// it existed before the upgrade to the release that introduced the label (reason
	// Grandfathered). Its message names the release from which the Secret is refused.
	// It does not count towards Ready.
	ConditionSecretLabelMissing = "SecretLabelMissing"
)

// IntervalDuration returns the probe interval, or its default when unset.
func (h HealthCheck) IntervalDuration() time.Duration {
	if h.Interval == nil {
		return DefaultProbeInterval
	}
	return h.Interval.Duration
}

// TimeoutDuration returns the probe timeout, or its default when unset.
func (h HealthCheck) TimeoutDuration() time.Duration {
	if h.Timeout == nil {
		return DefaultProbeTimeout
	}
	return h.Timeout.Duration
}

// Defaults the schema applies to healthCheck.
const (
	DefaultProbeInterval = 60 * time.Second
	DefaultProbeTimeout  = 5 * time.Second
)

// The bounds the schema sets on healthCheck.
const (
	MinProbeInterval = 5 * time.Second
	MaxProbeInterval = 24 * time.Hour
	MinProbeTimeout  = 100 * time.Millisecond
	MaxProbeTimeout  = 60 * time.Second
)

// Valid reports whether the health check meets the schema's rules on its durations
// (unset ones take their defaults): for code that builds a spec without the API
// server's validation, such as a conversion.
func (h HealthCheck) Valid() bool {
	interval, timeout := h.IntervalDuration(), h.TimeoutDuration()
	return interval >= MinProbeInterval && interval <= MaxProbeInterval &&
		timeout >= MinProbeTimeout && timeout <= MaxProbeTimeout && timeout < interval
}

// StorageBucket is an object-storage bucket on an S3-compatible endpoint outside the
// cluster, probed periodically for health and optionally created and deleted.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:shortName=sbk,categories=phalanks
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=`.spec.bucketName`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="Storage Bucket",resources={{Secret,v1,""},{ConfigMap,v1,""}}
type StorageBucket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec StorageBucketSpec `json:"spec"`
	// +optional
	Status StorageBucketStatus `json:"status,omitempty"`
}

// StorageBucketList is a list of StorageBuckets.
// +kubebuilder:object:root=true
type StorageBucketList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StorageBucket `json:"items"`
}
