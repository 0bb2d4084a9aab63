package storagebucket

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
)

// inputs is what a probe needs besides the spec: the key pair and the CA bundle, read
// from the referenced Secret and ConfigMap.
type inputs struct {
	endpoint s3probe.Endpoint
	// host is the endpoint's host:port; key names the endpoint (scheme, host, port).
	host, key string
	// fingerprint changes whenever a referenced object or the adopt annotation
	// changes, so a changed input is probed at once.
	fingerprint string
	// failure says why the inputs are not usable (SecretNotFound, SecretKeyMissing,
	// CABundleNotFound, InvalidCABundle); nil when they are.
	failure *s3probe.Failure
}

// refReader reads the data of referenced Secrets and ConfigMaps without keeping them in
// the informer cache: the cache holds their metadata only (resourceVersion), and data
// is read from the API server once per resourceVersion and kept here.
type refReader struct {
	cache client.Reader // metadata informers
	api   client.Reader // the API server

	mu   sync.Mutex
	data map[refKey]refData
}

type refKey struct {
	kind string // "Secret" or "ConfigMap"
	types.NamespacedName
}

type refData struct {
	resourceVersion string
	values          map[string][]byte
}

// read returns the object's data and resourceVersion; found is false when it does not
// exist. Values are copied from the object, never logged.
func (r *refReader) read(ctx context.Context, key refKey) (data map[string][]byte, rv string, found bool, err error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(key.kind))
	switch err := r.cache.Get(ctx, key.NamespacedName, meta, client.UnsafeDisableDeepCopy); {
	case apierrors.IsNotFound(err):
		// The cache may lag a Secret created a moment ago; ask the API server.
		meta.ResourceVersion = ""
	case err != nil:
		return nil, "", false, fmt.Errorf("get %s metadata: %w", key.kind, err)
	}
	r.mu.Lock()
	cached, ok := r.data[key]
	r.mu.Unlock()
	if ok && meta.ResourceVersion != "" && cached.resourceVersion == meta.ResourceVersion {
		return cached.values, cached.resourceVersion, true, nil
	}
	values, rv, err := r.fetch(ctx, key)
	if apierrors.IsNotFound(err) {
		r.forget(key)
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, err
	}
	r.mu.Lock()
	if r.data == nil {
		r.data = map[refKey]refData{}
	}
	r.data[key] = refData{resourceVersion: rv, values: values}
	r.mu.Unlock()
	return values, rv, true, nil
}

func (r *refReader) fetch(ctx context.Context, key refKey) (map[string][]byte, string, error) {
	if key.kind == "Secret" {
		s := &corev1.Secret{}
		if err := r.api.Get(ctx, key.NamespacedName, s); err != nil {
			return nil, "", wrapNotFound(err, "get Secret")
		}
		return s.Data, s.ResourceVersion, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.api.Get(ctx, key.NamespacedName, cm); err != nil {
		return nil, "", wrapNotFound(err, "get ConfigMap")
	}
	values := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.BinaryData {
		values[k] = v
	}
	for k, v := range cm.Data {
		values[k] = []byte(v)
	}
	return values, cm.ResourceVersion, nil
}

func wrapNotFound(err error, what string) error {
	if apierrors.IsNotFound(err) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// forget drops cached data, when the object changed or went away.
func (r *refReader) forget(key refKey) {
	r.mu.Lock()
	delete(r.data, key)
	r.mu.Unlock()
}

// loadInputs reads the credentials and CA bundle a StorageBucket references. Problems
// with them (missing Secret or key, bad CA) are reported in inputs.failure; only API
// errors, which a retry can fix, are returned.
func (r *Reconciler) loadInputs(ctx context.Context, sb *phalanksv1beta1.StorageBucket) (inputs, error) {
	in := inputs{endpoint: s3probe.Endpoint{
		URL:        sb.Spec.Endpoint,
		Region:     sb.Spec.Region,
		Addressing: s3probe.Addressing(sb.Spec.AddressingStyle),
	}}
	in.host, in.key = in.endpoint.Host(), in.endpoint.Key()
	fp := "adopt=" + sb.Annotations[phalanksv1beta1.AnnotationAdopt]
	if ref := sb.Spec.CABundle; ref != nil {
		key, name, kind := caRef(sb)
		data, rv, found, err := r.refs.read(ctx, refKey{kind: kind, NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: name}})
		if err != nil {
			return in, err
		}
		fp += ";ca=" + rv
		switch pem, ok := data[key]; {
		case !found:
			in.failure = s3probe.NewFailure(s3probe.ReasonCABundleNotFound, nil, "%s %q with the CA bundle does not exist", kind, name)
		case !ok || len(pem) == 0:
			in.failure = s3probe.NewFailure(s3probe.ReasonCABundleNotFound, nil, "%s %q has no key %q with the CA bundle", kind, name, key)
		default:
			in.endpoint.CABundle = pem
		}
	}
	if ref := sb.Spec.CredentialsSecretRef; ref != nil && in.failure == nil {
		data, rv, found, err := r.refs.read(ctx, refKey{kind: "Secret", NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: ref.Name}})
		if err != nil {
			return in, err
		}
		fp += ";secret=" + rv
		idKey, secretKey := ref.Keys()
		switch {
		case !found:
			in.failure = s3probe.NewFailure(s3probe.ReasonSecretNotFound, nil, "credentials Secret %q does not exist", ref.Name)
		case len(data[idKey]) == 0:
			in.failure = s3probe.NewFailure(s3probe.ReasonSecretKeyMissing, nil, "credentials Secret %q has no value for key %q", ref.Name, idKey)
		case len(data[secretKey]) == 0:
			in.failure = s3probe.NewFailure(s3probe.ReasonSecretKeyMissing, nil, "credentials Secret %q has no value for key %q", ref.Name, secretKey)
		default:
			in.endpoint.Credentials = &s3probe.Credentials{AccessKeyID: string(data[idKey]), SecretAccessKey: string(data[secretKey])}
		}
	}
	in.fingerprint = fp
	return in, nil
}

// caRef returns the CA bundle's key, object name and kind.
func caRef(sb *phalanksv1beta1.StorageBucket) (key, name, kind string) {
	ref, kind := sb.Spec.CABundle.ConfigMapKeyRef, "ConfigMap"
	if ref == nil {
		ref, kind = sb.Spec.CABundle.SecretKeyRef, "Secret"
	}
	if ref == nil {
		return "", "", ""
	}
	key = ref.Key
	if key == "" {
		key = "ca.crt"
	}
	return key, ref.Name, kind
}
