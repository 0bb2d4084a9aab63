package upgrade_test

import (
	"fmt"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/images"
)

// The fleet lives in one namespace.
const (
	fleetNamespace = "fleet"
	// probeInterval is every StorageBucket's interval: short, so that a missed probe
	// shows within the upgrade, and long enough for a loaded machine.
	probeInterval = 10 * time.Second
	// calendar is the holiday calendar whose one entry is the fleet's downtime window.
	calendar = "fleet-window"
)

// fleetBucket is a StorageBucket of the fleet and what it is expected to show.
type fleetBucket struct {
	name string
	// ready is the Ready status it settles on; reason its reason.
	ready  metav1.ConditionStatus
	reason string
	// observed: its probes are HTTP requests through the recording proxy (Connect
	// probes open a connection only, and the CA-bundle one speaks TLS to its own MinIO).
	observed bool
}

var fleetBuckets = []fleetBucket{
	{name: "connect", ready: metav1.ConditionTrue, reason: "BucketReady"},
	{name: "head", ready: metav1.ConditionTrue, reason: "BucketReady", observed: true},
	{name: "list-ca", ready: metav1.ConditionTrue, reason: "BucketReady"},
	{name: "readwrite-managed", ready: metav1.ConditionTrue, reason: "BucketReady", observed: true},
	{name: "list-managed-retain", ready: metav1.ConditionTrue, reason: "BucketReady", observed: true},
	{name: "legacy-v1alpha1", ready: metav1.ConditionTrue, reason: "BucketReady", observed: true},
	{name: "unlabelled", ready: metav1.ConditionFalse, reason: "SecretNotLabeled"},
}

// fleetFoos are the Foos and their replica counts.
var fleetFoos = map[string]int32{"foo-a": 2, "foo-b": 1}

// createFleet creates the fleet, its downtime window open, and waits until it settled:
// every StorageBucket as expected, every Foo's pods Ready, every scheduled workload down.
func createFleet() {
	GinkgoHelper()
	// No restricted Pod Security: a Foo's Deployment runs sample-controller's pod template,
	// which sets no security context.
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNamespace}})).To(Succeed())
	createBuckets()
	for name, replicas := range fleetFoos {
		Expect(k8s.Create(ctx, &phalanksv1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fleetNamespace},
			Spec: phalanksv1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To(replicas), Image: testAppRef}})).To(Succeed())
	}
	createWorkloads()
	expectBucketsSettled()
	expectFoosAvailable()
	expectWorkloads(downState)
}

func createBuckets() {
	GinkgoHelper()
	for _, b := range []string{"head", "legacy-v1alpha1", "unlabelled"} {
		check(s3.MakeBucket(ctx, b, miniogo.MakeBucketOptions{}))
	}
	check(s3tls.MakeBucket(ctx, "list-ca", miniogo.MakeBucketOptions{}))
	for _, s := range []struct {
		name     string
		id, key  string
		labelled bool
	}{
		{"s3-credentials", s3.AccessKey, s3.SecretKey, true},
		{"s3tls-credentials", s3tls.AccessKey, s3tls.SecretKey, true},
		{"plain-credentials", s3.AccessKey, s3.SecretKey, false},
	} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: s.name},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": s.id, "AWS_SECRET_ACCESS_KEY": s.key}}
		if s.labelled {
			sec.Labels = map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}
		}
		Expect(k8s.Create(ctx, sec)).To(Succeed())
	}
	Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: "minio-ca"},
		Data: map[string]string{"ca.crt": string(s3tls.CAPEM)}})).To(Succeed())

	interval := &metav1.Duration{Duration: probeInterval}
	bucket := func(name, endpoint, secret string, depth phalanksv1beta1.ProbeDepth) *phalanksv1beta1.StorageBucket {
		sb := &phalanksv1beta1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: name},
			Spec: phalanksv1beta1.StorageBucketSpec{BucketName: name, Endpoint: endpoint, Region: s3.Region,
				InsecureAllowHTTP: strings.HasPrefix(endpoint, "http://"),
				HealthCheck:       phalanksv1beta1.HealthCheck{Interval: interval, Depth: depth}},
		}
		if secret != "" {
			sb.Spec.CredentialsSecretRef = &phalanksv1beta1.CredentialsSecretReference{Name: secret}
		}
		return sb
	}
	connect := bucket("connect", proxy.URL, "", phalanksv1beta1.ProbeConnect)
	head := bucket("head", proxy.URL, "s3-credentials", phalanksv1beta1.ProbeHeadBucket)
	listCA := bucket("list-ca", s3tls.URL, "s3tls-credentials", phalanksv1beta1.ProbeList)
	listCA.Spec.CABundle = &phalanksv1beta1.CABundleSource{ConfigMapKeyRef: &phalanksv1beta1.KeyReference{Name: "minio-ca", Key: "ca.crt"}}
	readWrite := bucket("readwrite-managed", proxy.URL, "s3-credentials", phalanksv1beta1.ProbeReadWrite)
	readWrite.Spec.ManagementPolicy, readWrite.Spec.DeletionPolicy = phalanksv1beta1.ManagementManage, phalanksv1beta1.DeletionDelete
	readWrite.Spec.NonEmptyStrategy = phalanksv1beta1.NonEmptyForceEmpty
	retain := bucket("list-managed-retain", proxy.URL, "s3-credentials", phalanksv1beta1.ProbeList)
	retain.Spec.ManagementPolicy, retain.Spec.DeletionPolicy = phalanksv1beta1.ManagementManage, phalanksv1beta1.DeletionRetain
	unlabelled := bucket("unlabelled", proxy.URL, "plain-credentials", phalanksv1beta1.ProbeHeadBucket)
	for _, sb := range []*phalanksv1beta1.StorageBucket{connect, head, listCA, readWrite, retain, unlabelled} {
		Expect(k8s.Create(ctx, sb)).To(Succeed())
	}
	// A StorageBucket as a client written for the first release creates it.
	legacy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "phalanks.io/v1alpha1", "kind": "StorageBucket",
		"metadata": map[string]any{"name": "legacy-v1alpha1", "namespace": fleetNamespace},
		"spec": map[string]any{"bucketName": "legacy-v1alpha1", "endpoint": proxy.Endpoint, "insecure": true,
			"region": s3.Region, "secretName": "s3-credentials", "intervalSeconds": int64(probeInterval / time.Second)},
	}}
	// The conversion webhook may need a moment after the install; v1alpha1 goes through it.
	Eventually(func() error { return k8s.Create(ctx, legacy) }).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
}

// expectBucketsSettled waits until every StorageBucket shows what it is expected to, for
// its current generation.
func expectBucketsSettled() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		for _, b := range fleetBuckets {
			sb := &phalanksv1beta1.StorageBucket{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: fleetNamespace, Name: b.name}, sb)).To(Succeed())
			ready := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady)
			g.Expect(ready).NotTo(BeNil(), "%s has no Ready condition", b.name)
			g.Expect(ready.Status).To(Equal(b.ready), "%s: Ready %s/%s: %s", b.name, ready.Status, ready.Reason, ready.Message)
			g.Expect(ready.Reason).To(Equal(b.reason), "%s: Ready %s/%s: %s", b.name, ready.Status, ready.Reason, ready.Message)
			g.Expect(sb.Status.ObservedGeneration).To(Equal(sb.Generation), "%s not probed at its generation", b.name)
		}
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

func expectFoosAvailable() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		for name, replicas := range fleetFoos {
			dep := &appsv1.Deployment{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: fleetNamespace, Name: name}, dep)).To(Succeed())
			g.Expect(dep.Status.AvailableReplicas).To(Equal(replicas), "Foo %s's Deployment: %+v", name, dep.Status)
		}
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// The scheduled workloads, each in the fleet's downtime window: a Deployment with its
// PodDisruptionBudget, a StatefulSet, a CronJob, a DaemonSet, and an autoscaler with a
// schedule of its own.
func createWorkloads() {
	GinkgoHelper()
	setWindow(time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour))
	scheduled := func() map[string]string {
		return map[string]string{scaling.AnnotationDowntime: "holidays:" + calendar, scaling.AnnotationGracePeriod: "1"}
	}
	labels := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	objs := []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: fleetNamespace, Annotations: scheduled()},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: labels("web"), Template: podTemplate("web")}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: fleetNamespace},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: labels("web")}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: fleetNamespace, Annotations: scheduled()},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "db", Selector: labels("db"), Template: podTemplate("db")}},
		&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: fleetNamespace, Annotations: scheduled()},
			Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: func() corev1.PodTemplateSpec {
					t := podTemplate("nightly")
					t.Spec.RestartPolicy = corev1.RestartPolicyNever
					return t
				}()}}}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: fleetNamespace, Annotations: scheduled()},
			Spec: appsv1.DaemonSetSpec{Selector: labels("agent"), Template: podTemplate("agent")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: fleetNamespace},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: labels("api"), Template: podTemplate("api")}},
		&autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: fleetNamespace, Annotations: scheduled()},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: ptr.To[int32](2), MaxReplicas: 4,
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"}}},
	}
	for _, o := range objs {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
}

// setWindow makes the calendar's one entry the window [start, end), creating it the
// first time: the operator re-decides every workload that names it.
func setWindow(start, end time.Time) {
	GinkgoHelper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: calendar,
		Labels: map[string]string{scaling.LabelHolidayCalendar: "true"}},
		Data: map[string]string{"window": start.UTC().Truncate(time.Second).Format(time.RFC3339) + "-" +
			end.UTC().Truncate(time.Second).Format(time.RFC3339)}}
	err := k8s.Create(ctx, cm)
	if err == nil {
		return
	}
	Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
	Expect(k8s.Update(ctx, cm)).To(Succeed())
}

// workloadState describes each scheduled workload as the downtime leaves it.
type workloadState map[string]string

var (
	downState = workloadState{
		"Deployment web":              "replicas=0 original=2",
		"StatefulSet db":              "replicas=0 original=1",
		"CronJob nightly":             "suspend=true",
		"DaemonSet agent":             "scaledDown=true",
		"HorizontalPodAutoscaler api": "minReplicas=1",
		"PodDisruptionBudget web":     "minAvailable=0",
	}
	upState = workloadState{
		"Deployment web":              "replicas=2 original=",
		"StatefulSet db":              "replicas=1 original=",
		"CronJob nightly":             "suspend=false",
		"DaemonSet agent":             "scaledDown=false",
		"HorizontalPodAutoscaler api": "minReplicas=2",
		"PodDisruptionBudget web":     "minAvailable=1",
	}
)

// readWorkloads returns the state of every scheduled workload.
func readWorkloads() (workloadState, error) {
	out := workloadState{}
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: fleetNamespace, Name: name} }
	web, db := &appsv1.Deployment{}, &appsv1.StatefulSet{}
	cj, ds := &batchv1.CronJob{}, &appsv1.DaemonSet{}
	hpa, pdb := &autoscalingv2.HorizontalPodAutoscaler{}, &policyv1.PodDisruptionBudget{}
	for _, r := range []struct {
		name string
		obj  client.Object
	}{{"web", web}, {"db", db}, {"nightly", cj}, {"agent", ds}, {"api", hpa}, {"web", pdb}} {
		if err := k8s.Get(ctx, key(r.name), r.obj); err != nil {
			return nil, err
		}
	}
	out["Deployment web"] = fmt.Sprintf("replicas=%d original=%s", ptr.Deref(web.Spec.Replicas, 1), web.Annotations[scaling.AnnotationOriginalReplicas])
	out["StatefulSet db"] = fmt.Sprintf("replicas=%d original=%s", ptr.Deref(db.Spec.Replicas, 1), db.Annotations[scaling.AnnotationOriginalReplicas])
	out["CronJob nightly"] = fmt.Sprintf("suspend=%t", ptr.Deref(cj.Spec.Suspend, false))
	_, down := ds.Spec.Template.Spec.NodeSelector["phalanks.io/scaled-down"]
	out["DaemonSet agent"] = fmt.Sprintf("scaledDown=%t", down)
	out["HorizontalPodAutoscaler api"] = fmt.Sprintf("minReplicas=%d", ptr.Deref(hpa.Spec.MinReplicas, 1))
	out["PodDisruptionBudget web"] = "minAvailable=" + pdb.Spec.MinAvailable.String()
	return out, nil
}

// expectWorkloads waits until every scheduled workload is in want.
func expectWorkloads(want workloadState) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		got, err := readWorkloads()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(want))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// endWindowAndExpectRestored ends the downtime window shortly (the operator wakes the
// workloads on its timer at the window's end), waits until every workload is back to its
// saved count, then opens the window again and waits until they are down again: the
// fleet is ready for the next path.
func endWindowAndExpectRestored() {
	GinkgoHelper()
	end := time.Now().Add(15 * time.Second)
	setWindow(time.Now().Add(-time.Hour), end)
	expectWorkloads(upState)
	Expect(time.Now()).To(BeTemporally(">=", end.Truncate(time.Second)), "restored before the window ended")
	setWindow(time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour))
	expectWorkloads(downState)
}

// podTemplate runs testapp with a readiness probe, under restricted Pod Security.
func podTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "app",
				Image: testAppRef,
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(images.TestAppPort)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}
