// Package outofcluster_test runs the manager binary the way a user evaluating it from a
// laptop would: against a cluster through a kubeconfig, with leader election on and no
// webhook certificate, and then points StorageBucket's v1alpha1 conversion at it.
package outofcluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// devNamespace is the namespace of the kubeconfig's context, as `kubectl config
// set-context --current --namespace` would set it.
const devNamespace = "phalanks-dev"

func TestRunsFromALaptopWithLeaderElectionAndConversion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))

	bin, err := tools.BuildManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env, err := envtest.Start(envtest.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k8s := env.Client
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: devNamespace}}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, env, devNamespace)

	// The flags a user would pass: no --leader-elect-namespace and a certificate
	// directory that does not exist (the default one, on a laptop).
	dir := t.TempDir()
	ports := freePorts(t, 2)
	webhookPort, healthPort := ports[0], ports[1]
	mgr := &process.Process{
		Name: "manager",
		Path: bin,
		Args: []string{
			"--kubeconfig", kubeconfig,
			"--leader-elect",
			"--webhook-port", strconv.Itoa(webhookPort),
			"--webhook-cert-dir", filepath.Join(dir, "no-such-dir"),
			"--metrics-bind-address", "0",
			"--health-probe-bind-address", process.HostPort(healthPort),
		},
		LogPath: filepath.Join(dir, "manager.log"),
	}
	if err := mgr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Stop(10 * time.Second) })
	if err := process.WaitFor(mgr, 2*time.Minute, func() error { return process.HTTPOK(nil, "http://"+process.HostPort(healthPort)+"/readyz", "") }); err != nil {
		t.Fatal(err)
	}

	// Leader election: the Lease is in the context's namespace, held by this manager.
	poll(ctx, t, "the leader election Lease in "+devNamespace, func() error {
		lease := &coordinationv1.Lease{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: devNamespace, Name: "phalanks-operator.phalanks.io"}, lease); err != nil {
			return err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
			return fmt.Errorf("lease has no holder")
		}
		return nil
	})

	// Conversion: point the CRD at the manager with the certificate it logged.
	crt := loggedCertificate(t, mgr.LogPath)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: "storagebuckets.phalanks.io"}, crd); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://%s/convert", process.HostPort(webhookPort))
	crd.Spec.Conversion.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: crt}
	if err := k8s.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
	sb := &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Name: "laptop", Namespace: devNamespace},
		Spec: phalanksv1beta1.StorageBucketSpec{
			BucketName: "laptop-bucket",
			Endpoint:   "https://s3.example.invalid",
			Region:     "eu-central-1",
		},
	}
	if err := k8s.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "StorageBucket read as v1alpha1 through the manager's conversion webhook", func() error {
		old := &phalanksv1alpha1.StorageBucket{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(sb), old); err != nil {
			return err
		}
		if old.Spec.BucketName != sb.Spec.BucketName {
			return fmt.Errorf("v1alpha1 bucketName %q, want %q", old.Spec.BucketName, sb.Spec.BucketName)
		}
		return nil
	})
	if err := mgr.FailedEarly(); err != nil {
		t.Fatal(err)
	}
}

// writeKubeconfig writes an administrator kubeconfig whose current context names ns.
func writeKubeconfig(t *testing.T, env *envtest.Env, ns string) string {
	t.Helper()
	data, err := env.KubeconfigUser("laptop-user", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// loggedCertificate returns the self-signed certificate whose path the manager logged.
func loggedCertificate(t *testing.T, logPath string) []byte {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "self-signed") {
			continue
		}
		var entry struct {
			Certificate string `json:"certificate"`
		}
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil || entry.Certificate == "" {
			t.Fatalf("log line about the self-signed certificate names none: %s (%v)", sc.Text(), err)
		}
		crt, err := os.ReadFile(entry.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		return crt
	}
	t.Fatalf("the manager did not log a self-signed certificate; log:\n%s", process.Tail(logPath, 30))
	return nil
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		p, err := process.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = p
	}
	return out
}

func poll(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}
