package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StorageBucketSpec is the first release's shape of a bucket declaration: where the
// bucket is, which Secret holds its credentials, and how often to check it.
type StorageBucketSpec struct {
	// endpoint is the host and optional port of the S3-compatible service, without a
	// scheme, for example s3.eu-central-1.amazonaws.com or minio.example.com:9000.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:[0-9]{1,5})?$`
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Endpoint",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Endpoint string `json:"endpoint"`

	// bucketName is the name of the bucket on the endpoint, following the S3 naming
	// rules. It cannot be changed.
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

	// (The default stays as 0.1.0 set it: OLM v1 refuses to upgrade a CRD that removes
	// one, "default value removed".)

	// region of the bucket; us-east-1 when left out in this version. In v1beta1 an empty
	// region lets the operator find the bucket's region.
	// +optional
	// +kubebuilder:default="us-east-1"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]*[a-z0-9]$`
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Region",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Region string `json:"region,omitempty"`

	// secretName names a Secret in the same namespace with the keys AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY. Empty means anonymous requests.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Credentials Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	SecretName string `json:"secretName,omitempty"`

	// insecure talks plain HTTP to the endpoint instead of HTTPS.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// intervalSeconds between two health checks.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=86400
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Check interval (seconds)",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`
}

// StorageBucketStatus is the first release's summary of a bucket's health.
type StorageBucketStatus struct {
	// healthy is true when the last health check passed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Healthy",xDescriptors={"urn:alm:descriptor:text"}
	Healthy bool `json:"healthy"`

	// lastChecked is when the bucket was last checked.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Last checked",xDescriptors={"urn:alm:descriptor:text"}
	LastChecked *metav1.Time `json:"lastChecked,omitempty"`

	// message explains the last result.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Message",xDescriptors={"urn:alm:descriptor:text"}
	Message string `json:"message,omitempty"`
}

// StorageBucket is the v1alpha1 view of a bucket on an S3-compatible endpoint. It is
// served for clients of the first release; phalanks.io/v1beta1 is stored and carries
// every newer field, which survive a round trip through this version.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbk,categories=phalanks
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=`.spec.bucketName`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint`
// +kubebuilder:printcolumn:name="Healthy",type=boolean,JSONPath=`.status.healthy`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="Storage Bucket (v1alpha1, deprecated)",resources={{Secret,v1,""}}
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
