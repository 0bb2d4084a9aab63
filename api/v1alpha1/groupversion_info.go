// Package v1alpha1 contains the phalanks.io/v1alpha1 API: Foo, and the first, simpler
// shape of StorageBucket that is served for clients of the first release.
// +kubebuilder:object:generate=true
// +groupName=phalanks.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "phalanks.io", Version: "v1alpha1"}

	// SchemeBuilder registers these types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds these types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Foo{}, &FooList{}, &StorageBucket{}, &StorageBucketList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
