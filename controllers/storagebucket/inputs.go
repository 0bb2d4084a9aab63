package storagebucket

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// inputs is what a probe needs besides the spec: the key pair and the CA bundle, read
// from the referenced Secret and ConfigMap.
type inputs struct {
	endpoint s3probe.Endpoint
	// host is the endpoint's host:port; key names the endpoint (scheme, host, port).
	host, key string
	// fingerprint changes whenever a referenced object or the adopt annotation
	// changes, so a changed input is probed at once.
	fingerprint fingerprint
	// failure says why the inputs are not usable (SecretNotFound, SecretNotLabeled,
	// SecretKeyMissing, CABundleNotFound, InvalidCABundle); nil when they are.
	failure *taxonomy.Failure
	// grandfathered is the notice of credentials read from an unlabelled Secret through
	// a grandfathered reference (grandfathered.go); empty otherwise.
	grandfathered string
	// read is what they were read from (Reconciler.inputsFor).
	read inputsKey
	// discoverRegion is set when the spec names no region: endpoint.Region is then the
	// one found before (or the default), and a request the endpoint refuses as signed
	// for the wrong region is sent once more signed for the region it names.
	discoverRegion bool
}

// regionOf is the region the requests about sb's bucket are signed for, and whether
// the operator finds it: spec.region when set; without it, the region the bucket was
// created in when the status records that this StorageBucket creates it on this
// endpoint, else the region found before (status.region), else the default.
func regionOf(sb *phalanksv1beta1.StorageBucket) (region string, discover bool) {
	if sb.Spec.Region != "" {
		return sb.Spec.Region, false
	}
	if c := sb.Status.CreatedBucket; c != nil && c.Endpoint == sb.Spec.Endpoint && c.Region != "" {
		return c.Region, false
	}
	if sb.Status.Region != "" {
		return sb.Status.Region, true
	}
	return s3probe.DefaultRegion, true
}

// fingerprint identifies what a probe's inputs were made of: the adopt annotation and
// the version of each referenced object, or that it was missing or not labelled. It is
// comparable, and made without allocating: every pass makes one.
type fingerprint struct {
	adopt      string
	ca, secret refVersion
}

// refVersion is what a read of a referenced object found.
type refVersion struct {
	resourceVersion string
	state           refState
}

// refReader reads the data of referenced Secrets and ConfigMaps without keeping them in
// an informer cache: informers hold their metadata only (resourceVersion, labels), and
// data is read from the API server once per resourceVersion and kept here while a
// StorageBucket uses it.
//
// Secrets are read only when they carry phalanksv1beta1.LabelSecretAllowed: the Secret
// informer lists only those, and a referenced Secret without the label is looked at
// through its metadata alone, so its data is never fetched.
type refReader struct {
	secrets    client.Reader // metadata informer of the labelled Secrets
	configMaps client.Reader // metadata informer of every ConfigMap
	api        client.Reader // the API server

	mu   sync.Mutex
	data map[refKey]refData
	// usedBy holds the references each StorageBucket made in its last pass, and users
	// the StorageBuckets that make each (by UID, with their names): a change of a
	// referenced object makes its users due at once (usersOf), and the data no
	// StorageBucket uses any more is dropped.
	usedBy map[types.UID][]refKey
	users  map[refKey]map[types.UID]types.NamespacedName
}

// refVersions are the resourceVersions of a StorageBucket's referenced objects as the
// informers hold them ("" for one they do not hold).
type refVersions struct{ ca, secret string }

// versionsOf returns the resourceVersions of the objects sb references, from the
// informers only: a cache read per reference, which the pass's read makes anyway.
func (r *refReader) versionsOf(ctx context.Context, sb *phalanksv1beta1.StorageBucket) refVersions {
	var v refVersions
	if sb.Spec.CABundle != nil {
		_, name, kind := caRef(sb)
		v.ca = r.cachedVersion(ctx, refKey{kind: kind, NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: name}})
	}
	if ref := sb.Spec.CredentialsSecretRef; ref != nil {
		v.secret = r.cachedVersion(ctx, refKey{kind: kindSecret, NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: ref.Name}})
	}
	return v
}

// cachedVersion returns the resourceVersion the informer holds of an object, or "".
func (r *refReader) cachedVersion(ctx context.Context, key refKey) string {
	meta := metadataShells.Get().(*metav1.PartialObjectMetadata)
	defer releaseMetadata(meta)
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(key.kind))
	informer := r.configMaps
	if key.kind == kindSecret {
		informer = r.secrets
	}
	if err := informer.Get(ctx, key.NamespacedName, meta, client.UnsafeDisableDeepCopy); err != nil {
		return ""
	}
	return meta.ResourceVersion
}

type refKey struct {
	kind string // "Secret" or "ConfigMap"
	types.NamespacedName
}

type refData struct {
	resourceVersion string
	values          map[string][]byte
	// gone is set when the object was deleted; the values are what it held last.
	gone bool
	// creds is the key pair (and token) last made of values, and the keys it was made
	// of: every probe of every StorageBucket that uses the Secret takes the same one.
	creds *s3probe.Credentials
	keys  credentialKeys
}

// credentialKeys are the Secret keys of a key pair and its session token (empty: none).
type credentialKeys struct{ id, secret, token string }

func credentialKeysOf(ref *phalanksv1beta1.CredentialsSecretReference) credentialKeys {
	id, secret := ref.Keys()
	return credentialKeys{id: id, secret: secret, token: ref.SessionTokenKey}
}

// refState is what a read found.
type refState int

const (
	refFound refState = iota
	refNotFound
	// refNotLabeled: a Secret without the label that allows StorageBuckets to use it.
	refNotLabeled
)

// read returns the object's data and resourceVersion. With remembered, an object that
// was deleted returns the data it last held (refFound) if it was read before. Values
// are copied from the object, never logged.
func (r *refReader) read(ctx context.Context, key refKey, remembered bool) (map[string][]byte, string, refState, error) {
	meta, err := r.metadata(ctx, key)
	if err != nil {
		return nil, "", refNotFound, err
	}
	defer releaseMetadata(meta)
	r.mu.Lock()
	cached, ok := r.data[key]
	r.mu.Unlock()
	switch {
	case meta == nil:
		r.markGone(key)
		if remembered && ok {
			return cached.values, cached.resourceVersion, refFound, nil
		}
		return nil, "", refNotFound, nil
	case key.kind == kindSecret && meta.Labels[phalanksv1beta1.LabelSecretAllowed] != "true":
		return nil, meta.ResourceVersion, refNotLabeled, nil
	case ok && !cached.gone && cached.resourceVersion == meta.ResourceVersion:
		return cached.values, cached.resourceVersion, refFound, nil
	}
	values, rv, labeled, err := r.fetch(ctx, key)
	switch {
	case apierrors.IsNotFound(err):
		r.markGone(key)
		if remembered && ok {
			return cached.values, cached.resourceVersion, refFound, nil
		}
		return nil, "", refNotFound, nil
	case err != nil:
		return nil, "", refNotFound, err
	case !labeled:
		return nil, rv, refNotLabeled, nil
	}
	r.mu.Lock()
	if r.data == nil {
		r.data = map[refKey]refData{}
	}
	r.data[key] = refData{resourceVersion: rv, values: values}
	r.mu.Unlock()
	return values, rv, refFound, nil
}

// metadata returns the object's metadata, or nil when it does not exist; give it back
// with releaseMetadata. The informer may lag an object created a moment ago, and the
// Secret informer does not hold Secrets without the label: then the API server is asked
// for the metadata alone.
func (r *refReader) metadata(ctx context.Context, key refKey) (*metav1.PartialObjectMetadata, error) {
	meta := metadataShells.Get().(*metav1.PartialObjectMetadata)
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(key.kind))
	informer := r.configMaps
	if key.kind == kindSecret {
		informer = r.secrets
	}
	err := informer.Get(ctx, key.NamespacedName, meta, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		// A fresh struct: the informer's answer may share the cache's own maps.
		releaseMetadata(meta)
		meta = &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(key.kind))
		err = r.api.Get(ctx, key.NamespacedName, meta)
	}
	switch {
	case apierrors.IsNotFound(err):
		releaseMetadata(meta)
		return nil, nil
	case err != nil:
		releaseMetadata(meta)
		return nil, fmt.Errorf("get %s metadata: %w", key.kind, err)
	}
	return meta, nil
}

// metadataShells are the structs referenced objects' metadata is read into, one per
// pass and reference: the informer's answer is a shallow copy of its own object.
var metadataShells = sync.Pool{New: func() any { return &metav1.PartialObjectMetadata{} }}

func releaseMetadata(meta *metav1.PartialObjectMetadata) {
	if meta != nil {
		*meta = metav1.PartialObjectMetadata{}
		metadataShells.Put(meta)
	}
}

// fetch reads the object's data from the API server. A Secret that lost its label
// since its metadata was read is not returned.
func (r *refReader) fetch(ctx context.Context, key refKey) (values map[string][]byte, rv string, labeled bool, err error) {
	if key.kind == kindSecret {
		s := &corev1.Secret{}
		if err := r.api.Get(ctx, key.NamespacedName, s); err != nil {
			return nil, "", false, wrapNotFound(err, "get Secret")
		}
		if s.Labels[phalanksv1beta1.LabelSecretAllowed] != "true" {
			return nil, s.ResourceVersion, false, nil
		}
		return s.Data, s.ResourceVersion, true, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.api.Get(ctx, key.NamespacedName, cm); err != nil {
		return nil, "", false, wrapNotFound(err, "get ConfigMap")
	}
	values = make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.BinaryData {
		values[k] = v
	}
	for k, v := range cm.Data {
		values[k] = []byte(v)
	}
	return values, cm.ResourceVersion, true, nil
}

func wrapNotFound(err error, what string) error {
	if apierrors.IsNotFound(err) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (r *refReader) markGone(key refKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.data[key]; ok {
		d.gone = true
		r.data[key] = d
	}
}

// use records the references a StorageBucket made in a pass, and drops the data of
// those it no longer makes that no other StorageBucket makes either.
func (r *refReader) use(b bucketRef, keys []refKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.usedBy == nil {
		r.usedBy, r.users = map[types.UID][]refKey{}, map[refKey]map[types.UID]types.NamespacedName{}
	}
	before, known := r.usedBy[b.UID]
	if known && slices.Equal(before, keys) {
		return // the same as the last pass: almost every pass
	}
	r.usedBy[b.UID] = slices.Clone(keys)
	for _, k := range keys {
		if r.users[k] == nil {
			r.users[k] = map[types.UID]types.NamespacedName{}
		}
		r.users[k][b.UID] = b.Key
	}
	r.leaveLocked(b.UID, before, keys)
}

// usersOf returns the StorageBuckets whose last pass referenced the object: those a
// change of it may change. (One that has not passed here yet will, with the object as
// it is then.)
func (r *refReader) usersOf(key refKey) []bucketRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]bucketRef, 0, len(r.users[key]))
	for uid, name := range r.users[key] {
		out = append(out, bucketRef{UID: uid, Key: name})
	}
	return out
}

// credentials returns the key pair and token under keys of the object's values read at
// resourceVersion rv, made once per version and keys.
func (r *refReader) credentials(key refKey, rv string, keys credentialKeys, values map[string][]byte) *s3probe.Credentials {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.data[key]
	if ok && d.resourceVersion == rv && d.creds != nil && d.keys == keys {
		return d.creds
	}
	var token string
	if keys.token != "" {
		token = string(values[keys.token])
	}
	creds := s3probe.NewCredentials(string(values[keys.id]), string(values[keys.secret]), token)
	if ok && d.resourceVersion == rv {
		d.creds, d.keys = creds, keys
		r.data[key] = d
	}
	return creds
}

// release forgets a StorageBucket's references and drops the data nobody uses any more.
func (r *refReader) release(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.usedBy[uid]
	delete(r.usedBy, uid)
	r.leaveLocked(uid, before, nil)
}

// leaveLocked removes uid from the users of the references left that it does not keep.
func (r *refReader) leaveLocked(uid types.UID, left, kept []refKey) {
	for _, k := range left {
		if slices.Contains(kept, k) {
			continue
		}
		delete(r.users[k], uid)
		if len(r.users[k]) == 0 {
			delete(r.users, k)
			delete(r.data, k)
		}
	}
}

// cached returns the references whose data is held, for tests and metrics.
func (r *refReader) cached() []refKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]refKey, 0, len(r.data))
	for k := range r.data {
		out = append(out, k)
	}
	return out
}

const (
	kindSecret    = "Secret"
	kindConfigMap = "ConfigMap"
)

// inputsKey is what a pass's inputs were read from: the StorageBucket's version and the
// versions of the objects it references, as the informers held them before the read.
type inputsKey struct {
	resourceVersion string
	refs            refVersions
}

// inputsFor returns the inputs of a pass: those the bucket's last probing pass read,
// when they were usable and neither the StorageBucket nor an object it references has
// changed since (every scheduled probe of a healthy bucket), or else loadInputs'.
// Unusable inputs are read again every pass, as a missing Secret may appear without
// an event of the informer (one without the label).
func (r *Reconciler) inputsFor(ctx context.Context, sb *phalanksv1beta1.StorageBucket, st *bucketState) (inputs, error) {
	key := inputsKey{resourceVersion: sb.ResourceVersion, refs: r.refs.versionsOf(ctx, sb)}
	if st != nil && st.inputs.read == key && st.inputs.key != "" && st.inputs.failure == nil && st.inputs.grandfathered == "" {
		return st.inputs, nil
	}
	in, err := r.loadInputs(ctx, sb, false)
	in.read = key
	return in, err
}

// inputsChanged reports whether an object the inputs were read from changed since: the
// change may have come after the read, and before this pass made the StorageBucket one
// of the object's users (its first pass) or scheduled its next probe over the one the
// change asked for.
func (r *Reconciler) inputsChanged(ctx context.Context, sb *phalanksv1beta1.StorageBucket, in inputs) bool {
	return r.refs.versionsOf(ctx, sb) != in.read.refs
}

// loadInputs reads the credentials and CA bundle a StorageBucket references. Problems
// with them (missing or unlabelled Secret, missing key, bad CA) are reported in
// inputs.failure; only API errors, which a retry can fix, are returned. With remembered
// (the deletion of a bucket), a referenced object that is gone gives the data this
// process last read from it.
func (r *Reconciler) loadInputs(ctx context.Context, sb *phalanksv1beta1.StorageBucket, remembered bool) (inputs, error) {
	in := inputs{endpoint: s3probe.Endpoint{
		URL:        sb.Spec.Endpoint,
		Addressing: s3probe.Addressing(sb.Spec.AddressingStyle),
	}}
	in.endpoint.Region, in.discoverRegion = regionOf(sb)
	in.host, in.key = r.prober.Pool.HostAndKey(in.endpoint.URL)
	fp := fingerprint{adopt: sb.Annotations[phalanksv1beta1.AnnotationAdopt]}
	var refs [2]refKey // a StorageBucket references at most a CA bundle and a Secret
	used := refs[:0]
	defer func() { r.refs.use(refOf(sb), used) }()
	if ref := sb.Spec.CABundle; ref != nil {
		key, name, kind := caRef(sb)
		rk := refKey{kind: kind, NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: name}}
		used = append(used, rk)
		data, rv, state, err := r.refs.read(ctx, rk, remembered)
		if err != nil {
			return in, err
		}
		fp.ca = refVersion{resourceVersion: rv, state: state}
		switch pem, ok := data[key]; {
		case state == refNotFound:
			in.failure = taxonomy.NewFailure(taxonomy.ReasonCABundleNotFound, nil, "%s %q with the CA bundle does not exist", kind, name)
		case state == refNotLabeled:
			in.failure = notLabeled(sb.Namespace, name, "the CA bundle", taxonomy.CheckReachable)
		case !ok || len(pem) == 0:
			in.failure = taxonomy.NewFailure(taxonomy.ReasonCABundleNotFound, nil, "%s %q has no key %q with the CA bundle", kind, name, key)
		default:
			in.endpoint.CABundle = pem
		}
	}
	if ref := sb.Spec.CredentialsSecretRef; ref != nil && in.failure == nil {
		rk := refKey{kind: kindSecret, NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: ref.Name}}
		used = append(used, rk)
		data, rv, state, err := r.refs.read(ctx, rk, remembered)
		if err == nil && state == refNotLabeled {
			data, rv, state, err = r.readGrandfathered(ctx, sb, rk, rv)
		}
		if err != nil {
			return in, err
		}
		fp.secret = refVersion{resourceVersion: rv, state: state}
		in.grandfathered = grandfatherNotice(sb, state)
		keys := credentialKeysOf(ref)
		switch {
		case state == refNotFound:
			in.failure = taxonomy.NewFailure(taxonomy.ReasonSecretNotFound, nil, "credentials Secret %q does not exist", ref.Name)
		case state == refNotLabeled:
			in.failure = notLabeled(sb.Namespace, ref.Name, "the credentials", taxonomy.CheckAuthenticated)
		case len(data[keys.id]) == 0:
			in.failure = taxonomy.NewFailure(taxonomy.ReasonSecretKeyMissing, nil, "credentials Secret %q has no value for key %q", ref.Name, keys.id)
		case len(data[keys.secret]) == 0:
			in.failure = taxonomy.NewFailure(taxonomy.ReasonSecretKeyMissing, nil, "credentials Secret %q has no value for key %q", ref.Name, keys.secret)
		case keys.token != "" && len(data[keys.token]) == 0:
			in.failure = taxonomy.NewFailure(taxonomy.ReasonSecretKeyMissing, nil,
				"credentials Secret %q has no value for key %q, which sessionTokenKey names", ref.Name, keys.token)
		default:
			in.endpoint.Credentials = r.refs.credentials(rk, rv, keys, data)
		}
	}
	if sb.Spec.CredentialsSecretRef == nil && r.opts.AmbientCredentials {
		in.endpoint.Credentials = s3probe.AmbientCredentials
	}
	in.fingerprint = fp
	return in, nil
}

// notLabeled says exactly what to add to a Secret the operator may not read. For a
// CA bundle the failure belongs to the Reachable check, like the CA bundle's others.
func notLabeled(namespace, name, what string, check taxonomy.Check) *taxonomy.Failure {
	f := taxonomy.NewFailure(taxonomy.ReasonSecretNotLabeled, nil, "%s", notLabeledMessage(namespace, name, what))
	f.Check = check
	return f
}

func notLabeledMessage(namespace, name, what string) string {
	return fmt.Sprintf("Secret %q holds %s but lacks the label %s=true, without which the operator does not read a Secret "+
		"(so that a StorageBucket cannot send the values of any other Secret to its endpoint); add it: "+
		"kubectl label secret %s -n %s %s=true",
		name, what, phalanksv1beta1.LabelSecretAllowed, name, namespace, phalanksv1beta1.LabelSecretAllowed)
}

// caRef returns the CA bundle's key, object name and kind.
func caRef(sb *phalanksv1beta1.StorageBucket) (key, name, kind string) {
	ref, kind := sb.Spec.CABundle.ConfigMapKeyRef, kindConfigMap
	if ref == nil {
		ref, kind = sb.Spec.CABundle.SecretKeyRef, kindSecret
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
