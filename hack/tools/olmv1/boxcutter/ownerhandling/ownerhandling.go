// Package ownerhandling holds the boxcutter stand-in's owner strategy, which refuses to
// set owners with types.ErrNotInThisBuild (see package boxcutter).
package ownerhandling

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"pkg.package-operator.run/boxcutter/machinery/types"
)

// OwnerStrategyNative would record owners as native owner references.
type OwnerStrategyNative struct{}

// NewNative returns the native owner strategy.
func NewNative(_ *runtime.Scheme) *OwnerStrategyNative { return &OwnerStrategyNative{} }

// SetControllerReference returns types.ErrNotInThisBuild.
func (*OwnerStrategyNative) SetControllerReference(_, _ metav1.Object) error {
	return types.ErrNotInThisBuild
}
