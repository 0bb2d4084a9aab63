package webhooks_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

func newNamespace(ctx SpecContext) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "conversion-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func everythingV1beta1(ns, name string) *phalanksv1beta1.StorageBucket {
	return &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: phalanksv1beta1.StorageBucketSpec{
			BucketName:      "team-data",
			Endpoint:        "https://minio.example.com:9000",
			Region:          "eu-central-1",
			AddressingStyle: phalanksv1beta1.AddressingPath,
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{
				Name: "creds", AccessKeyIDKey: "id", SecretAccessKeyKey: "secret-key-name",
			},
			CABundle: &phalanksv1beta1.CABundleSource{SecretKeyRef: &phalanksv1beta1.KeyReference{Name: "ca", Key: "bundle.pem"}},
			HealthCheck: phalanksv1beta1.HealthCheck{
				Interval: &metav1.Duration{Duration: 2 * time.Minute}, Timeout: &metav1.Duration{Duration: 10 * time.Second},
				Depth: phalanksv1beta1.ProbeReadWrite,
			},
			ManagementPolicy: phalanksv1beta1.ManagementManage,
			DeletionPolicy:   phalanksv1beta1.DeletionDelete,
			NonEmptyStrategy: phalanksv1beta1.NonEmptyDeleteIfEmpty,
		},
	}
}

var _ = Describe("StorageBucket conversion between v1alpha1 and v1beta1", func() {
	It("serves an object created as v1alpha1 as v1beta1 and back", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		alpha := &phalanksv1alpha1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"},
			Spec: phalanksv1alpha1.StorageBucketSpec{
				Endpoint: "minio.internal:9000", BucketName: "legacy-data", Region: "us-west-2",
				SecretName: "minio-creds", Insecure: true, IntervalSeconds: 30,
			},
		}
		Expect(k8s.Create(ctx, alpha)).To(Succeed())

		beta := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), beta)).To(Succeed())
		Expect(beta.Spec.Endpoint).To(Equal("http://minio.internal:9000"))
		Expect(beta.Spec.InsecureAllowHTTP).To(BeTrue())
		Expect(beta.Spec.BucketName).To(Equal("legacy-data"))
		Expect(beta.Spec.Region).To(Equal("us-west-2"))
		Expect(beta.Spec.HealthCheck.IntervalDuration()).To(Equal(30 * time.Second))
		Expect(beta.Spec.CredentialsSecretRef).To(Equal(&phalanksv1beta1.CredentialsSecretReference{
			Name: "minio-creds", AccessKeyIDKey: "AWS_ACCESS_KEY_ID", SecretAccessKeyKey: "AWS_SECRET_ACCESS_KEY",
		}))
		Expect(beta.Annotations).NotTo(HaveKey(phalanksv1alpha1.ConversionDataAnnotation))

		again := &phalanksv1alpha1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), again)).To(Succeed())
		Expect(again.Spec).To(Equal(alpha.Spec))
	})

	It("keeps every v1beta1-only field when a v1alpha1 client updates the object", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		original := everythingV1beta1(ns, "full")
		Expect(k8s.Create(ctx, original)).To(Succeed())

		alpha := &phalanksv1alpha1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), alpha)).To(Succeed())
		Expect(alpha.Spec).To(Equal(phalanksv1alpha1.StorageBucketSpec{
			Endpoint: "minio.example.com:9000", BucketName: "team-data", Region: "eu-central-1",
			SecretName: "creds", IntervalSeconds: 120,
		}))
		alpha.Spec.IntervalSeconds = 60
		Expect(k8s.Update(ctx, alpha)).To(Succeed())

		beta := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), beta)).To(Succeed())
		want := original.Spec
		want.HealthCheck.Interval = &metav1.Duration{Duration: time.Minute}
		Expect(beta.Spec).To(Equal(want))
		Expect(beta.Annotations).NotTo(HaveKey(phalanksv1alpha1.ConversionDataAnnotation))
	})

	It("derives the v1alpha1 status from the v1beta1 conditions", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		beta := everythingV1beta1(ns, "status")
		Expect(k8s.Create(ctx, beta)).To(Succeed())
		probed := metav1.NewTime(time.Now().Truncate(time.Second))
		beta.Status = phalanksv1beta1.StorageBucketStatus{
			ObservedGeneration: beta.Generation,
			LastProbeTime:      &probed,
			Conditions: []metav1.Condition{{
				Type: phalanksv1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Healthy",
				Message: "every check passed", LastTransitionTime: probed,
			}},
		}
		Expect(k8s.Status().Update(ctx, beta)).To(Succeed())

		alpha := &phalanksv1alpha1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(beta), alpha)).To(Succeed())
		Expect(alpha.Status.Healthy).To(BeTrue())
		Expect(alpha.Status.Message).To(Equal("every check passed"))
		Expect(alpha.Status.LastChecked.Time).To(BeTemporally("==", probed.Time))
	})

	It("ignores a malformed conversion annotation instead of failing the write", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		original := everythingV1beta1(ns, "tampered")
		Expect(k8s.Create(ctx, original)).To(Succeed())

		alpha := &phalanksv1alpha1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), alpha)).To(Succeed())
		alpha.Annotations[phalanksv1alpha1.ConversionDataAnnotation] = `{"spec": [not json`
		Expect(k8s.Update(ctx, alpha)).To(Succeed())

		beta := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), beta)).To(Succeed())
		Expect(beta.Spec.BucketName).To(Equal("team-data"))
		Expect(beta.Spec.ManagementPolicy).To(Equal(phalanksv1beta1.ManagementObserve))
		Expect(beta.Annotations).NotTo(HaveKey(phalanksv1alpha1.ConversionDataAnnotation))
	})

	It("refuses a v1alpha1 write that moves a managed bucket to another endpoint or region", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		original := everythingV1beta1(ns, "moved")
		Expect(k8s.Create(ctx, original)).To(Succeed())
		for _, edit := range []func(*phalanksv1alpha1.StorageBucket){
			func(a *phalanksv1alpha1.StorageBucket) { a.Spec.Region = "eu-west-1" },
			func(a *phalanksv1alpha1.StorageBucket) { a.Spec.Endpoint = "minio.example.org:9000" },
		} {
			alpha := &phalanksv1alpha1.StorageBucket{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), alpha)).To(Succeed())
			edit(alpha)
			err := k8s.Update(ctx, alpha)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("endpoint and region cannot change while managementPolicy is Manage"))
		}
		beta := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), beta)).To(Succeed())
		Expect(beta.Spec).To(Equal(original.Spec))
	})

	It("stores only what v1beta1 validation allows, whatever the conversion annotation says", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		original := everythingV1beta1(ns, "forged")
		Expect(k8s.Create(ctx, original)).To(Succeed())
		alpha := &phalanksv1alpha1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), alpha)).To(Succeed())
		alpha.Annotations[phalanksv1alpha1.ConversionDataAnnotation] = `{"spec":{"endpoint":"https://minio.example.com:9000",` +
			`"region":"eu-central-1","healthCheck":{"interval":"2m0s","timeout":"1ms","depth":"List"}}}`
		Expect(k8s.Update(ctx, alpha)).To(Succeed())

		beta := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), beta)).To(Succeed())
		Expect(beta.Spec.HealthCheck.Depth).To(Equal(phalanksv1beta1.ProbeList), "valid saved values are restored")
		Expect(beta.Spec.HealthCheck.TimeoutDuration()).To(BeNumerically(">=", 100*time.Millisecond))
		Expect(beta.Spec.HealthCheck.Valid()).To(BeTrue(), "healthCheck %+v", beta.Spec.HealthCheck)
		By("and an update in v1beta1 of the stored object passes its validation")
		beta.Spec.NonEmptyStrategy = phalanksv1beta1.NonEmptyFail
		Expect(k8s.Update(ctx, beta)).To(Succeed())
	})

	It("lists the same objects in both versions", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		for _, name := range []string{"a", "b", "c"} {
			Expect(k8s.Create(ctx, everythingV1beta1(ns, name))).To(Succeed())
		}
		alphas := &phalanksv1alpha1.StorageBucketList{}
		Expect(k8s.List(ctx, alphas, client.InNamespace(ns))).To(Succeed())
		betas := &phalanksv1beta1.StorageBucketList{}
		Expect(k8s.List(ctx, betas, client.InNamespace(ns))).To(Succeed())

		var alphaNames, betaNames []string
		for _, i := range alphas.Items {
			alphaNames = append(alphaNames, i.Name)
			Expect(i.Spec.Endpoint).To(Equal("minio.example.com:9000"))
		}
		for _, i := range betas.Items {
			betaNames = append(betaNames, i.Name)
		}
		Expect(alphaNames).To(ConsistOf("a", "b", "c"))
		Expect(betaNames).To(ConsistOf("a", "b", "c"))
	})
})
