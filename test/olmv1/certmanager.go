package olmv1

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	// CertManagerNamespace is cert-manager's namespace, where OLM v1's manifest keeps its
	// CA (the olmv1-ca Certificate and the self-signed Issuer behind it) and the
	// namespace of the Secrets its ClusterIssuer reads.
	CertManagerNamespace = "cert-manager"
	certManagerModule    = "github.com/cert-manager/cert-manager"
)

// certManagerCRDs are the cert-manager kinds the controllers the cert-manager tool runs
// act on; the ACME kinds stay out, as its ACME issuer does.
var certManagerCRDs = []string{"certificates", "certificaterequests", "issuers", "clusterissuers"}

// startCertManager creates cert-manager's namespace and CRDs, as its release manifest
// ships them (deploy/crds of the cert-manager module the olmv1 tool set pins), and
// starts the cert-manager tool (hack/tools/olmv1/certmanager): cert-manager's
// controllers and CA injector out of cluster.
func startCertManager(ctx context.Context, c *cluster.Cluster, k8s client.Client, logDir string) (*process.Process, error) {
	dir, err := toolModuleDir(certManagerModule)
	if err != nil {
		return nil, err
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CertManagerNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("create namespace %s: %w", CertManagerNamespace, err)
	}
	var names []string
	for _, kind := range certManagerCRDs {
		data, err := os.ReadFile(filepath.Join(dir, "deploy", "crds", "cert-manager.io_"+kind+".yaml"))
		if err != nil {
			return nil, fmt.Errorf("cert-manager's CRDs: %w", err)
		}
		objs, err := decodeObjects(data)
		if err != nil {
			return nil, fmt.Errorf("cert-manager's %s CRD: %w", kind, err)
		}
		for _, o := range objs {
			if err := k8s.Create(ctx, o); err != nil {
				return nil, fmt.Errorf("create CRD %s: %w", o.GetName(), err)
			}
			names = append(names, o.GetName())
		}
	}
	for _, name := range names {
		if err := crds.WaitEstablished(ctx, k8s, name, time.Minute); err != nil {
			return nil, err
		}
	}
	bin, err := tools.Path("cert-manager")
	if err != nil {
		return nil, err
	}
	p := &process.Process{
		Name:    "cert-manager",
		Path:    bin,
		Args:    []string{"--kubeconfig", c.Kubeconfig, "--cluster-resource-namespace", CertManagerNamespace},
		LogPath: filepath.Join(logDir, "cert-manager.log"),
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}
