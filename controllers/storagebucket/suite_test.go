package storagebucket_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/storagebucket"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/report"
	"github.com/phalanks/phalanks-operator/test/harness/versitygw"
)

func TestStorageBucket(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "StorageBucket controller (envtest + MinIO)")
}

// Shared by every spec: one API server, one MinIO, one manager running the controller.
var (
	env        *envtest.Env
	k8s        client.Client
	s3         *minio.Server
	reconciler *storagebucket.Reconciler
	logs       = &syncBuffer{}
)

// namespaceDeletionTimeout is the suite manager's --storagebucket-namespace-deletion-timeout.
const namespaceDeletionTimeout = 5 * time.Second

// suiteConcurrency is the controller's concurrency in this suite.
const suiteConcurrency = 8

// syncBuffer collects the manager's log, so specs can check what it never says.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, logs)), zap.UseDevMode(true), zap.Level(zapcore.DebugLevel)))
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	var err error
	env, err = envtest.Start(envtest.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	k8s = env.Client
	s3 = versitygw.StartForTest(GinkgoT(), minio.Options{})

	mgr, err := env.NewManager()
	Expect(err).NotTo(HaveOccurred())
	mgr.GetWebhookServer().Register(denyStatusPath, &webhook.Admission{Handler: denyLabelledStatus})
	// MinIO and the test servers listen on 127.0.0.1, which the endpoint policy denies
	// unless the operator's administrator allows it.
	reconciler, err = storagebucket.SetupWithManager(mgr, storagebucket.Options{Concurrency: suiteConcurrency,
		EndpointAllowCIDRs: []string{"127.0.0.1/32"}, NamespaceDeletionTimeout: namespaceDeletionTimeout})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	DeferCleanup(func() {
		cancel()
		<-done
	})
})

// namespace creates a fresh namespace for a spec.
func namespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sbk-"}}
	Expect(k8s.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

// credentials creates the Secret holding the key pair of server, labelled for
// StorageBuckets to use.
func credentials(ns, name string, server *minio.Server) *corev1.Secret {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": server.AccessKey, "AWS_SECRET_ACCESS_KEY": server.SecretKey},
	}
	Expect(k8s.Create(context.Background(), sec)).To(Succeed())
	return sec
}

// newBucket returns a StorageBucket for a bucket on server, probed every 5s.
func newBucket(ns, name, bucket string, server *minio.Server) *phalanksv1beta1.StorageBucket {
	sb := &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: phalanksv1beta1.StorageBucketSpec{
			BucketName:           bucket,
			Endpoint:             server.URL,
			InsecureAllowHTTP:    strings.HasPrefix(server.URL, "http://"),
			Region:               server.Region,
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3-credentials"},
			HealthCheck: phalanksv1beta1.HealthCheck{
				Interval: &metav1.Duration{Duration: 5 * time.Second},
				Timeout:  &metav1.Duration{Duration: time.Second},
				Depth:    phalanksv1beta1.ProbeHeadBucket,
			},
		},
	}
	return sb
}

func create(obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Create(context.Background(), obj)).To(Succeed())
}

func get(sb *phalanksv1beta1.StorageBucket) *phalanksv1beta1.StorageBucket {
	GinkgoHelper()
	got := &phalanksv1beta1.StorageBucket{}
	Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(sb), got)).To(Succeed())
	return got
}

// condition returns the condition of the given type, or an empty one.
func condition(sb *phalanksv1beta1.StorageBucket, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(sb.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// haveReady matches a StorageBucket whose Ready condition has this status and reason.
func expectReady(g Gomega, sb *phalanksv1beta1.StorageBucket, status metav1.ConditionStatus, reason string) {
	got := &phalanksv1beta1.StorageBucket{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(sb), got)).To(Succeed())
	ready := condition(got, phalanksv1beta1.ConditionReady)
	g.Expect(ready.Status).To(Equal(status), "Ready is %s/%s: %s", ready.Status, ready.Reason, ready.Message)
	g.Expect(ready.Reason).To(Equal(reason), "Ready is %s/%s: %s", ready.Status, ready.Reason, ready.Message)
}

func eventuallyReady(sb *phalanksv1beta1.StorageBucket, status metav1.ConditionStatus, reason string, timeout time.Duration) {
	GinkgoHelper()
	Eventually(func(g Gomega) { expectReady(g, sb, status, reason) }).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// events returns "type/reason: note" of the events regarding a StorageBucket.
func events(sb *phalanksv1beta1.StorageBucket) []string {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(k8s.List(context.Background(), &list, client.InNamespace(sb.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == sb.Name {
			out = append(out, e.Type+"/"+e.Reason+": "+e.Note)
		}
	}
	return out
}

// counter returns the value of a counter (or a histogram's count) in the manager's
// registry whose labels include the given ones.
func counter(name string, labels map[string]string) float64 {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			}
		}
	}
	return total
}

// series counts the series of a metric with the given labels.
func series(name string, labels map[string]string) int {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				n++
			}
		}
	}
	return n
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// objects lists "key@version" of every object version and delete marker in a bucket.
func objects(server *minio.Server, bucket string) []string {
	GinkgoHelper()
	c, err := server.Client()
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for obj := range c.ListObjectsIter(context.Background(), bucket, miniogo.ListObjectsOptions{WithVersions: true, Recursive: true}) {
		Expect(obj.Err).NotTo(HaveOccurred())
		marker := ""
		if obj.IsDeleteMarker {
			marker = "(delete marker)"
		}
		out = append(out, fmt.Sprintf("%s@%s%s", obj.Key, obj.VersionID, marker))
	}
	return out
}

func bucketExists(server *minio.Server, bucket string) bool {
	GinkgoHelper()
	c, err := server.Client()
	Expect(err).NotTo(HaveOccurred())
	ok, err := c.BucketExists(context.Background(), bucket)
	Expect(err).NotTo(HaveOccurred())
	return ok
}

func putObject(server *minio.Server, bucket, key string) {
	GinkgoHelper()
	c, err := server.Client()
	Expect(err).NotTo(HaveOccurred())
	_, err = c.PutObject(context.Background(), bucket, key, strings.NewReader("payload"), 7, miniogo.PutObjectOptions{})
	Expect(err).NotTo(HaveOccurred())
}

func eventuallyGone(obj client.Object) {
	GinkgoHelper()
	Eventually(func() bool {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err)
	}).WithTimeout(30*time.Second).Should(BeTrue(), "%s still exists", client.ObjectKeyFromObject(obj))
}

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
