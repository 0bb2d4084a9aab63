package foo_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/measure"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	// controllersPods is the number of Pods in the cluster; CONTROLLERS_RSS_PODS
	// overrides it for a quick run.
	controllersPods = 10000
	// controllersWorkloads is the number of workloads in the cluster: three quarters
	// Deployments, 15% StatefulSets, the rest CronJobs. CONTROLLERS_RSS_WORKLOADS
	// overrides it.
	controllersWorkloads = 2000
	// controllersNamespaces is how many namespaces the Pods and workloads are spread over.
	controllersNamespaces = 10
)

// BenchmarkControllersRSS measures what --controllers saves: the manager's memory with
// only the StorageBucket controller on against all controllers on (the default), in a
// cluster holding 10,000 Pods and 2,000 workloads (1,500 Deployments, 300 StatefulSets,
// 200 CronJobs) spread over 10 namespaces, none of them using scheduled scaling but one
// annotated Deployment. Scheduled scaling caches the metadata of every Pod and workload,
// the Foo controller watches Deployments; a replica with only StorageBucket on watches
// none of them. Both runs of bin/manager go one after the other against the same API
// server.
//
// With all controllers a manager counts as synced when a Foo created after its start has
// its status, scheduled scaling reports the annotated Deployment and a StorageBucket
// created after its start has its status; with only StorageBucket, when that
// StorageBucket has its status. The StorageBucket's endpoint is on loopback, which the
// endpoint policy denies: its status says EndpointNotAllowed without a connection. With
// only StorageBucket the benchmark also checks that no other controller started. Memory
// is then sampled for rssSettle, and the last and the highest readings are reported.
func BenchmarkControllersRSS(b *testing.B) {
	pods := envCount(b, "CONTROLLERS_RSS_PODS", controllersPods)
	workloads := envCount(b, "CONTROLLERS_RSS_WORKLOADS", controllersWorkloads)
	w := splitWorkloads(workloads)
	root, err := tools.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "manager")
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("manager %s: %v (run `make bench`, which builds bin/manager)", bin, err)
	}

	ctx := b.Context()
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	utilruntime.Must(phalanksv1beta1.AddToScheme(s))
	env, err := envtest.Start(envtest.Options{Scheme: s})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })

	for i := range controllersNamespaces {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace(i)}}); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := w.create(ctx, env.Client); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Deployments, %d StatefulSets and %d CronJobs in %s", w.deployments, w.statefulSets, w.cronJobs,
		time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := createAll(ctx, env.Client, pods, w.pod); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Pods in %s", pods, time.Since(start).Round(time.Millisecond))

	ns := benchNamespace(0)
	all := func(i int) syncProbe {
		foo := &phalanksv1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", i), Namespace: ns},
			Spec:       phalanksv1alpha1.FooSpec{DeploymentName: fmt.Sprintf("probe-%d", i), Replicas: ptr.To[int32](1)},
		}
		bucket := probeBucket(ns, i)
		return syncProbe{
			create: func() error { return errors.Join(env.Client.Create(ctx, foo), env.Client.Create(ctx, bucket)) },
			check: func(metrics string) error {
				return errors.Join(fooSynced(ctx, env.Client, foo), scalingSynced(metrics), bucketSynced(ctx, env.Client, bucket))
			},
		}
	}
	onlyBuckets := func(i int) syncProbe {
		bucket := probeBucket(ns, i)
		return syncProbe{
			create: func() error { return env.Client.Create(ctx, bucket) },
			check:  func(string) error { return bucketSynced(ctx, env.Client, bucket) },
		}
	}
	runs := []struct {
		name  string
		args  []string
		probe func(i int) syncProbe
		// controllers are the controllers the manager must run, no more.
		controllers []string
	}{
		{"all", nil, all, nil},
		{"storagebucket", []string{"--controllers=storagebucket"}, onlyBuckets, []string{"storagebucket"}},
	}
	readings := map[string]rssReading{}
	for i, run := range runs {
		p, err := ourManager(env, bin, b.TempDir(), run.args...)
		if err != nil {
			b.Fatal(err)
		}
		m := sampleManager(ctx, b, p, run.probe(i))
		running, err := runningControllers(m.metrics)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s (%s): synced after %s; RSS %.1f MiB (peak %.1f MiB), Go heap in use %.1f MiB, live after a collection %.1f MiB; controllers %v",
			run.name, strings.Join(append([]string{"bin/manager"}, run.args...), " "), m.synced.Round(time.Millisecond),
			m.rssMiB, m.peakMiB, m.heapMiB, m.liveMiB, running)
		if run.controllers != nil {
			if !slices.Equal(running, run.controllers) {
				b.Errorf("%s: the manager runs the controllers %v, want only %v", run.name, running, run.controllers)
			}
			if strings.Contains(m.metrics, "phalanks_scaling_workloads{") {
				b.Errorf("%s: scheduled scaling reports phalanks_scaling_workloads: it started", run.name)
			}
		}
		b.ReportMetric(m.rssMiB, run.name+"-rss-MiB")
		b.ReportMetric(m.peakMiB, run.name+"-peak-rss-MiB")
		b.ReportMetric(m.heapMiB, run.name+"-heap-inuse-MiB")
		b.ReportMetric(m.liveMiB, run.name+"-heap-live-MiB")
		readings[run.name] = m
	}
	sb, al := readings["storagebucket"], readings["all"]
	b.Logf("storagebucket/all: RSS %.2f, peak RSS %.2f, Go heap in use %.2f",
		sb.rssMiB/al.rssMiB, sb.peakMiB/al.peakMiB, sb.heapMiB/al.heapMiB)
	b.ReportMetric(sb.rssMiB/al.rssMiB, "rss-storagebucket/all")
	b.ReportMetric(sb.peakMiB/al.peakMiB, "peak-rss-storagebucket/all")
	b.ReportMetric(sb.heapMiB/al.heapMiB, "heap-storagebucket/all")
}

// envCount reads a positive count from the environment variable name, def without it.
func envCount(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func benchNamespace(i int) string { return fmt.Sprintf("bench-controllers-%d", i) }

// benchWorkloads are the workloads of the cluster. Workload w (Deployments first, then
// StatefulSets, then CronJobs) lives in namespace w mod controllersNamespaces.
type benchWorkloads struct{ deployments, statefulSets, cronJobs int }

func splitWorkloads(n int) benchWorkloads {
	w := benchWorkloads{deployments: max(1, n*3/4), statefulSets: n * 15 / 100}
	w.cronJobs = max(0, n-w.deployments-w.statefulSets)
	return w
}

// create creates the workloads. The first Deployment carries a scheduled-scaling
// annotation that never scales it (markScaled), so the benchmark can tell when
// scheduled scaling has synced.
func (w benchWorkloads) create(ctx context.Context, c client.Client) error {
	return createAll(ctx, c, w.deployments+w.statefulSets+w.cronJobs, func(i int) client.Object {
		ns := benchNamespace(i % controllersNamespaces)
		switch {
		case i < w.deployments:
			d := chartDeployment(ns, deploymentName(i))
			if i == 0 {
				markScaled(d)
			}
			return d
		case i < w.deployments+w.statefulSets:
			return chartStatefulSet(ns, statefulSetName(i-w.deployments))
		default:
			return chartCronJob(ns, fmt.Sprintf("job-%05d", i-w.deployments-w.statefulSets))
		}
	})
}

func deploymentName(i int) string  { return fmt.Sprintf("app-%05d", i) }
func statefulSetName(i int) string { return fmt.Sprintf("db-%05d", i) }

// pod is the i-th Pod: the Pods are dealt round the Deployments and StatefulSets, each
// looking as their controllers would make them (no kubelet runs them: they stay
// Pending, on no node).
func (w benchWorkloads) pod(i int) client.Object {
	owners := w.deployments + w.statefulSets
	workload, replica := i%owners, i/owners
	ns := benchNamespace(workload % controllersNamespaces)
	if workload < w.deployments {
		name := deploymentName(workload)
		hash := fmt.Sprintf("%09x", 0x5d7f8c6b9+workload)
		return chartPod(ns, name, fmt.Sprintf("%s-%s-%05x", name, hash, 0xa3c1f+replica*7919),
			metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-" + hash},
			map[string]string{"pod-template-hash": hash})
	}
	name := statefulSetName(workload - w.deployments)
	pod := fmt.Sprintf("%s-%d", name, replica)
	return chartPod(ns, name, pod,
		metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name},
		map[string]string{
			"controller-revision-hash":           name + "-6f9c7d8b44",
			"statefulset.kubernetes.io/pod-name": pod,
			"apps.kubernetes.io/pod-index":       strconv.Itoa(replica),
		})
}

// chartPod is a Pod of the chart workload name, controlled by owner, with extra labels.
func chartPod(ns, workload, name string, owner metav1.OwnerReference, labels map[string]string) *corev1.Pod {
	template := chartPodTemplate(workload)
	for k, v := range template.Labels {
		labels[k] = v
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(ns + "/" + owner.Name))
	owner.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", h.Sum64()&(1<<48-1)))
	owner.Controller, owner.BlockOwnerDeletion = ptr.To(true), ptr.To(true)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, Labels: labels, Annotations: template.Annotations,
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: template.Spec,
	}
}

func chartStatefulSet(ns, name string) *appsv1.StatefulSet {
	template := chartPodTemplate(name)
	template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/data"}}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, Labels: template.Labels,
			Annotations: map[string]string{"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": ns},
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](3),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: chartSelector(name)},
			Template:    template,
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
				},
			}},
		},
	}
}

func chartCronJob(ns, name string) *batchv1.CronJob {
	template := chartPodTemplate(name)
	template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	template.Spec.Containers[0].Ports = nil
	template.Spec.Containers[0].LivenessProbe, template.Spec.Containers[0].ReadinessProbe = nil, nil
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, Labels: template.Labels,
			Annotations: map[string]string{"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": ns},
		},
		Spec: batchv1.CronJobSpec{
			Schedule:    "*/15 * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: template}},
		},
	}
}

// probeBucket is a StorageBucket whose endpoint the endpoint policy denies (loopback):
// the StorageBucket controller writes its status without connecting anywhere.
func probeBucket(ns string, i int) *phalanksv1beta1.StorageBucket {
	return &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", i), Namespace: ns},
		Spec:       phalanksv1beta1.StorageBucketSpec{BucketName: fmt.Sprintf("probe-%d", i), Endpoint: "https://127.0.0.1:9"},
	}
}

// bucketSynced returns nil once the StorageBucket controller has written bucket's status
// for its current generation, with a Ready condition.
func bucketSynced(ctx context.Context, c client.Client, bucket *phalanksv1beta1.StorageBucket) error {
	live := &phalanksv1beta1.StorageBucket{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(bucket), live); err != nil {
		return err
	}
	if live.Status.ObservedGeneration != live.Generation || meta.FindStatusCondition(live.Status.Conditions, phalanksv1beta1.ConditionReady) == nil {
		return errors.New("the probe StorageBucket has no status yet")
	}
	return nil
}

// runningControllers lists the controllers that report workers in metrics.
func runningControllers(metrics string) ([]string, error) {
	fams, err := measure.Parse(strings.NewReader(metrics))
	if err != nil {
		return nil, err
	}
	var names []string
	if fam := fams["controller_runtime_max_concurrent_reconciles"]; fam != nil {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" {
					names = append(names, l.GetValue())
				}
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
