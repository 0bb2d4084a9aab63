// Package webhooks registers the operator's webhooks with the manager's webhook server.
package webhooks

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// Setup serves CRD conversion at /convert for every kind with more than one version.
// Conversion goes through each kind's hub (conversion.Hub / conversion.Convertible in
// api/), so controllers only ever see the hub version.
func Setup(mgr ctrl.Manager) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &phalanksv1beta1.StorageBucket{}).Complete(); err != nil {
		return fmt.Errorf("register StorageBucket conversion: %w", err)
	}
	return nil
}
