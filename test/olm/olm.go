package olm

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
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
	// Namespace is OLM's own namespace and its global catalog namespace: CatalogSources
	// there serve every namespace.
	Namespace = "olm"
	// olmModule is the module the olm tool set builds OLM from (hack/tools/olm); its
	// CRDs come from the same module version.
	olmModule = "github.com/operator-framework/operator-lifecycle-manager"
)

// OLM is the Operator Lifecycle Manager running out of cluster: the olm and catalog
// operators and package-server, the same v0.33.0 binaries the tools module builds.
type OLM struct {
	procs []*process.Process
}

// StartOLM installs OLM's CRDs from the OLM module and starts the olm and catalog
// operators and package-server against the cluster, logging to logDir.
//
// utilImage and opmImage are the images bundle unpack Jobs run (the catalog operator's
// --util-image and --opmImage), built locally in place of OLM's published ones.
func StartOLM(ctx context.Context, c *cluster.Cluster, k8s client.Client, dir, logDir, utilImage, opmImage string) (_ *OLM, err error) {
	o := &OLM{}
	defer func() {
		if err != nil {
			o.Stop()
		}
	}()
	if err := installOLMCRDs(ctx, k8s); err != nil {
		return nil, err
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	env := []string{
		// OLM ignores --kubeconfig for some of its clients and reads KUBECONFIG.
		"KUBECONFIG=" + c.Kubeconfig,
		// With CI set, OLM's client panics on objects without its managed label.
		"CI=",
		"OPERATOR_NAMESPACE=" + Namespace,
	}
	// Both bind :8080 for health; the second one's health server fails to start, which
	// each logs and survives. Nothing here probes them.
	if err := o.start("olm", env, logDir, "--namespace", Namespace, "--writeStatusName", ""); err != nil {
		return nil, err
	}
	if err := o.start("catalog", env, logDir, "--namespace", Namespace, "--writeStatusName", "", "--kubeconfig", c.Kubeconfig,
		"--util-image", utilImage, "--opmImage", opmImage); err != nil {
		return nil, err
	}
	ps, err := startPackageServer(ctx, c, k8s, dir, logDir)
	if err != nil {
		return nil, err
	}
	o.procs = append(o.procs, ps)
	return o, nil
}

// start runs one of OLM's operators.
func (o *OLM) start(name string, env []string, logDir string, args ...string) error {
	bin, err := tools.Path(name)
	if err != nil {
		return err
	}
	proc := &process.Process{Name: name, Path: bin, Args: args, Env: env, LogPath: filepath.Join(logDir, name+".log")}
	if err := proc.Start(); err != nil {
		return err
	}
	o.procs = append(o.procs, proc)
	return nil
}

// Healthy returns an error naming the first OLM process that has exited.
func (o *OLM) Healthy() error {
	for _, p := range o.procs {
		if err := p.FailedEarly(); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends every OLM process, newest first.
func (o *OLM) Stop() {
	for i := len(o.procs) - 1; i >= 0; i-- {
		_ = o.procs[i].Stop(15 * time.Second)
	}
}

// olmModuleDir returns the OLM module's directory in the module cache, at the version the
// olm tool set pins.
func olmModuleDir() (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", olmModule)
	cmd.Dir = filepath.Join(root, "hack", "tools", "olm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("find %s in the module cache (run `make tools-olm` first): %w: %s", olmModule, err, stderr.String())
	}
	return dir, nil
}

// installOLMCRDs creates OLM's CRDs as its v0.33.0 chart ships them and waits until they
// are established.
func installOLMCRDs(ctx context.Context, k8s client.Client) error {
	dir, err := olmModuleDir()
	if err != nil {
		return err
	}
	loaded, err := crds.Load(filepath.Join(dir, "deploy", "chart", "crds"))
	if err != nil {
		return fmt.Errorf("OLM's CRDs: %w", err)
	}
	var names []string
	for _, crd := range loaded {
		if err := k8s.Create(ctx, crd); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("create CRD %s: %w", crd.GetName(), err)
		}
		names = append(names, crd.GetName())
	}
	for _, name := range names {
		if err := crds.WaitEstablished(ctx, k8s, name, time.Minute); err != nil {
			return err
		}
	}
	return nil
}
