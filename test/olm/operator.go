package olm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	// webhookCertVolume is the volume OLM adds to the operator's Deployment with the
	// serving certificate it issued, mounted where controller-runtime reads it.
	webhookCertVolume = "webhook-cert"
	// syncInterval is how often the kubelet stand-in looks at the Deployment.
	syncInterval = 500 * time.Millisecond
)

// Pod is one run of our manager binary in place of a pod of OLM's Deployment.
type Pod struct {
	// Deployment and Generation identify the pod template it runs.
	Deployment types.UID
	Generation int64
	// ServiceAccount is the account the manager authenticates as.
	ServiceAccount string
	// WebhookAddress is the ClusterIP:port of OLM's webhook Service it listens on.
	WebhookAddress string
	// Args are the manager's arguments: the Deployment's, then the kubelet stand-in's.
	Args []string

	proc       *process.Process
	certDir    string
	certSecret string
}

// LogPath is the manager's log.
func (p *Pod) LogPath() string { return p.proc.LogPath }

// Kubelet stands in for the kubelet of the node OLM's operator pod is scheduled to. kwok
// only fakes that pod's status, so no code of ours would run; the Kubelet runs
// bin/manager out of cluster whenever the operator's Deployment exists, as its pod would:
//   - with the arguments of the Deployment's manager container, followed by what running
//     out of cluster needs (listen addresses on free ports, the leader election namespace
//     the pod reads from its service account, a kubeconfig);
//   - with the serving certificate from the Secret of the Deployment's webhook-cert volume,
//     which OLM issued, rewritten when the Secret changes (controller-runtime reloads it);
//   - listening for conversion on the port of OLM's webhook Service, whose ClusterIP is
//     added to the namespace's loopback, so kube-apiserver reaches it as it would the pod;
//   - authenticated as the pod template's service account with a token from the
//     TokenRequest API, so it has exactly the RBAC OLM created from the CSV's permissions.
//
// A new pod template (an upgrade) restarts the manager with the new one; a deleted
// Deployment (an uninstall) stops it. A manager that exits on its own is an error.
type Kubelet struct {
	c                     *cluster.Cluster
	k8s                   client.Client
	namespace, deployment string
	dir, logDir           string

	mu  sync.Mutex
	pod *Pod
	err error

	cancel context.CancelFunc
	done   chan struct{}
}

// StartKubelet starts running the named Deployment's pod; Stop ends it.
func StartKubelet(ctx context.Context, c *cluster.Cluster, k8s client.Client, namespace, deployment, dir, logDir string) *Kubelet {
	ctx, cancel := context.WithCancel(ctx)
	k := &Kubelet{c: c, k8s: k8s, namespace: namespace, deployment: deployment, dir: dir, logDir: logDir, cancel: cancel, done: make(chan struct{})}
	go k.loop(ctx)
	return k
}

// Pod returns the running manager, or nil.
func (k *Kubelet) Pod() *Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pod
}

// Err returns why the Kubelet failed: a manager that exited on its own or could not
// start.
func (k *Kubelet) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Stop ends the loop and the manager.
func (k *Kubelet) Stop() error {
	k.cancel()
	<-k.done
	return k.stopPod()
}

func (k *Kubelet) loop(ctx context.Context) {
	defer close(k.done)
	t := time.NewTicker(syncInterval)
	defer t.Stop()
	for {
		if err := k.sync(ctx); err != nil {
			k.mu.Lock()
			if k.err == nil {
				k.err = err
			}
			k.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync brings the manager in line with the Deployment. It returns an error only for
// what a retry cannot mend.
func (k *Kubelet) sync(ctx context.Context) error {
	dep := &appsv1.Deployment{}
	err := k.k8s.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: k.deployment}, dep)
	if apierrors.IsNotFound(err) || (err == nil && dep.DeletionTimestamp != nil) {
		return k.stopPod()
	}
	if err != nil {
		// The API server may be busy: look again next tick.
		return nil
	}
	pod := k.Pod()
	if pod != nil && pod.Deployment == dep.UID && pod.Generation == dep.Generation {
		if err := pod.proc.FailedEarly(); err != nil {
			return err
		}
		// A rotated Secret reaches the pod's files, as a projected volume's does.
		_, err := k.writeCertificate(ctx, pod)
		return err
	}
	if err := k.stopPod(); err != nil {
		return err
	}
	pod, err = k.startPod(ctx, dep)
	if err != nil || pod == nil {
		return err
	}
	k.mu.Lock()
	k.pod = pod
	k.mu.Unlock()
	return nil
}

func (k *Kubelet) stopPod() error {
	k.mu.Lock()
	pod := k.pod
	k.pod = nil
	k.mu.Unlock()
	if pod == nil {
		return nil
	}
	// The kubelet's SIGTERM, within the Deployment's grace period.
	return pod.proc.Stop(45 * time.Second)
}

// startPod starts the manager for the Deployment's pod template. It returns nil and no
// error when OLM has not created what the pod needs yet (the Secret, the Service).
func (k *Kubelet) startPod(ctx context.Context, dep *appsv1.Deployment) (*Pod, error) {
	spec := dep.Spec.Template.Spec
	var container *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == bundle.ManagerContainer {
			container = &spec.Containers[i]
		}
	}
	if container == nil {
		return nil, fmt.Errorf("deployment %s/%s has no %q container", dep.Namespace, dep.Name, bundle.ManagerContainer)
	}
	pod := &Pod{Deployment: dep.UID, Generation: dep.Generation, ServiceAccount: spec.ServiceAccountName}
	for _, v := range spec.Volumes {
		if v.Name == webhookCertVolume && v.Secret != nil {
			pod.certSecret = v.Secret.SecretName
		}
	}
	if pod.certSecret == "" {
		return nil, fmt.Errorf("deployment %s/%s has no %s volume: OLM did not wire the webhook certificate", dep.Namespace, dep.Name, webhookCertVolume)
	}
	if err := k.k8s.Get(ctx, client.ObjectKey{Namespace: dep.Namespace, Name: pod.ServiceAccount}, &corev1.ServiceAccount{}); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	svc := &corev1.Service{}
	if err := k.k8s.Get(ctx, client.ObjectKey{Namespace: dep.Namespace, Name: dep.Name + "-service"}, svc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if len(svc.Spec.Ports) != 1 {
		return nil, fmt.Errorf("service %s/%s has %d ports, want 1", svc.Namespace, svc.Name, len(svc.Spec.Ports))
	}

	// One directory and log per pod template, as a pod name would tell them apart.
	podName := fmt.Sprintf("%s-%.8s-%d", dep.Name, dep.UID, dep.Generation)
	dir := filepath.Join(k.dir, podName)
	pod.certDir = filepath.Join(dir, "serving-certs")
	if ok, err := k.writeCertificate(ctx, pod); !ok || err != nil {
		return nil, err
	}
	if err := AddLoopbackAddress(svc.Spec.ClusterIP); err != nil {
		return nil, err
	}
	// kube-apiserver dials the Service's ClusterIP and port; there is no kube-proxy to
	// translate to the target port, so the manager listens on the Service port itself.
	webhookPort := svc.Spec.Ports[0].Port
	pod.WebhookAddress = fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, webhookPort)

	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeServiceAccountKubeconfig(ctx, k.c, dep.Namespace, pod.ServiceAccount, kubeconfig); err != nil {
		return nil, err
	}
	healthPort, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	metricsPort, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	pod.Args = append(append([]string{}, container.Args...),
		fmt.Sprintf("--webhook-port=%d", webhookPort),
		"--webhook-cert-dir="+pod.certDir,
		"--health-probe-bind-address="+process.HostPort(healthPort),
		"--metrics-bind-address="+process.HostPort(metricsPort),
		"--leader-elect-namespace="+dep.Namespace,
		"--kubeconfig="+kubeconfig,
		// The test's MinIO listens on 127.0.0.1 in the network namespace, which the
		// endpoint policy denies unless allowed.
		"--storagebucket-endpoint-allow-cidrs=127.0.0.1/32",
	)
	bin, err := managerBinary()
	if err != nil {
		return nil, err
	}
	pod.proc = &process.Process{Name: "manager", Path: bin, Args: pod.Args, LogPath: filepath.Join(k.logDir, "manager-"+podName+".log")}
	if err := pod.proc.Start(); err != nil {
		return nil, err
	}
	ready := "http://" + process.HostPort(healthPort) + "/readyz"
	if err := process.WaitFor(pod.proc, 2*time.Minute, func() error { return httpGet(ready) }); err != nil {
		_ = pod.proc.Stop(10 * time.Second)
		return nil, err
	}
	return pod, nil
}

// writeCertificate writes the certificate and key of the pod's Secret into its
// certificate directory, as the kubelet projects the volume. It reports false when the
// Secret does not exist yet.
func (k *Kubelet) writeCertificate(ctx context.Context, pod *Pod) (bool, error) {
	secret := &corev1.Secret{}
	if err := k.k8s.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: pod.certSecret}, secret); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if err := os.MkdirAll(pod.certDir, 0o700); err != nil {
		return false, err
	}
	for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(secret.Data[key]) == 0 {
			return false, fmt.Errorf("secret %s/%s has no %s", secret.Namespace, secret.Name, key)
		}
		path := filepath.Join(pod.certDir, key)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, secret.Data[key]) {
			continue
		}
		if err := os.WriteFile(path, secret.Data[key], 0o600); err != nil {
			return false, err
		}
	}
	return true, nil
}

// managerBinary returns bin/manager, built by `make build` from this tree.
func managerBinary() (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", "manager")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found: run `make build` first (make test-olm does)", p)
	}
	return p, nil
}

// writeServiceAccountKubeconfig writes a kubeconfig for the service account, with a
// token from the TokenRequest API.
func writeServiceAccountKubeconfig(ctx context.Context, c *cluster.Cluster, namespace, name, path string) error {
	if name == "" {
		return errors.New("the pod template names no service account")
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthority: c.Config.CAFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

func httpGet(url string) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
