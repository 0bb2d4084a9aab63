// Package grandfather keeps the StorageBucket credentials that worked before the upgrade
// working after it. Releases up to 0.1.0 read any Secret a StorageBucket named; from
// 0.2.0 the operator reads only Secrets labelled phalanks.io/storagebucket-secret=true
// (docs/storagebucket.md, "Which Secrets the operator reads"). A cluster upgraded from
// 0.1.0 has no labelled Secrets, so without a grace period every StorageBucket with
// credentials would turn Ready=False at the upgrade.
//
// The grace covers exactly the references that existed at the upgrade: the first
// release with the rule, on its first start on a cluster that still stores StorageBuckets
// in v1alpha1 (the version only releases before the rule stored), records every
// credentials reference it finds — StorageBucket UID, Secret name, key names, endpoint —
// in a ConfigMap of its own namespace, once. A reference is grandfathered while it is
// exactly one of those: a new StorageBucket, or one whose Secret, key names or endpoint
// changed, is refused as before. Nothing on the StorageBucket (labels, annotations,
// status) counts: a tenant who may write StorageBuckets and their status cannot grant
// the exemption. Only who may write ConfigMaps in the operator's namespace can, and
// they control the operator anyway (they can change its Deployment).
package grandfather

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

const (
	// ConfigMapName names the record in the operator's namespace.
	ConfigMapName = "phalanks-grandfathered-secret-references"
	// EnforcedFrom is the release from which grandfathered references are refused too.
	// TestTheHeadDoesNotEnforceYet fails once the Makefile's VERSION reaches it: the
	// release that does must drop this package.
	EnforcedFrom = "0.3.0"
	// RuleFrom is the first release that reads only labelled Secrets.
	RuleFrom = "0.2.0"
	// unlabelledVersion is the StorageBucket version the releases before RuleFrom stored:
	// the CRD's storedVersions lists it until the storage migration after the upgrade.
	unlabelledVersion = "v1alpha1"

	keyReferences  = "references"
	keyCount       = "count"
	keyRecordedAt  = "recordedAt"
	keyEnforced    = "enforcedFrom"
	keyAbout       = "about"
	keySize        = 16
	listPageSize   = 500
	aboutTheRecord = "Credentials references of StorageBuckets that existed when phalanks-operator " + RuleFrom +
		" first started after an upgrade from an earlier release, which read unlabelled Secrets. The operator " +
		"keeps reading their Secrets although they lack the label phalanks.io/storagebucket-secret=true, until " +
		"release " + EnforcedFrom + ". Each reference is a SHA-256 prefix of the StorageBucket's UID, the Secret's " +
		"name, its key names and the endpoint: a changed reference is not covered. Written once by the operator; " +
		"deleting this ConfigMap ends the grace period for every reference."
)

// Key identifies one grandfathered reference.
type Key [keySize]byte

// KeyOf returns the key of the credentials reference sb makes now, and false when it
// makes none.
func KeyOf(sb *phalanksv1beta1.StorageBucket) (Key, bool) {
	ref := sb.Spec.CredentialsSecretRef
	if ref == nil {
		return Key{}, false
	}
	idKey, secretKey := ref.Keys()
	h := sha256.New()
	parts := []string{string(sb.UID), ref.Name, idKey, secretKey, sb.Spec.Endpoint}
	if ref.SessionTokenKey != "" {
		// A token key added later sends one more value of the Secret: a new reference.
		// Without one, the keys recorded before the field existed stay what they were.
		parts = append(parts, ref.SessionTokenKey)
	}
	for _, part := range parts {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	var k Key
	copy(k[:], h.Sum(nil))
	return k, true
}

// Record is the set of grandfathered references, read from (or, the first time,
// written to) the ConfigMap in Namespace.
type Record struct {
	// Namespace is the operator's namespace. Empty turns grandfathering off: every
	// unlabelled Secret is refused.
	Namespace string
	// CRDName names the StorageBucket CRD, whose storedVersions tell an upgrade from a
	// release before the rule.
	CRDName string
	// Reader reads straight from the API server: the CRD, the StorageBuckets (once) and
	// the record.
	Reader client.Reader
	// Cache, when set, holds the metadata of ConfigMaps: Allows rereads the record when
	// its resourceVersion changed or it is gone (deleted to end the grace period).
	Cache client.Reader
	// Writer creates the record.
	Writer client.Writer
	Clock  clock.PassiveClock
	Log    logr.Logger

	mu      sync.Mutex
	loaded  bool
	version string
	keys    map[Key]struct{}
}

// Ensure loads the record, creating it first when there is none. Any replica may call
// it; the first to create the ConfigMap decides the record and the others read it.
// The storage migration calls it before it trims storedVersions, so that the decision
// is taken while they still show an upgrade from a release before the rule.
func (r *Record) Ensure(ctx context.Context) error {
	if r == nil || r.Namespace == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loaded {
		return nil
	}
	return r.loadLocked(ctx)
}

// Allows reports whether the operator may read sb's unlabelled credentials Secret: its
// reference is one the record holds.
func (r *Record) Allows(ctx context.Context, sb *phalanksv1beta1.StorageBucket) (bool, error) {
	if r == nil || r.Namespace == "" {
		return false, nil
	}
	key, ok := KeyOf(sb)
	if !ok {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loaded || r.stale(ctx) {
		if err := r.loadLocked(ctx); err != nil {
			return false, err
		}
	}
	_, ok = r.keys[key]
	return ok, nil
}

// Len returns how many references the record holds (after Ensure).
func (r *Record) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys)
}

// stale reports whether the cached ConfigMap metadata differs from what was loaded.
func (r *Record) stale(ctx context.Context) bool {
	if r.Cache == nil {
		return false
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := r.Cache.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: ConfigMapName}, meta)
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false // the API server's copy was read when loaded; keep it
	}
	return meta.ResourceVersion != r.version
}

func (r *Record) loadLocked(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: ConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		cm, err = r.create(ctx)
	}
	if err != nil {
		return err
	}
	keys, err := decode(cm.BinaryData[keyReferences])
	if err != nil {
		return fmt.Errorf("read ConfigMap %s/%s: %w", r.Namespace, ConfigMapName, err)
	}
	r.loaded, r.version, r.keys = true, cm.ResourceVersion, keys
	return nil
}

// create takes the snapshot and creates the record; when another replica created it
// first, it returns that one.
func (r *Record) create(ctx context.Context) (*corev1.ConfigMap, error) {
	keys, upgraded, err := r.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if r.Clock != nil {
		now = r.Clock.Now()
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: ConfigMapName,
			Labels: map[string]string{"app.kubernetes.io/part-of": "phalanks-operator"}},
		Data: map[string]string{
			keyAbout:      aboutTheRecord,
			keyCount:      strconv.Itoa(len(keys)),
			keyRecordedAt: now.UTC().Format(time.RFC3339),
			keyEnforced:   EnforcedFrom,
		},
		BinaryData: map[string][]byte{keyReferences: encode(keys)},
	}
	err = r.Writer.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		existing := &corev1.ConfigMap{}
		if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(cm), existing); err != nil {
			return nil, fmt.Errorf("read ConfigMap %s/%s: %w", r.Namespace, ConfigMapName, err)
		}
		return existing, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create ConfigMap %s/%s: %w", r.Namespace, ConfigMapName, err)
	}
	if upgraded {
		r.Log.Info("upgraded from a release that read unlabelled Secrets: recorded the StorageBuckets' credentials "+
			"references, whose Secrets are read without the label until "+EnforcedFrom,
			"configMap", r.Namespace+"/"+ConfigMapName, "references", len(keys))
	}
	return cm, nil
}

// snapshot returns the key of every StorageBucket's credentials reference when the CRD
// still stores v1alpha1 (an upgrade from a release before the rule), and nothing on a
// cluster that never ran one.
func (r *Record) snapshot(ctx context.Context) (map[Key]struct{}, bool, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Name: r.CRDName}, crd); err != nil {
		return nil, false, fmt.Errorf("get CRD %s: %w", r.CRDName, err)
	}
	keys := map[Key]struct{}{}
	if !slices.Contains(crd.Status.StoredVersions, unlabelledVersion) {
		return keys, false, nil
	}
	token := ""
	for {
		list := &phalanksv1beta1.StorageBucketList{}
		if err := r.Reader.List(ctx, list, client.Limit(listPageSize), client.Continue(token)); err != nil {
			return nil, false, fmt.Errorf("list StorageBuckets: %w", err)
		}
		for i := range list.Items {
			if k, ok := KeyOf(&list.Items[i]); ok {
				keys[k] = struct{}{}
			}
		}
		if token = list.Continue; token == "" {
			return keys, true, nil
		}
	}
}

// encode concatenates the keys in order: 16 bytes each, so a ConfigMap's 1 MiB holds
// over 65,000.
func encode(keys map[Key]struct{}) []byte {
	sorted := make([]Key, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool { return bytes.Compare(sorted[i][:], sorted[j][:]) < 0 })
	out := make([]byte, 0, len(sorted)*keySize)
	for _, k := range sorted {
		out = append(out, k[:]...)
	}
	return out
}

func decode(data []byte) (map[Key]struct{}, error) {
	if len(data)%keySize != 0 {
		return nil, errors.New("the references are not a whole number of keys")
	}
	keys := make(map[Key]struct{}, len(data)/keySize)
	for i := 0; i < len(data); i += keySize {
		var k Key
		copy(k[:], data[i:i+keySize])
		keys[k] = struct{}{}
	}
	return keys, nil
}

// Message is what the StorageBucket's condition and Warning event tell its owner.
func Message(namespace, secret string) string {
	return fmt.Sprintf("Secret %q lacks the label %s=true. The operator still reads it for this StorageBucket, whose "+
		"reference existed before the upgrade to %s; from release %s on it will not (Ready False, SecretNotLabeled), "+
		"nor now if the reference changes. Label the Secret: kubectl label secret %s -n %s %s=true",
		secret, phalanksv1beta1.LabelSecretAllowed, RuleFrom, EnforcedFrom, secret, namespace, phalanksv1beta1.LabelSecretAllowed)
}
