package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FooSpec is the desired state of a Foo: a Deployment of the given name and size.
type FooSpec struct {
	// deploymentName is the name of the Deployment this Foo owns, in the Foo's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Deployment name",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	DeploymentName string `json:"deploymentName"`

	// replicas is the desired number of pods of the Deployment. Unset leaves the
	// Deployment's own default of 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"}
	Replicas *int32 `json:"replicas,omitempty"`

	// image is the container image the Deployment runs.
	// +optional
	// +kubebuilder:default="nginx:latest"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Image",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Image string `json:"image,omitempty"`

	// podSecurity is the Pod Security level the Deployment's pods are made to meet.
	// Restricted gives them what the restricted level requires (runAsNonRoot, the
	// RuntimeDefault seccomp profile, no privilege escalation, every capability dropped),
	// so that a namespace enforcing that level, or OpenShift's restricted-v2 SCC, admits
	// them; the image must then run as a non-root user (nginxinc/nginx-unprivileged does,
	// nginx:latest does not). Unset leaves the pods' security settings alone, as
	// sample-controller does.
	// +optional
	// +kubebuilder:validation:Enum=Restricted
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Pod Security level",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Restricted"}
	PodSecurity FooPodSecurity `json:"podSecurity,omitempty"`

	// resources are the compute resources of the Deployment's nginx container: requests
	// that a namespace's ResourceQuota or LimitRange may require, and limits. Unset leaves
	// the container's resources alone, as sample-controller does.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Resources",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:resourceRequirements"}
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// FooPodSecurity is a Pod Security level a Foo's pods are made to meet.
type FooPodSecurity string

// FooPodSecurityRestricted is the restricted Pod Security level.
const FooPodSecurityRestricted FooPodSecurity = "Restricted"

// FooStatus is the observed state of a Foo.
type FooStatus struct {
	// availableReplicas is the number of available pods of the owned Deployment.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Available replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"}
	AvailableReplicas int32 `json:"availableReplicas"`

	// observedGeneration is the Foo generation last synced to the Deployment.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions holds Ready: True when the Deployment exists, is controlled by this Foo,
	// has its replicas and image and reports Available; otherwise False with the reason
	// of the first of those that fails (ErrResourceExists, InvalidSpec, Unavailable).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"}
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Foo owns a Deployment and keeps its replica count, as kubernetes/sample-controller's
// Foo does.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=phalanks
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deploymentName`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +operator-sdk:csv:customresourcedefinitions:displayName="Foo",resources={{Deployment,v1,""}}
type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FooSpec `json:"spec"`
	// +optional
	Status FooStatus `json:"status,omitempty"`
}

// FooList is a list of Foos.
// +kubebuilder:object:root=true
type FooList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Foo `json:"items"`
}
