package storagebucket

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/conditions"
	"github.com/phalanks/phalanks-operator/internal/grandfather"
)

// Credentials references that predate the label rule (internal/grandfather): the
// operator reads their unlabelled Secret until grandfather.EnforcedFrom, and says so on
// the StorageBucket (condition SecretLabelMissing, a Warning event when it appears).

// refGrandfathered: a Secret without the label, read because the reference to it is
// grandfathered.
const refGrandfathered = refNotLabeled + 1

// Reason of the SecretLabelMissing condition and of its event.
const (
	reasonGrandfathered     = "Grandfathered"
	eventSecretLabelMissing = phalanksv1beta1.ConditionSecretLabelMissing
)

// readGrandfathered reads the unlabelled credentials Secret of sb when the record holds
// its reference (refGrandfathered); otherwise it leaves it refNotLabeled.
func (r *Reconciler) readGrandfathered(ctx context.Context, sb *phalanksv1beta1.StorageBucket, key refKey, rv string) (map[string][]byte, string, refState, error) {
	ok, err := r.opts.Grandfathered.Allows(ctx, sb)
	if err != nil {
		return nil, rv, refNotLabeled, fmt.Errorf("read the grandfathered Secret references: %w", err)
	}
	if !ok {
		return nil, rv, refNotLabeled, nil
	}
	return r.refs.readUnlabeled(ctx, key, rv)
}

// readUnlabeled reads a Secret whatever its labels, once per resourceVersion. The Secret
// informer does not see it (it holds labelled Secrets only), so inputs read from it are
// never reused (inputsFor): every pass reads its metadata again.
func (r *refReader) readUnlabeled(ctx context.Context, key refKey, rv string) (map[string][]byte, string, refState, error) {
	r.mu.Lock()
	cached, ok := r.data[key]
	r.mu.Unlock()
	if ok && !cached.gone && cached.resourceVersion == rv {
		return cached.values, rv, refGrandfathered, nil
	}
	s := &corev1.Secret{}
	if err := r.api.Get(ctx, key.NamespacedName, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", refNotFound, nil
		}
		return nil, "", refNotFound, fmt.Errorf("get Secret: %w", err)
	}
	r.mu.Lock()
	if r.data == nil {
		r.data = map[refKey]refData{}
	}
	r.data[key] = refData{resourceVersion: s.ResourceVersion, values: s.Data}
	r.mu.Unlock()
	return s.Data, s.ResourceVersion, refGrandfathered, nil
}

// grandfatheredCondition is the condition of a pass whose credentials Secret was read
// only because its reference is grandfathered; its message is the notice.
func grandfatheredCondition(notice string) []metav1.Condition {
	if notice == "" {
		return nil
	}
	return []metav1.Condition{conditions.True(phalanksv1beta1.ConditionSecretLabelMissing, reasonGrandfathered, notice)}
}

// grandfatherNotice is the notice of inputs read through a grandfathered reference.
func grandfatherNotice(sb *phalanksv1beta1.StorageBucket, state refState) string {
	if state != refGrandfathered {
		return ""
	}
	return grandfather.Message(sb.Namespace, sb.Spec.CredentialsSecretRef.Name)
}
