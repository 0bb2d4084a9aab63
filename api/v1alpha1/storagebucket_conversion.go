package v1alpha1

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// ConversionDataAnnotation carries, on a StorageBucket served as v1alpha1, the v1beta1
// spec and status that the v1alpha1 shape cannot express. Converting back to v1beta1
// restores them, so a client of v1alpha1 that reads, edits and writes an object loses
// nothing it did not change. The key is reserved: the value is rewritten on every
// conversion to v1alpha1 and removed on every conversion to v1beta1.
const ConversionDataAnnotation = "phalanks.io/conversion-data"

// Defaults a v1alpha1 object gets for the v1beta1 fields it cannot express, matching the
// v1beta1 schema defaults.
const (
	defaultProbeTimeout = phalanksv1beta1.DefaultProbeTimeout
	schemeHTTP          = "http://"
	schemeHTTPS         = "https://"
	reasonHealthy       = "Healthy"
	reasonUnhealthy     = "Unhealthy"
)

// conversionData is the annotation's JSON.
type conversionData struct {
	Spec   phalanksv1beta1.StorageBucketSpec   `json:"spec"`
	Status phalanksv1beta1.StorageBucketStatus `json:"status"`
}

// ConvertTo converts this v1alpha1 StorageBucket to the v1beta1 hub.
func (spoke *StorageBucket) ConvertTo(hubRaw conversion.Hub) error {
	hub := hubRaw.(*phalanksv1beta1.StorageBucket)
	hub.ObjectMeta = *spoke.ObjectMeta.DeepCopy()
	data := takeConversionData(&hub.ObjectMeta)
	hub.Spec = specToHub(spoke.Spec)
	hub.Status = statusToHub(spoke.Status, spoke.CreationTimestamp)
	if data != nil {
		saved := validSpec(data.Spec, hub.Spec)
		if err := placementKept(saved, spoke.Spec); err != nil {
			return err
		}
		hub.Spec = restoreSpec(hub.Spec, spoke.Spec, saved)
		if statusFromHub(data.Status) == comparableStatus(spoke.Status) {
			hub.Status = *data.Status.DeepCopy()
		}
	}
	return nil
}

// placementKept refuses a v1alpha1 write that moves a managed bucket: v1beta1 rejects
// a change of endpoint or region while managementPolicy is Manage, and v1alpha1, which
// cannot see the policy, must not be a way around that.
func placementKept(saved phalanksv1beta1.StorageBucketSpec, spoke StorageBucketSpec) error {
	if saved.ManagementPolicy != phalanksv1beta1.ManagementManage {
		return nil
	}
	if read := specFromHub(saved); read.Endpoint != spoke.Endpoint || read.Insecure != spoke.Insecure || read.Region != spoke.Region {
		return fmt.Errorf("endpoint and region cannot change while managementPolicy is Manage (set in %s): the managed bucket would be "+
			"left behind on the old endpoint; set managementPolicy to Observe first", phalanksv1beta1.GroupVersion)
	}
	return nil
}

// ConvertFrom converts the v1beta1 hub to this v1alpha1 StorageBucket.
func (spoke *StorageBucket) ConvertFrom(hubRaw conversion.Hub) error {
	hub := hubRaw.(*phalanksv1beta1.StorageBucket)
	spoke.ObjectMeta = *hub.ObjectMeta.DeepCopy()
	spoke.Spec = specFromHub(hub.Spec)
	status := statusFromHub(hub.Status)
	spoke.Status = StorageBucketStatus{Healthy: status.healthy, Message: status.message}
	if hub.Status.LastProbeTime != nil {
		spoke.Status.LastChecked = hub.Status.LastProbeTime.DeepCopy()
	}
	data, err := json.Marshal(conversionData{Spec: hub.Spec, Status: hub.Status})
	if err != nil {
		return fmt.Errorf("encode conversion data: %w", err)
	}
	if spoke.Annotations == nil {
		spoke.Annotations = map[string]string{}
	}
	spoke.Annotations[ConversionDataAnnotation] = string(data)
	return nil
}

// takeConversionData removes the annotation from meta and returns its content, or nil
// when it is absent or malformed.
func takeConversionData(meta *metav1.ObjectMeta) *conversionData {
	raw, ok := meta.Annotations[ConversionDataAnnotation]
	if !ok {
		return nil
	}
	delete(meta.Annotations, ConversionDataAnnotation)
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	data := &conversionData{}
	if err := json.Unmarshal([]byte(raw), data); err != nil {
		return nil
	}
	return data
}

// validSpec returns the saved spec with every value the v1beta1 schema would reject
// replaced by what the v1alpha1 fields give (derived) or the v1beta1 default: restored
// values do not pass through the API server's validation, which checks the request in
// v1alpha1, so the annotation must not be a way to store what v1beta1 forbids.
func validSpec(saved, derived phalanksv1beta1.StorageBucketSpec) phalanksv1beta1.StorageBucketSpec {
	s := *saved.DeepCopy()
	oneOf := func(v string, allowed ...string) bool {
		for _, a := range allowed {
			if v == a {
				return true
			}
		}
		return false
	}
	if !oneOf(string(s.AddressingStyle), "", string(phalanksv1beta1.AddressingAuto), string(phalanksv1beta1.AddressingPath), string(phalanksv1beta1.AddressingVirtualHost)) {
		s.AddressingStyle = derived.AddressingStyle
	}
	if !oneOf(string(s.HealthCheck.Depth), "", string(phalanksv1beta1.ProbeConnect), string(phalanksv1beta1.ProbeHeadBucket), string(phalanksv1beta1.ProbeList), string(phalanksv1beta1.ProbeReadWrite)) {
		s.HealthCheck.Depth = derived.HealthCheck.Depth
	}
	if !oneOf(string(s.ManagementPolicy), "", string(phalanksv1beta1.ManagementObserve), string(phalanksv1beta1.ManagementManage)) {
		s.ManagementPolicy = derived.ManagementPolicy
	}
	if !oneOf(string(s.DeletionPolicy), "", string(phalanksv1beta1.DeletionRetain), string(phalanksv1beta1.DeletionDelete)) ||
		(s.DeletionPolicy == phalanksv1beta1.DeletionDelete && s.ManagementPolicy != phalanksv1beta1.ManagementManage) {
		s.DeletionPolicy = derived.DeletionPolicy
	}
	if !oneOf(string(s.NonEmptyStrategy), "", string(phalanksv1beta1.NonEmptyFail), string(phalanksv1beta1.NonEmptyDeleteIfEmpty), string(phalanksv1beta1.NonEmptyForceEmpty)) {
		s.NonEmptyStrategy = derived.NonEmptyStrategy
	}
	if !s.HealthCheck.Valid() {
		hc := phalanksv1beta1.HealthCheck{Interval: s.HealthCheck.Interval, Timeout: s.HealthCheck.Timeout, Depth: s.HealthCheck.Depth}
		if i := hc.IntervalDuration(); i < phalanksv1beta1.MinProbeInterval || i > phalanksv1beta1.MaxProbeInterval {
			hc.Interval = derived.HealthCheck.Interval.DeepCopy()
		}
		if !hc.Valid() {
			hc.Timeout = &metav1.Duration{Duration: timeoutFor(hc.IntervalDuration())}
		}
		s.HealthCheck = hc
	}
	if b := s.CABundle; b != nil && ((b.ConfigMapKeyRef == nil) == (b.SecretKeyRef == nil) || !validKeyRef(b.ConfigMapKeyRef) || !validKeyRef(b.SecretKeyRef)) {
		s.CABundle = nil
	}
	if r := s.CredentialsSecretRef; r != nil && (!validName(r.Name) || len(r.AccessKeyIDKey) > 253 || len(r.SecretAccessKeyKey) > 253 || len(r.SessionTokenKey) > 253) {
		s.CredentialsSecretRef = derived.CredentialsSecretRef.DeepCopy()
	}
	return s
}

func validName(n string) bool { return n != "" && len(n) <= 253 }

func validKeyRef(r *phalanksv1beta1.KeyReference) bool {
	return r == nil || (validName(r.Name) && len(r.Key) <= 253)
}

// specToHub maps every v1alpha1 field and fills the rest with the v1beta1 defaults.
func specToHub(in StorageBucketSpec) phalanksv1beta1.StorageBucketSpec {
	scheme := schemeHTTPS
	if in.Insecure {
		scheme = schemeHTTP
	}
	interval := time.Duration(in.IntervalSeconds) * time.Second
	out := phalanksv1beta1.StorageBucketSpec{
		BucketName:        in.BucketName,
		Endpoint:          scheme + in.Endpoint,
		InsecureAllowHTTP: in.Insecure,
		Region:            in.Region,
		AddressingStyle:   phalanksv1beta1.AddressingAuto,
		HealthCheck: phalanksv1beta1.HealthCheck{
			Interval: &metav1.Duration{Duration: interval},
			Timeout:  &metav1.Duration{Duration: timeoutFor(interval)},
			Depth:    phalanksv1beta1.ProbeHeadBucket,
		},
		ManagementPolicy: phalanksv1beta1.ManagementObserve,
		DeletionPolicy:   phalanksv1beta1.DeletionRetain,
		NonEmptyStrategy: phalanksv1beta1.NonEmptyFail,
	}
	if in.SecretName != "" {
		out.CredentialsSecretRef = &phalanksv1beta1.CredentialsSecretReference{
			Name: in.SecretName, AccessKeyIDKey: phalanksv1beta1.DefaultAccessKeyIDKey, SecretAccessKeyKey: phalanksv1beta1.DefaultSecretAccessKeyKey,
		}
	}
	return out
}

// timeoutFor keeps the default probe timeout below the interval, as v1beta1 requires.
func timeoutFor(interval time.Duration) time.Duration {
	if interval > 0 && interval <= defaultProbeTimeout {
		return interval / 2
	}
	return defaultProbeTimeout
}

// specFromHub keeps what v1alpha1 can express.
func specFromHub(in phalanksv1beta1.StorageBucketSpec) StorageBucketSpec {
	endpoint, insecure := splitEndpoint(in.Endpoint, in.InsecureAllowHTTP)
	out := StorageBucketSpec{
		Endpoint:        endpoint,
		BucketName:      in.BucketName,
		Region:          in.Region,
		Insecure:        insecure,
		IntervalSeconds: seconds(in.HealthCheck.IntervalDuration()),
	}
	if in.CredentialsSecretRef != nil {
		out.SecretName = in.CredentialsSecretRef.Name
	}
	return out
}

// splitEndpoint turns a v1beta1 endpoint URL into the v1alpha1 host[:port] and its
// insecure flag. A value without a known scheme is kept as it is.
func splitEndpoint(endpoint string, allowHTTP bool) (hostPort string, insecure bool) {
	lower := strings.ToLower(endpoint)
	switch {
	case strings.HasPrefix(lower, schemeHTTPS):
		return strings.TrimSuffix(endpoint[len(schemeHTTPS):], "/"), false
	case strings.HasPrefix(lower, schemeHTTP):
		return strings.TrimSuffix(endpoint[len(schemeHTTP):], "/"), true
	}
	return endpoint, allowHTTP
}

func seconds(d time.Duration) int32 {
	s := math.Round(d.Seconds())
	return int32(max(math.MinInt32, min(math.MaxInt32, s)))
}

// restoreSpec returns the v1beta1 spec for a v1alpha1 spec that came with conversion
// data. When the v1alpha1 fields still say what the saved spec says, the saved spec is
// restored exactly; otherwise the client edited them, so the edited fields win and only
// what v1alpha1 cannot express is restored, where it still fits the edited spec.
func restoreSpec(derived phalanksv1beta1.StorageBucketSpec, spoke StorageBucketSpec, saved phalanksv1beta1.StorageBucketSpec) phalanksv1beta1.StorageBucketSpec {
	if specFromHub(saved) == spoke {
		return *saved.DeepCopy()
	}
	out := derived
	out.AddressingStyle = saved.AddressingStyle
	out.ManagementPolicy = saved.ManagementPolicy
	out.DeletionPolicy = saved.DeletionPolicy
	out.NonEmptyStrategy = saved.NonEmptyStrategy
	out.HealthCheck.Depth = saved.HealthCheck.Depth
	out.InsecureAllowHTTP = spoke.Insecure || saved.InsecureAllowHTTP
	if savedHost, savedInsecure := splitEndpoint(saved.Endpoint, saved.InsecureAllowHTTP); savedHost == spoke.Endpoint && savedInsecure == spoke.Insecure {
		out.Endpoint = saved.Endpoint
	}
	if seconds(saved.HealthCheck.IntervalDuration()) == spoke.IntervalSeconds {
		out.HealthCheck.Interval = saved.HealthCheck.Interval.DeepCopy()
	}
	if t := saved.HealthCheck.TimeoutDuration(); t > 0 && t < out.HealthCheck.IntervalDuration() {
		out.HealthCheck.Timeout = saved.HealthCheck.Timeout.DeepCopy()
	}
	if saved.CABundle != nil && !spoke.Insecure {
		out.CABundle = saved.CABundle.DeepCopy()
	}
	if ref := saved.CredentialsSecretRef; ref != nil && out.CredentialsSecretRef != nil && ref.Name == out.CredentialsSecretRef.Name {
		out.CredentialsSecretRef = ref.DeepCopy()
	}
	return out
}

// alphaStatus is the part of a v1beta1 status that v1alpha1 shows, comparable with ==.
// Times have the API's one-second resolution.
type alphaStatus struct {
	healthy     bool
	message     string
	checked     bool
	lastChecked int64
}

func statusFromHub(in phalanksv1beta1.StorageBucketStatus) alphaStatus {
	var out alphaStatus
	for _, c := range in.Conditions {
		if c.Type == phalanksv1beta1.ConditionReady {
			out.healthy = c.Status == metav1.ConditionTrue
			out.message = c.Message
		}
	}
	if in.LastProbeTime != nil {
		out.checked, out.lastChecked = true, in.LastProbeTime.Unix()
	}
	return out
}

func comparableStatus(in StorageBucketStatus) alphaStatus {
	out := alphaStatus{healthy: in.Healthy, message: in.Message}
	if in.LastChecked != nil {
		out.checked, out.lastChecked = true, in.LastChecked.Unix()
	}
	return out
}

// statusToHub derives a Ready condition from the v1alpha1 summary. It is used only when
// there is no conversion data to restore the full status from.
func statusToHub(in StorageBucketStatus, created metav1.Time) phalanksv1beta1.StorageBucketStatus {
	var out phalanksv1beta1.StorageBucketStatus
	if in.LastChecked != nil {
		out.LastProbeTime = in.LastChecked.DeepCopy()
	}
	if !in.Healthy && in.LastChecked == nil && in.Message == "" {
		return out
	}
	ready := metav1.Condition{
		Type: phalanksv1beta1.ConditionReady, Status: metav1.ConditionFalse, Reason: reasonUnhealthy,
		Message: in.Message, LastTransitionTime: created,
	}
	if in.Healthy {
		ready.Status, ready.Reason = metav1.ConditionTrue, reasonHealthy
	}
	if in.LastChecked != nil {
		ready.LastTransitionTime = *in.LastChecked
	}
	out.Conditions = []metav1.Condition{ready}
	return out
}
