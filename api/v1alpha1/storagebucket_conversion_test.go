package v1alpha1_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/randfill"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// roundTrips is how many random objects each direction converts.
const roundTrips = 10000

// filler makes random objects of the shape the API server can hold: valid enums and
// rule combinations, one-second timestamps (the API's resolution), and v1alpha1 endpoints
// that match its schema. Everything else is arbitrary.
func filler(seed int64) *randfill.Filler { return configure(randfill.NewWithSeed(seed)) }

func configure(f *randfill.Filler) *randfill.Filler {
	pick := func(c randfill.Continue, values ...string) string { return values[c.Intn(len(values))] }
	return f.NilChance(0.3).NumElements(0, 3).Funcs(
		// The conversion webhook sets apiVersion and kind itself.
		func(*metav1.TypeMeta, randfill.Continue) {},
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.Unix(c.Int63n(4_000_000_000), 0).Rfc3339Copy()
		},
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			m.Name = c.String(20)
			m.Namespace = c.String(10)
			m.UID = types.UID(c.String(12))
			m.Generation = c.Int63()
			m.ResourceVersion = fmt.Sprint(c.Uint32())
			c.Fill(&m.Labels)
			c.Fill(&m.Annotations)
			c.Fill(&m.Finalizers)
			c.Fill(&m.CreationTimestamp)
		},
		func(d *metav1.Duration, c randfill.Continue) {
			d.Duration = time.Duration(5000+c.Int63n(3_600_000)) * time.Millisecond
		},
		func(s *phalanksv1beta1.StorageBucketSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			s.Endpoint = pick(c, "https://", "http://", "HTTPS://", "") + c.String(30) + pick(c, "", "/", ":9000")
			s.AddressingStyle = phalanksv1beta1.AddressingStyle(pick(c, "", "Auto", "Path", "VirtualHost"))
			s.ManagementPolicy = phalanksv1beta1.ManagementPolicy(pick(c, "", "Observe", "Manage"))
			s.DeletionPolicy = phalanksv1beta1.DeletionPolicy(pick(c, "", "Retain"))
			if s.ManagementPolicy == phalanksv1beta1.ManagementManage && c.Bool() {
				s.DeletionPolicy = phalanksv1beta1.DeletionDelete
			}
			s.NonEmptyStrategy = phalanksv1beta1.NonEmptyStrategy(pick(c, "", "Fail", "DeleteIfEmpty", "ForceEmpty"))
			s.HealthCheck.Depth = phalanksv1beta1.ProbeDepth(pick(c, "", "Connect", "HeadBucket", "List", "ReadWrite"))
			if s.HealthCheck.Timeout != nil {
				s.HealthCheck.Timeout.Duration = min(s.HealthCheck.IntervalDuration()/time.Duration(2+c.Intn(10)), phalanksv1beta1.MaxProbeTimeout)
			}
			if s.CredentialsSecretRef != nil {
				s.CredentialsSecretRef.Name = "s-" + c.String(10)
			}
			if s.CABundle != nil {
				ref := &phalanksv1beta1.KeyReference{Name: "ca-" + c.String(10), Key: c.String(5)}
				s.CABundle = &phalanksv1beta1.CABundleSource{}
				if c.Bool() {
					s.CABundle.ConfigMapKeyRef = ref
				} else {
					s.CABundle.SecretKeyRef = ref
				}
			}
		},
		func(s *phalanksv1alpha1.StorageBucketSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			s.Endpoint = pick(c, "s3.amazonaws.com", "minio.example.com", "10.0.0.7", "[::1]", "rgw-"+fmt.Sprint(c.Uint32())) +
				pick(c, "", ":9000", ":443")
		},
	)
}

// stripConversionData removes the annotation conversion adds, so objects compare on
// what their clients wrote.
func stripConversionData(m *metav1.ObjectMeta) {
	delete(m.Annotations, phalanksv1alpha1.ConversionDataAnnotation)
}

func TestSpokeHubSpokeRoundTripIsLossless(t *testing.T) {
	f := filler(1)
	for i := range roundTrips {
		spoke := &phalanksv1alpha1.StorageBucket{}
		f.Fill(spoke)
		stripConversionData(&spoke.ObjectMeta)

		hub := &phalanksv1beta1.StorageBucket{}
		if err := spoke.DeepCopy().ConvertTo(hub); err != nil {
			t.Fatalf("object %d: to hub: %v", i, err)
		}
		back := &phalanksv1alpha1.StorageBucket{}
		if err := back.ConvertFrom(hub); err != nil {
			t.Fatalf("object %d: from hub: %v", i, err)
		}
		stripConversionData(&back.ObjectMeta)
		if !equality.Semantic.DeepEqual(spoke, back) {
			t.Fatalf("object %d changed in a v1alpha1→v1beta1→v1alpha1 round trip:\n%s", i, diff.Diff(spoke, back))
		}
	}
}

func TestHubSpokeHubRoundTripIsLossless(t *testing.T) {
	f := filler(2)
	for i := range roundTrips {
		hub := &phalanksv1beta1.StorageBucket{}
		f.Fill(hub)
		stripConversionData(&hub.ObjectMeta)

		spoke := &phalanksv1alpha1.StorageBucket{}
		if err := spoke.ConvertFrom(hub.DeepCopy()); err != nil {
			t.Fatalf("object %d: from hub: %v", i, err)
		}
		back := &phalanksv1beta1.StorageBucket{}
		if err := spoke.ConvertTo(back); err != nil {
			t.Fatalf("object %d: to hub: %v", i, err)
		}
		if !equality.Semantic.DeepEqual(hub, back) {
			t.Fatalf("object %d changed in a v1beta1→v1alpha1→v1beta1 round trip:\n%s", i, diff.Diff(hub, back))
		}
	}
}

// FuzzHubSpokeHub runs the hub round trip on objects generated from fuzzer input.
func FuzzHubSpokeHub(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42} {
		f.Add(binary.LittleEndian.AppendUint64(nil, seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hub := &phalanksv1beta1.StorageBucket{}
		configure(randfill.NewFromGoFuzz(data)).Fill(hub)
		stripConversionData(&hub.ObjectMeta)
		spoke := &phalanksv1alpha1.StorageBucket{}
		if err := spoke.ConvertFrom(hub.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		back := &phalanksv1beta1.StorageBucket{}
		if err := spoke.ConvertTo(back); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(hub, back) {
			t.Fatalf("round trip changed the object:\n%s", diff.Diff(hub, back))
		}
	})
}

func hubWithEverything() *phalanksv1beta1.StorageBucket {
	return &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"},
		Spec: phalanksv1beta1.StorageBucketSpec{
			BucketName:      "data",
			Endpoint:        "https://minio.example.com:9000/",
			Region:          "eu-central-1",
			AddressingStyle: phalanksv1beta1.AddressingPath,
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{
				Name: "creds", AccessKeyIDKey: "id", SecretAccessKeyKey: "secret",
			},
			CABundle:         &phalanksv1beta1.CABundleSource{ConfigMapKeyRef: &phalanksv1beta1.KeyReference{Name: "ca", Key: "ca.pem"}},
			HealthCheck:      phalanksv1beta1.HealthCheck{Interval: &metav1.Duration{Duration: 90 * time.Second}, Timeout: &metav1.Duration{Duration: 7 * time.Second}, Depth: phalanksv1beta1.ProbeReadWrite},
			ManagementPolicy: phalanksv1beta1.ManagementManage,
			DeletionPolicy:   phalanksv1beta1.DeletionDelete,
			NonEmptyStrategy: phalanksv1beta1.NonEmptyForceEmpty,
		},
	}
}

func TestV1alpha1Edits(t *testing.T) {
	observed := func() *phalanksv1beta1.StorageBucket {
		h := hubWithEverything()
		h.Spec.ManagementPolicy, h.Spec.DeletionPolicy = phalanksv1beta1.ManagementObserve, phalanksv1beta1.DeletionRetain
		return h
	}
	for name, tc := range map[string]struct {
		hub   func() *phalanksv1beta1.StorageBucket
		edit  func(*phalanksv1alpha1.StorageBucket)
		check func(t *testing.T, got phalanksv1beta1.StorageBucketSpec)
		// wantErr is what converting the edited object fails with; empty when it succeeds.
		wantErr string
	}{
		"an edited region keeps every v1beta1-only field": {
			hub:  observed,
			edit: func(s *phalanksv1alpha1.StorageBucket) { s.Spec.Region = "eu-west-1" },
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				want := observed().Spec
				want.Region = "eu-west-1"
				if !equality.Semantic.DeepEqual(want, got) {
					t.Error(diff.Diff(want, got))
				}
			},
		},
		"a managed bucket's region cannot change through v1alpha1": {
			edit:    func(s *phalanksv1alpha1.StorageBucket) { s.Spec.Region = "eu-west-1" },
			wantErr: "endpoint and region cannot change while managementPolicy is Manage",
		},
		"a managed bucket's endpoint cannot change through v1alpha1": {
			edit:    func(s *phalanksv1alpha1.StorageBucket) { s.Spec.Endpoint = "minio.example.org:9000" },
			wantErr: "endpoint and region cannot change while managementPolicy is Manage",
		},
		"annotation durations that break the v1beta1 rules fall back to what fits": {
			edit: func(s *phalanksv1alpha1.StorageBucket) {
				s.Spec.IntervalSeconds = 30
				s.Annotations[phalanksv1alpha1.ConversionDataAnnotation] =
					`{"spec":{"endpoint":"https://minio.example.com:9000/","region":"eu-central-1","healthCheck":{"interval":"2s","timeout":"1ms"}}}`
			},
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if !got.HealthCheck.Valid() || got.HealthCheck.IntervalDuration() != 30*time.Second {
					t.Errorf("healthCheck = interval %s, timeout %s; want the v1alpha1 interval and a valid timeout",
						got.HealthCheck.IntervalDuration(), got.HealthCheck.TimeoutDuration())
				}
			},
		},
		"an annotation timeout over the v1beta1 maximum falls back": {
			edit: func(s *phalanksv1alpha1.StorageBucket) {
				s.Spec.IntervalSeconds = 600
				s.Annotations[phalanksv1alpha1.ConversionDataAnnotation] =
					`{"spec":{"endpoint":"https://minio.example.com:9000/","region":"eu-central-1","healthCheck":{"interval":"10m","timeout":"5m"}}}`
			},
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if got.HealthCheck.TimeoutDuration() > phalanksv1beta1.MaxProbeTimeout {
					t.Errorf("timeout %s restored over the maximum", got.HealthCheck.TimeoutDuration())
				}
			},
		},
		"an annotation CA bundle without a name is dropped": {
			edit: func(s *phalanksv1alpha1.StorageBucket) {
				s.Annotations[phalanksv1alpha1.ConversionDataAnnotation] =
					`{"spec":{"endpoint":"https://minio.example.com:9000/","region":"eu-central-1","caBundle":{"configMapKeyRef":{"name":""}}}}`
			},
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if got.CABundle != nil {
					t.Errorf("caBundle %+v restored", got.CABundle)
				}
			},
		},
		"a new interval replaces the saved one and keeps a timeout that still fits": {
			edit: func(s *phalanksv1alpha1.StorageBucket) { s.Spec.IntervalSeconds = 30 },
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if got.HealthCheck.IntervalDuration() != 30*time.Second || got.HealthCheck.TimeoutDuration() != 7*time.Second {
					t.Errorf("healthCheck = %+v, want interval 30s, timeout 7s", got.HealthCheck)
				}
			},
		},
		"a saved timeout that no longer fits the interval falls back below it": {
			edit: func(s *phalanksv1alpha1.StorageBucket) { s.Spec.IntervalSeconds = 6 },
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if got.HealthCheck.TimeoutDuration() >= got.HealthCheck.IntervalDuration() {
					t.Errorf("timeout %s is not shorter than interval %s", got.HealthCheck.Timeout, got.HealthCheck.Interval)
				}
			},
		},
		"switching to plain HTTP drops the CA bundle and allows HTTP": {
			hub:  observed,
			edit: func(s *phalanksv1alpha1.StorageBucket) { s.Spec.Insecure = true },
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if got.Endpoint != "http://minio.example.com:9000" || !got.InsecureAllowHTTP || got.CABundle != nil {
					t.Errorf("endpoint %q insecureAllowHTTP %v caBundle %v", got.Endpoint, got.InsecureAllowHTTP, got.CABundle)
				}
			},
		},
		"a different Secret gets the default key names": {
			edit: func(s *phalanksv1alpha1.StorageBucket) { s.Spec.SecretName = "other" },
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				want := phalanksv1beta1.CredentialsSecretReference{Name: "other", AccessKeyIDKey: "AWS_ACCESS_KEY_ID", SecretAccessKeyKey: "AWS_SECRET_ACCESS_KEY"}
				if got.CredentialsSecretRef == nil || *got.CredentialsSecretRef != want {
					t.Errorf("credentialsSecretRef = %+v, want %+v", got.CredentialsSecretRef, want)
				}
			},
		},
		"a malformed annotation is ignored": {
			edit: func(s *phalanksv1alpha1.StorageBucket) {
				s.Annotations[phalanksv1alpha1.ConversionDataAnnotation] = "{not json"
			},
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if got.ManagementPolicy != phalanksv1beta1.ManagementObserve || got.CABundle != nil {
					t.Errorf("malformed data leaked into the spec: %+v", got)
				}
			},
		},
		"annotation data that breaks the v1beta1 rules is ignored": {
			edit: func(s *phalanksv1alpha1.StorageBucket) {
				s.Annotations[phalanksv1alpha1.ConversionDataAnnotation] =
					`{"spec":{"managementPolicy":"Observe","deletionPolicy":"Delete","healthCheck":{"depth":"Everything"}}}`
			},
			check: func(t *testing.T, got phalanksv1beta1.StorageBucketSpec) {
				if got.DeletionPolicy != phalanksv1beta1.DeletionRetain || got.HealthCheck.Depth != phalanksv1beta1.ProbeHeadBucket {
					t.Errorf("invalid data leaked into the spec: %+v", got)
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			hub := hubWithEverything
			if tc.hub != nil {
				hub = tc.hub
			}
			spoke := &phalanksv1alpha1.StorageBucket{}
			if err := spoke.ConvertFrom(hub()); err != nil {
				t.Fatal(err)
			}
			tc.edit(spoke)
			got := &phalanksv1beta1.StorageBucket{}
			err := spoke.ConvertTo(got)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ConvertTo = %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := got.Annotations[phalanksv1alpha1.ConversionDataAnnotation]; ok {
				t.Error("the hub kept the conversion annotation")
			}
			tc.check(t, got.Spec)
		})
	}
}

func TestV1alpha1StatusIsDerivedFromConditions(t *testing.T) {
	probed := metav1.Unix(1_700_000_000, 0)
	hub := hubWithEverything()
	hub.Status = phalanksv1beta1.StorageBucketStatus{
		LastProbeTime: &probed,
		Conditions: []metav1.Condition{
			{Type: "Reachable", Status: metav1.ConditionTrue, Reason: "Connected"},
			{Type: "Ready", Status: metav1.ConditionFalse, Reason: "AccessDenied", Message: "the endpoint rejected the credentials"},
		},
	}
	spoke := &phalanksv1alpha1.StorageBucket{}
	if err := spoke.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	want := phalanksv1alpha1.StorageBucketStatus{Healthy: false, LastChecked: &probed, Message: "the endpoint rejected the credentials"}
	if !equality.Semantic.DeepEqual(want, spoke.Status) {
		t.Error(diff.Diff(want, spoke.Status))
	}
}
