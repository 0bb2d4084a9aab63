// Package v1beta1 contains the phalanks.io/v1beta1 API: StorageBucket, stored and served
// in this version, and the conversion hub for its older versions.
// +kubebuilder:object:generate=true
// +groupName=phalanks.io
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "phalanks.io", Version: "v1beta1"}

	// SchemeBuilder registers these types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds these types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &StorageBucket{}, &StorageBucketList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
