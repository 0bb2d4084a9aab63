package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

// serviceAccountNamespace is where a pod finds its namespace (a variable for tests).
var serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// inCluster reports whether the manager runs in a pod: the kubelet gives every
// container KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (the signal client-go's
// in-cluster configuration uses too), whether or not a service account token and
// namespace file are mounted.
func inCluster() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}

// leaseNamespace decides where the leader election Lease and the StorageBucket shard
// ring's Leases go when --leader-elect-namespace does not say: in a pod, the pod's
// namespace (POD_NAMESPACE, else the service account's namespace file, which a pod
// without a mounted token lacks); outside a pod, the kubeconfig context's namespace, as
// kubectl would use. controller-runtime's leader election and the ring both take it
// from cfg.leaderElectNamespace, so they agree.
func leaseNamespace(cfg *config, log logr.Logger) error {
	if !cfg.leaderElect || cfg.leaderElectNamespace != "" {
		return nil
	}
	if inCluster() {
		ns := podNamespace()
		if ns == "" {
			return fmt.Errorf("namespace of the leader election and shard ring Leases: neither POD_NAMESPACE "+
				"nor %s is set; set POD_NAMESPACE from the pod's metadata.namespace or pass --leader-elect-namespace",
				serviceAccountNamespace)
		}
		cfg.leaderElectNamespace = ns
		return nil
	}
	ns, err := kubeconfigNamespace(cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("leader election namespace from the kubeconfig: %w", err)
	}
	cfg.leaderElectNamespace = ns
	log.Info("running outside a cluster: the leader election Lease goes to the kubeconfig context's namespace "+
		"(set --leader-elect-namespace to choose another)", "namespace", ns)
	return nil
}

// kubeconfigNamespace is the namespace of the kubeconfig's current context, as kubectl
// would use ("default" if it names none).
func kubeconfigNamespace(kubeconfig string) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	return ns, err
}

// operatorNamespace is where the operator keeps what it alone writes (the record of
// grandfathered Secret references): the Leases' namespace with leader election, else the
// pod's, else outside a pod the kubeconfig context's.
func operatorNamespace(cfg config) (string, error) {
	switch {
	case cfg.leaderElectNamespace != "":
		return cfg.leaderElectNamespace, nil
	case inCluster():
		if ns := podNamespace(); ns != "" {
			return ns, nil
		}
		return "", fmt.Errorf("the operator's namespace: neither POD_NAMESPACE nor %s is set; set POD_NAMESPACE "+
			"from the pod's metadata.namespace", serviceAccountNamespace)
	}
	ns, err := kubeconfigNamespace(cfg.kubeconfig)
	if err != nil {
		return "", fmt.Errorf("the operator's namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// outOfClusterDefaults fills in, for a manager started outside a pod, a serving
// certificate for the webhook server when none was given (self-signed, for 127.0.0.1
// and localhost), as a pod would have one, and no webhook drain unless the flag asks for
// one. In a pod the directory stays as it is: a missing certificate there is a
// deployment error and stops the manager. The returned function removes what it made,
// when the manager ends.
func outOfClusterDefaults(cfg *config, log logr.Logger) (func(), error) {
	nothing := func() {}
	if inCluster() {
		return nothing, nil
	}
	// No Service routes to a process outside a pod: nothing to drain.
	if !cfg.webhookDrainSet {
		cfg.webhookDrain = 0
	}
	// The rotator issues the certificate into this directory; a process outside a pod
	// gets it only if something copies the Secret there.
	if cfg.certRotation.Enabled || hasServingCert(cfg.webhookCertDir) {
		return nothing, nil
	}
	dir, err := selfSignedServingCert()
	if err != nil {
		return nothing, fmt.Errorf("self-signed webhook certificate: %w", err)
	}
	log.Info("running outside a cluster without a webhook serving certificate: serving CRD conversion "+
		"with a self-signed one for 127.0.0.1 and localhost. The API server converts through this process "+
		"only if the CRD's conversion webhook points here with that certificate as caBundle "+
		"(see docs/development.md)", "missingDir", cfg.webhookCertDir, "certificate", filepath.Join(dir, "tls.crt"))
	cfg.webhookCertDir = dir
	return func() { _ = os.RemoveAll(dir) }, nil
}

// podNamespace is the namespace the manager runs in: POD_NAMESPACE (config/manager sets
// it from the pod's metadata), else its service account's; empty outside a pod.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	data, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func hasServingCert(dir string) bool {
	for _, f := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil { //nolint:gosec // G703: the directory is the --webhook-cert-dir flag
			return false
		}
	}
	return true
}

// selfSignedServingCert writes a certificate for 127.0.0.1, ::1 and localhost, signed by
// a throwaway CA that tls.crt also carries, into a new private directory.
func selfSignedServingCert() (string, error) {
	crt, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, nil)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "phalanks-webhook-certs-")
	if err != nil {
		return "", err
	}
	err = errors.Join(
		os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600),
		os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600),
	)
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	return dir, err
}
