package olm

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	packageServerService = "packageserver-service"
	packageServerPort    = 443
	// PackagesAPIService is the aggregated API package-server serves: PackageManifests,
	// what `kubectl get packagemanifests` and OperatorHub list.
	PackagesAPIService = "v1.packages.operators.coreos.com"
)

// startPackageServer wires package-server in as an aggregated API server, as OLM's own
// packageserver CSV would, but running out of cluster on the node: a Service without
// selector and an EndpointSlice naming the node's address and the port package-server
// listens on there (kube-proxy sends the Service's traffic to it), a serving certificate
// for the Service's DNS name from a test CA that the APIService trusts. It returns once
// the APIService is Available.
func startPackageServer(ctx context.Context, c *cluster.Cluster, k8s client.Client, dir, logDir string) (*process.Process, error) {
	port, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: packageServerService, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "https", Port: packageServerPort, TargetPort: intstr.FromInt(port), Protocol: corev1.ProtocolTCP,
		}}},
	}
	if err := k8s.Create(ctx, svc); err != nil {
		return nil, fmt.Errorf("create Service %s: %w", packageServerService, err)
	}
	clusterIP := svc.Spec.ClusterIP
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: packageServerService, Namespace: Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: packageServerService},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{cluster.NodeIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}}, //nolint:gosec // G115: a TCP port
	}
	if err := k8s.Create(ctx, slice); err != nil {
		return nil, fmt.Errorf("create EndpointSlice %s: %w", packageServerService, err)
	}

	ca, err := certs.NewCA("package-server-ca")
	if err != nil {
		return nil, err
	}
	dns := packageServerService + "." + Namespace + ".svc"
	serving, err := ca.Issue(certs.LeafOptions{CommonName: dns, Hosts: []string{dns, clusterIP}})
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "package-server")
	if err := serving.Write(certDir, "tls.crt", "tls.key"); err != nil {
		return nil, err
	}
	proc, err := packageServerProcess(c, dir, logDir, []string{
		"--kubeconfig", c.Kubeconfig,
		"--authentication-kubeconfig", c.Kubeconfig,
		"--authorization-kubeconfig", c.Kubeconfig,
		"--bind-address", cluster.NodeIP,
		"--secure-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(certDir, "tls.crt"),
		"--tls-private-key-file", filepath.Join(certDir, "tls.key"),
		"--global-namespace", Namespace,
		"-v=2",
	})
	if err != nil {
		return nil, err
	}
	if err := proc.Start(); err != nil {
		return nil, err
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": PackagesAPIService},
		"spec": map[string]any{
			"group":                "packages.operators.coreos.com",
			"version":              "v1",
			"groupPriorityMinimum": int64(2000),
			"versionPriority":      int64(15),
			"caBundle":             base64.StdEncoding.EncodeToString(ca.CertPEM),
			"service":              map[string]any{"name": packageServerService, "namespace": Namespace, "port": int64(packageServerPort)},
		},
	}}
	if err := k8s.Create(ctx, apiService); err != nil {
		_ = proc.Stop(5 * time.Second)
		return nil, fmt.Errorf("create APIService %s: %w", PackagesAPIService, err)
	}
	if err := waitForAPIService(ctx, k8s, proc, 2*time.Minute); err != nil {
		_ = proc.Stop(5 * time.Second)
		return nil, err
	}
	return proc, nil
}

// packageServerProcess returns package-server with args, started so that it finds
// in-cluster credentials. package-server v0.33.0 builds its delegated authorizer from
// the in-cluster configuration whatever --authorization-kubeconfig says (it sets the
// kubeconfig on its authentication options twice and never on the authorization ones),
// and retries forever without one. So it runs in a mount namespace of its own where a
// tmpfs over /run holds secrets/kubernetes.io/serviceaccount with the administrator's token
// and the cluster CA, with KUBERNETES_SERVICE_HOST and _PORT pointing at kube-apiserver;
// the host's /run is untouched.
func packageServerProcess(c *cluster.Cluster, dir, logDir string, args []string) (*process.Process, error) {
	bin, err := tools.Path("package-server")
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("package-server needs %s (util-linux) for its in-cluster credentials: %w", tool, err)
		}
	}
	run, err := filepath.EvalSymlinks("/var/run")
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(c.Config.CAFile)
	if err != nil {
		return nil, err
	}
	saDir := filepath.Join(dir, "package-server-in-cluster")
	if err := os.MkdirAll(saDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte(c.Config.BearerToken), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), ca, 0o600); err != nil { //nolint:gosec // G703: a directory of the test's own
		return nil, err
	}
	host, port, err := net.SplitHostPort(strings.TrimPrefix(c.Server, "https://"))
	if err != nil {
		return nil, err
	}
	// mount -n: no entry in the host's /run/mount/utab.
	const script = `set -e
mount -n -t tmpfs -o mode=0755 tmpfs "$RUN_DIR"
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
cp "$SA_DIR/token" "$SA_DIR/ca.crt" /var/run/secrets/kubernetes.io/serviceaccount/
exec "$@"`
	return &process.Process{
		Name: "package-server",
		Path: "unshare",
		Args: append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "package-server", bin}, args...),
		Env: []string{
			"RUN_DIR=" + run, "SA_DIR=" + saDir,
			"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
			"KUBECONFIG=" + c.Kubeconfig, "CI=",
		},
		LogPath: filepath.Join(logDir, "package-server.log"),
	}, nil
}

func waitForAPIService(ctx context.Context, k8s client.Client, proc *process.Process, timeout time.Duration) error {
	last := "not found"
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := proc.FailedEarly(); err != nil {
			return false, err
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiregistration.k8s.io/v1")
		u.SetKind("APIService")
		if err := k8s.Get(ctx, client.ObjectKey{Name: PackagesAPIService}, u); err != nil {
			last = err.Error()
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conditions {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("Available=%v (%v: %v)", m["status"], m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not Available after %s: %w; last seen: %s (log %s:\n%s)",
			PackagesAPIService, timeout, err, last, proc.LogPath, process.Tail(proc.LogPath, 15))
	}
	return nil
}
