// Package scaling_test checks scheduled scaling of every kind against a local control
// plane whose real controllers act on the result: kube-controller-manager's Deployment,
// CronJob, Job, DaemonSet, disruption and HPA controllers, kube-scheduler, and kwok's
// fake nodes and pods. The operator runs in the test process as a user bound to the
// ClusterRole its RBAC markers generate, so every test also proves those permissions
// suffice. KEDA's operator is simulated (keda_test.go) against KEDA's real CRD.
//
// The tests share one cluster and run one after another, each in namespaces of its own
// with an operator of its own.
package scaling_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// operatorUser is the identity the operator runs as, bound to config/rbac/role.yaml.
const operatorUser = "phalanks-e2e-operator"

// Timeouts for a loaded 2-core machine; kube-controller-manager's controllers resync on
// their own schedules (the CronJob controller once a minute).
const (
	timeout  = 3 * time.Minute
	interval = 250 * time.Millisecond
)

var (
	local  *cluster.Cluster
	scheme *runtime.Scheme
	admin  client.Client
	// workDir is the run's private directory, removed when it ends.
	workDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer failures.print(os.Stderr) // last, after every component's output
	log.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	dir, err := os.MkdirTemp("", "scaling-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	workDir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	local, err = cluster.Start(ctx, cluster.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the local cluster:", err)
		return 1
	}
	defer local.Stop()
	if err := setUp(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "set up the local cluster:", err, "(component logs in", local.LogDir+")")
		return 1
	}
	return m.Run()
}

// zapLevel is the operator's log level: its decisions, and debug output when
// SCALING_E2E_DEBUG is set.
func zapLevel() zapcore.Level {
	if os.Getenv("SCALING_E2E_DEBUG") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.InfoLevel
}

// setUp installs KEDA's ScaledObject CRD and binds the operator's ClusterRole.
func setUp(ctx context.Context) error {
	scheme = runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	var err error
	if admin, err = client.New(local.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	keda, err := crds.Load(filepath.Join("testdata", "keda"))
	if err != nil {
		return err
	}
	if err := crds.Install(ctx, admin, keda, nil); err != nil {
		return err
	}
	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := readYAML(filepath.Join(root, "config", "rbac", "role.yaml"), role); err != nil {
		return err
	}
	return bind(ctx, role)
}

// bind creates role and binds it to the operator's user.
func bind(ctx context.Context, role *rbacv1.ClusterRole) error {
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: operatorUser}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s: %w", o.GetName(), err)
		}
	}
	return nil
}

func readYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, into)
}

// startOperator runs scheduled scaling as the operator's user until the test ends. The
// grace period is off unless o sets one: the workloads here are seconds old.
func startOperator(t *testing.T, o scaling.Options) {
	t.Helper()
	failures.noteFailed(t)
	g := expect(t)
	cfg := rest.CopyConfig(local.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Each test runs a manager of its own in this one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	if o.Concurrency == 0 {
		o.Concurrency = 2
	}
	_, err = scaling.SetupWithManager(mgr, o)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	})
}

// newNamespace creates a namespace of the test's own, named after the test (what a
// namespace name may not hold, such as a subtest's underscores, becomes a dash).
func newNamespace(t *testing.T, annotations map[string]string) string {
	t.Helper()
	failures.noteFailed(t)
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: name[:min(40, len(name))] + "-",
		Annotations:  annotations,
	}}
	expect(t).Expect(admin.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

// downtimeForAnHour is a downtime that began a minute ago and ends in an hour, and the
// next-transition the operator must record for it.
func downtimeForAnHour() (spec, next string) {
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	end := start.Add(time.Hour)
	return start.Format(time.RFC3339) + "-" + end.Format(time.RFC3339), end.Format(time.RFC3339)
}

// annotate sets (or with an empty value, removes) annotations on a live object, as a
// user would.
func annotate(g Gomega, obj client.Object, kv map[string]string) {
	g.Eventually(func(g Gomega) {
		live := obj.DeepCopyObject().(client.Object)
		g.Expect(admin.Get(context.Background(), client.ObjectKeyFromObject(obj), live)).To(Succeed())
		a := live.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		for k, v := range kv {
			if v == "" {
				delete(a, k)
			} else {
				a[k] = v
			}
		}
		live.SetAnnotations(a)
		g.Expect(admin.Update(context.Background(), live)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// kubectl runs the kubectl of the kubectl tool set against the cluster as its
// administrator, with stdin as its input, and returns its output; it fails the test if
// kubectl fails.
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	bin, err := tools.Path("kubectl")
	expect(t).Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+local.Kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	expect(t).Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// live returns a function reading obj for Eventually.
func live[T client.Object](obj T) func(Gomega) T {
	return func(g Gomega) T {
		out := obj.DeepCopyObject().(T)
		g.Expect(admin.Get(context.Background(), client.ObjectKeyFromObject(obj), out)).To(Succeed())
		return out
	}
}

// notes lists "<type>: <note>" of the events with reason about obj.
func notes(obj client.Object, reason string) func(Gomega) []string {
	return func(g Gomega) []string {
		list := &eventsv1.EventList{}
		g.Expect(admin.List(context.Background(), list, client.InNamespace(obj.GetNamespace()))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.Regarding.Name == obj.GetName() && e.Reason == reason {
				out = append(out, e.Type+": "+e.Note)
			}
		}
		return out
	}
}

// writtenBy reports whether a field manager has ever written obj.
func writtenBy(manager string) func(client.Object) bool {
	return func(o client.Object) bool {
		for _, f := range o.GetManagedFields() {
			if f.Manager == manager {
				return true
			}
		}
		return false
	}
}

func podTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

func newDeployment(t *testing.T, ns, name string, replicas int32, annotations map[string]string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name),
		},
	}
	expect(t).Expect(admin.Create(context.Background(), d)).To(Succeed())
	return d
}
