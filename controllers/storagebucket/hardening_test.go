package storagebucket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

// blackHole accepts connections on 127.0.0.1 and never answers; it counts them.
func blackHole() (string, *atomic.Int64) {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	var accepted atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	DeferCleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + l.Addr().String(), &accepted
}

func deleteAndWait(obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Delete(context.Background(), obj)).To(Succeed())
	eventuallyGone(obj)
}

var _ = Describe("A StorageBucket re-created under the same name", func() {
	It("starts unknown and is probed at once, even when the queue merged its deletion and creation", func() {
		ns := namespace()
		credentials(ns, "s3-credentials", s3)
		ctx := context.Background()
		Expect(s3.MakeBucket(ctx, "phoenix-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		hole, accepted := blackHole()

		first := newBucket(ns, "phoenix", "phoenix-bucket", s3)
		first.Spec.Endpoint = hole
		first.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		first.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 3 * time.Second}
		create(first)
		By("deleting and re-creating it while its first probe hangs, so both events reach one pass")
		Eventually(accepted.Load).WithTimeout(30 * time.Second).WithPolling(10 * time.Millisecond).Should(BeNumerically(">=", 1))
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		second := newBucket(ns, "phoenix", "phoenix-bucket", s3)
		second.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		create(second)
		Expect(second.UID).NotTo(Equal(first.UID))

		// Long before the ten-minute interval: the new object is probed on its own.
		eventuallyReady(second, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Eventually(func() bool { return reconciler.Remembers(first.UID) }).WithTimeout(30*time.Second).Should(BeFalse(),
			"the deleted object's memory and schedule are dropped")
	})
})

var _ = Describe("Creating a managed bucket", func() {
	var ns string
	var proxy *minio.Proxy
	BeforeEach(func() {
		ns = namespace()
		credentials(ns, "s3-credentials", s3)
		proxy = s3.StartProxyForTest(GinkgoT())
	})
	bucketTags := func(bucket string) map[string]string {
		GinkgoHelper()
		c, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		t, err := c.GetBucketTagging(context.Background(), bucket)
		if miniogo.ToErrorResponse(err).Code == "NoSuchTagSet" {
			return map[string]string{}
		}
		Expect(err).NotTo(HaveOccurred())
		return t.ToMap()
	}
	managedThroughProxy := func(name, bucket string) *phalanksv1beta1.StorageBucket {
		sb := newBucket(ns, name, bucket, s3)
		sb.Spec.Endpoint = proxy.URL
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		return sb
	}

	It("records the creation in status first, and finishes a creation interrupted before tagging", func() {
		proxy.Fail(minio.Tagging(minio.InternalError, http.MethodPut))
		sb := managedThroughProxy("interrupted", "interrupted-create")
		create(sb)
		Eventually(func(g Gomega) {
			got := get(sb)
			g.Expect(got.Status.CreatedBucket).NotTo(BeNil(), "the creation is recorded")
			g.Expect(got.Status.CreatedBucket.Endpoint).To(Equal(proxy.URL))
			g.Expect(bucketExists(s3, "interrupted-create")).To(BeTrue())
			g.Expect(condition(got, "Ready").Status).To(Equal(metav1.ConditionFalse))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(bucketTags("interrupted-create")).NotTo(HaveKey(s3bucket.TagOwnerUID), "tagging failed")

		By("tagging the bucket as ours once the endpoint tags again, instead of calling it someone else's")
		proxy.Fail(nil)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Expect(condition(get(sb), "Managed").Reason).To(Equal("Owned"))
		Expect(bucketTags("interrupted-create")).To(HaveKeyWithValue(s3bucket.TagOwnerUID, string(sb.UID)))
		Expect(events(sb)).To(ContainElement(ContainSubstring("the creation was interrupted")))
		Expect(events(sb)).NotTo(ContainElement(HavePrefix("Warning/ErrResourceExists")))

		By("deleting it with the StorageBucket")
		deleteAndWait(sb)
		Expect(bucketExists(s3, "interrupted-create")).To(BeFalse())
	})

	It("reports an endpoint without bucket tagging as such, and still deletes the bucket it created", func() {
		proxy.Fail(minio.Tagging(minio.NotImplemented))
		sb := managedThroughProxy("untaggable", "untaggable-bucket")
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "TaggingNotSupported", 30*time.Second)
		Expect(condition(get(sb), "Managed").Message).To(ContainSubstring("does not support bucket tagging"))
		Expect(bucketExists(s3, "untaggable-bucket")).To(BeTrue())
		deleteAndWait(sb)
		Expect(bucketExists(s3, "untaggable-bucket")).To(BeFalse(), "the status recorded that this StorageBucket created it")
	})
})

var _ = Describe("A ReadWrite probe of a bucket with object lock", func() {
	It("writes no canary: it detects object lock, probes List instead and says so", func() {
		ns := namespace()
		credentials(ns, "s3-credentials", s3)
		ctx := context.Background()
		Expect(s3.MakeBucket(ctx, "locked-canary", miniogo.MakeBucketOptions{ObjectLocking: true})).To(Succeed())
		admin, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		mode, validity, unit := miniogo.Governance, uint(1), miniogo.Days
		Expect(admin.SetObjectLockConfig(ctx, "locked-canary", &mode, &validity, &unit)).To(Succeed())

		before := counter("phalanks_storagebucket_probe_duration_seconds", map[string]string{"depth": "List", "result": "success"})
		sb := newBucket(ns, "locked", "locked-canary", s3)
		sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeReadWrite
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Expect(condition(get(sb), "BucketAvailable").Reason).To(Equal("ObjectLockReadOnly"))
		Expect(condition(get(sb), "BucketAvailable").Message).To(ContainSubstring("object lock is enabled"))
		Eventually(func() float64 {
			return counter("phalanks_storagebucket_probe_duration_seconds", map[string]string{"depth": "List", "result": "success"})
		}).WithTimeout(30*time.Second).Should(BeNumerically(">=", before+2), "several probes")
		Expect(objects(s3, "locked-canary")).To(BeEmpty(), "no canary version, deletable or not")
	})
})

var _ = Describe("An endpoint that does not answer", func() {
	It("is probed by one bucket at a time while it is down; its other buckets take that result", func() {
		ns := namespace()
		credentials(ns, "s3-credentials", s3)
		hole, accepted := blackHole()
		const n = 16
		var sbs []*phalanksv1beta1.StorageBucket
		for i := range n {
			sb := newBucket(ns, fmt.Sprintf("dark-%02d", i), fmt.Sprintf("dark-%02d", i), s3)
			sb.Spec.Endpoint = hole
			sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 2 * time.Second}
			create(sb)
			sbs = append(sbs, sb)
		}
		for _, sb := range sbs {
			eventuallyReady(sb, metav1.ConditionFalse, "Timeout", time.Minute)
		}
		// Two intervals and a second: without the breaker every bucket would connect at
		// least twice. The marks metric is shared with buckets other specs left on
		// endpoints that do not answer, so it is only a lower bound here; the connections
		// are this spec's own.
		marks := counter("phalanks_storagebucket_endpoint_down_marks_total", nil)
		connections := accepted.Load()
		window := 2*sbs[0].Spec.HealthCheck.Interval.Duration + time.Second
		time.Sleep(window)
		Expect(accepted.Load()-connections).To(BeNumerically("<=", 8),
			"%d connections in %s from %d buckets", accepted.Load()-connections, window, n)
		Eventually(func() float64 { return counter("phalanks_storagebucket_endpoint_down_marks_total", nil) }).
			WithTimeout(30*time.Second).Should(BeNumerically(">=", marks+2*n-8), "the others took the result")
		Expect(condition(get(sbs[0]), "Ready").Message).To(ContainSubstring("one bucket at a time"))
	})
})

var _ = Describe("Memory of StorageBuckets that are gone", func() {
	It("releases the Secret values and the endpoint's state with the last StorageBucket that used them", func() {
		ns := namespace()
		ctx := context.Background()
		credentials(ns, "release-me", s3)
		Expect(s3.MakeBucket(ctx, "release-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		withSecret := newBucket(ns, "uses-secret", "release-bucket", s3)
		withSecret.Spec.CredentialsSecretRef.Name = "release-me"
		create(withSecret)
		hole, _ := blackHole()
		down := newBucket(ns, "down-endpoint", "release-bucket", s3)
		down.Spec.CredentialsSecretRef.Name = "release-me"
		down.Spec.Endpoint = hole
		down.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 500 * time.Millisecond}
		create(down)
		eventuallyReady(withSecret, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		eventuallyReady(down, metav1.ConditionFalse, "Timeout", 30*time.Second)
		secretRef := "Secret " + ns + "/release-me"
		Expect(reconciler.CachedReferences()).To(ContainElement(secretRef))
		Expect(reconciler.TrackedEndpoints()).To(ContainElement(hole))

		deleteAndWait(down)
		Eventually(reconciler.TrackedEndpoints).WithTimeout(30 * time.Second).ShouldNot(ContainElement(hole))
		Expect(reconciler.CachedReferences()).To(ContainElement(secretRef), "another StorageBucket still uses the Secret")
		deleteAndWait(withSecret)
		Eventually(reconciler.CachedReferences).WithTimeout(30 * time.Second).ShouldNot(ContainElement(secretRef))
	})
})

// capture is an HTTP endpoint that records the Authorization header of every request.
func capture() (string, func() []string) {
	GinkgoHelper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusForbidden)
	}))
	DeferCleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

var _ = Describe("The Secrets a StorageBucket may use", func() {
	It("are only those labelled for it: another Secret's value never reaches the endpoint", func() {
		ns := namespace()
		ctx := context.Background()
		const password = "db-password-value-4f1c2a"
		create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "database"},
			StringData: map[string]string{"password": password, "AWS_SECRET_ACCESS_KEY": "x"}})
		endpoint, authorizations := capture()
		sb := newBucket(ns, "exfiltrate", "any-bucket", s3)
		sb.Spec.Endpoint = endpoint
		sb.Spec.CredentialsSecretRef = &phalanksv1beta1.CredentialsSecretReference{Name: "database", AccessKeyIDKey: "password"}
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "SecretNotLabeled", 30*time.Second)
		msg := condition(get(sb), "Ready").Message
		Expect(msg).To(ContainSubstring("kubectl label secret database -n " + ns + " " + phalanksv1beta1.LabelSecretAllowed + "=true"))
		Eventually(func() []string { return events(sb) }).WithTimeout(30 * time.Second).
			Should(ContainElement(HavePrefix("Warning/SecretNotLabeled: " + msg)))
		for _, a := range authorizations() {
			Expect(a).NotTo(ContainSubstring(password))
		}
		Expect(reconciler.CachedReferences()).NotTo(ContainElement("Secret "+ns+"/database"), "the unlabelled Secret's data was read")
		Expect(reconciler.SecretsWatched(ctx)).NotTo(ContainElement(ns+"/database"), "the informer holds only labelled Secrets")
	})

	It("become usable the moment the label is added", func() {
		ns := namespace()
		ctx := context.Background()
		Expect(s3.MakeBucket(ctx, "label-later", miniogo.MakeBucketOptions{})).To(Succeed())
		sec := credentials(ns, "unlabelled", s3)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		sec.Labels = nil
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		sb := newBucket(ns, "label-later", "label-later", s3)
		sb.Spec.CredentialsSecretRef.Name = "unlabelled"
		sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "SecretNotLabeled", 30*time.Second)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		sec.Labels = map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
	})
})

var _ = Describe("The endpoint policy", func() {
	It("refuses loopback and metadata addresses before connecting", func() {
		ns := namespace()
		credentials(ns, "s3-credentials", s3)
		// The suite allows 127.0.0.1 only; 127.0.0.2 is loopback like any other.
		l, err := net.Listen("tcp", "127.0.0.2:0")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(l.Close)
		var accepted atomic.Int64
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				_ = c.Close()
			}
		}()
		for name, endpoint := range map[string]string{"loopback": "http://" + l.Addr().String(), "metadata": "http://169.254.169.254"} {
			sb := newBucket(ns, name, "any-bucket", s3)
			sb.Spec.Endpoint = endpoint
			create(sb)
			eventuallyReady(sb, metav1.ConditionFalse, "EndpointNotAllowed", 30*time.Second)
			Expect(condition(get(sb), "Reachable").Message).To(ContainSubstring("--storagebucket-endpoint-allow-cidrs"))
		}
		Consistently(accepted.Load).WithTimeout(2 * time.Second).Should(BeZero())
	})

	It("never puts what an endpoint answered into the status or events", func() {
		ns := namespace()
		credentials(ns, "s3-credentials", s3)
		const marker = "internal-service-says-7d3e"
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, "<html>"+marker+" instance-id i-0abc</html>")
		}))
		DeferCleanup(srv.Close)
		sb := newBucket(ns, "reader", "any-bucket", s3)
		sb.Spec.Endpoint = srv.URL
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "UnclassifiedError", 30*time.Second)
		status, err := yaml.Marshal(get(sb).Status)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(status)).NotTo(ContainSubstring(marker))
		Expect(string(status)).To(ContainSubstring("I'm a teapot"))
		Expect(strings.Join(events(sb), "\n")).NotTo(ContainSubstring(marker))
	})
})

var _ = Describe("Deleting a StorageBucket whose Secret is gone", func() {
	managed := func(ns, name, bucket string) *phalanksv1beta1.StorageBucket {
		GinkgoHelper()
		sb := newBucket(ns, name, bucket, s3)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		return sb
	}

	It("deletes the bucket with the credentials it last read", func() {
		ns := namespace()
		sec := credentials(ns, "s3-credentials", s3)
		sb := managed(ns, "remembered", "remembered-creds")
		Expect(k8s.Delete(context.Background(), sec)).To(Succeed())
		eventuallyReady(sb, metav1.ConditionFalse, "SecretNotFound", 30*time.Second)
		deleteAndWait(sb)
		Expect(bucketExists(s3, "remembered-creds")).To(BeFalse())
	})

	It("keeps the bucket and lets the StorageBucket go when it never read them, with a Warning saying so", func() {
		ns := namespace()
		credentials(ns, "other", s3)
		ctx := context.Background()
		Expect(s3.MakeBucket(ctx, "never-read", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "never-read", "never-read", s3)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		sb.Spec.CredentialsSecretRef.Name = "missing"
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "SecretNotFound", 30*time.Second)
		Eventually(func() []string { return get(sb).Finalizers }).WithTimeout(30 * time.Second).Should(ContainElement(phalanksv1beta1.FinalizerBucketDeletion))
		deleteAndWait(sb)
		Expect(bucketExists(s3, "never-read")).To(BeTrue())
		Expect(events(sb)).To(ContainElement(And(HavePrefix("Warning/BucketRetained"), ContainSubstring(`credentials Secret "missing" does not exist`))))
	})
})

// The admission webhook the suite serves on the manager's webhook server: it denies
// status writes of StorageBuckets labelled denyStatusLabel once a test registers it with
// the API server. (A webhook rather than a ValidatingAdmissionPolicy: the suites also
// run on Kubernetes 1.29, whose policies are a beta API that is off by default.)
const (
	denyStatusPath  = "/deny-storagebucket-status"
	denyStatusLabel = "test.phalanks.io/deny-status"
)

var denyLabelledStatus = admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if _, ok := obj.Labels[denyStatusLabel]; ok {
		return admission.Denied("status writes denied by the test")
	}
	return admission.Allowed("")
})

var _ = Describe("An API error during a pass", func() {
	It("is returned, so the controller retries it with backoff long before the next due time", func() {
		ctx := context.Background()
		ns := namespace()
		credentials(ns, "s3-credentials", s3)
		Expect(s3.MakeBucket(ctx, "api-error", miniogo.MakeBucketOptions{})).To(Succeed())
		const label = denyStatusLabel
		deny := &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "deny-storagebucket-status-" + ns},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:         "deny-status.test.phalanks.io",
				ClientConfig: env.WebhookClientConfig(denyStatusPath),
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"phalanks.io"}, APIVersions: []string{"*"},
						Resources: []string{"storagebuckets/status"}},
				}},
				NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				AdmissionReviewVersions: []string{"v1"},
			}},
		}
		create(deny)
		DeferCleanup(func() { _ = k8s.Delete(ctx, deny) })

		By("waiting until the API server calls the webhook")
		canary := newBucket(ns, "webhook-canary", "api-error", s3)
		canary.Labels = map[string]string{label: "true"}
		canary.Spec.Endpoint = "https://s3.invalid"
		canary.Spec.InsecureAllowHTTP = false
		create(canary)
		Eventually(func() error {
			got := get(canary)
			got.Status.ConsecutiveFailures = 99
			return k8s.Status().Update(ctx, got)
		}).WithTimeout(time.Minute).Should(MatchError(ContainSubstring("status writes denied by the test")))

		sb := newBucket(ns, "retried", "api-error", s3)
		sb.Labels = map[string]string{label: "true"}
		sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		create(sb)
		Eventually(func() string { return logs.String() }).WithTimeout(time.Minute).
			Should(ContainSubstring("status writes denied by the test"), "the pass failed writing the status")
		Consistently(func() []metav1.Condition { return get(sb).Status.Conditions }).WithTimeout(2 * time.Second).Should(BeEmpty())

		By("lifting the denial: the retry writes the status within seconds, not at the next due time")
		Expect(k8s.Delete(ctx, deny)).To(Succeed())
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 45*time.Second)
	})
})
