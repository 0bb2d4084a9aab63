package olmv1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/images"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	// Namespace is OLM v1's namespace.
	Namespace = "olmv1-system"
	// Version is the operator-controller release the olmv1 tool set builds.
	Version = "v1.11.0"
	// module is operator-controller's Go module; its manifests/standard.yaml is what
	// upstream's release manifest is made from.
	module = "github.com/operator-framework/operator-controller"

	// registriesConf is the ConfigMap with the containers registries.conf both OLM v1
	// Deployments read from /etc/containers (see registriesConfFor).
	registriesConf = "olmv1-registries-conf"

	// FieldOwner owns what the suite applies.
	FieldOwner = "phalanks-olmv1-e2e"
)

// The Deployments of OLM v1's manifest, by the component they run.
var deployments = map[string]string{
	"catalogd":            "catalogd-controller-manager",
	"operator-controller": "operator-controller-controller-manager",
}

// OLMv1 is OLM v1 running on the cluster, and cert-manager beside it.
type OLMv1 struct {
	certManager *process.Process
}

// Install starts cert-manager and installs OLM v1 from its standard manifest, with images
// of the olmv1 tool set's binaries pushed to the node's registry under the names the
// manifest gives them (quay.io/operator-framework/…, which the node mirrors). It returns
// once both Deployments are Available. Pulls that catalogd and operator-controller make
// themselves (catalog and bundle images under mirrored) go to the node's registry too,
// through registries.conf.
func Install(ctx context.Context, c *cluster.Cluster, k8s client.Client, dir, logDir string, mirrored []string) (_ *OLMv1, err error) {
	o := &OLMv1{}
	defer func() {
		if err != nil {
			o.Stop()
		}
	}()
	if o.certManager, err = startCertManager(ctx, c, k8s, logDir); err != nil {
		return nil, err
	}
	for _, component := range []struct {
		name string
		bin  func() (string, error)
	}{
		{"catalogd", func() (string, error) { return tools.Path("catalogd") }},
		{"operator-controller", func() (string, error) { return tools.Path("operator-controller") }},
	} {
		bin, err := component.bin()
		if err != nil {
			return nil, err
		}
		img, err := componentImage(component.name, bin)
		if err != nil {
			return nil, err
		}
		if _, err := c.Push(ctx, "operator-framework/"+component.name+":"+Version, img); err != nil {
			return nil, err
		}
	}
	// The manifest schedules OLM v1 on control-plane nodes, as kind's single node is.
	if err := labelControlPlane(ctx, k8s); err != nil {
		return nil, err
	}
	objs, err := Manifest()
	if err != nil {
		return nil, err
	}
	objs = append(objs, registriesConfFor(mirrored))
	if err := apply(ctx, k8s, objs); err != nil {
		return nil, err
	}
	for _, name := range deployments {
		if err := waitAvailable(ctx, k8s, name, 5*time.Minute, o.Healthy); err != nil {
			return nil, err
		}
	}
	// kube-apiserver calls catalogd's webhook for every ClusterCatalog once cert-manager's
	// CA injector has given the webhook configuration OLM v1's CA.
	if err := waitCAInjected(ctx, k8s, catalogdWebhook, time.Minute, o.Healthy); err != nil {
		return nil, err
	}
	return o, nil
}

// catalogdWebhook is catalogd's MutatingWebhookConfiguration.
const catalogdWebhook = "catalogd-mutating-webhook-configuration"

// waitCAInjected waits until every webhook of the MutatingWebhookConfiguration has a CA
// bundle, or until healthy reports an error.
func waitCAInjected(ctx context.Context, k8s client.Client, name string, timeout time.Duration, healthy func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		wh := &admissionregistrationv1.MutatingWebhookConfiguration{}
		err := k8s.Get(ctx, client.ObjectKey{Name: name}, wh)
		if err == nil && len(wh.Webhooks) > 0 && !slices.ContainsFunc(wh.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool {
			return len(w.ClientConfig.CABundle) == 0
		}) {
			return nil
		}
		if herr := healthy(); herr != nil {
			return herr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cert-manager's CA injector did not give MutatingWebhookConfiguration %s a CA within %s (last error: %w)", name, timeout, err)
		case <-time.After(time.Second):
		}
	}
}

// Healthy returns an error when cert-manager has exited.
func (o *OLMv1) Healthy() error {
	if o.certManager == nil {
		return nil
	}
	return o.certManager.FailedEarly()
}

// Stop ends cert-manager (OLM v1 goes with the cluster).
func (o *OLMv1) Stop() {
	if o.certManager != nil {
		_ = o.certManager.Stop(15 * time.Second)
	}
}

// Manifest returns the objects of OLM v1's standard manifest as its release publishes it:
// manifests/standard.yaml of the pinned module, its images tagged with the release
// (upstream's release build replaces the development tag the same way), and both
// Deployments reading registries.conf from the ConfigMap registriesConf, as upstream's
// standard-e2e manifest has operator-controller do.
func Manifest() ([]*unstructured.Unstructured, error) {
	dir, err := toolModuleDir(module)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifests", "standard.yaml"))
	if err != nil {
		return nil, err
	}
	data = bytes.ReplaceAll(data, []byte("quay.io/operator-framework/catalogd:devel"), []byte("quay.io/operator-framework/catalogd:"+Version))
	data = bytes.ReplaceAll(data, []byte("quay.io/operator-framework/operator-controller:devel"), []byte("quay.io/operator-framework/operator-controller:"+Version))
	objs, err := decodeObjects(data)
	if err != nil {
		return nil, fmt.Errorf("%s manifests/standard.yaml: %w", module, err)
	}
	found := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetNamespace() != Namespace {
			continue
		}
		if err := mountRegistriesConf(o); err != nil {
			return nil, err
		}
		found++
	}
	if found != len(deployments) {
		return nil, fmt.Errorf("%s manifests/standard.yaml has %d Deployments in %s, want %d", module, found, Namespace, len(deployments))
	}
	return objs, nil
}

// mountRegistriesConf mounts the ConfigMap registriesConf at /etc/containers in the
// Deployment's manager container.
func mountRegistriesConf(u *unstructured.Unstructured) error {
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
		return fmt.Errorf("deployment %s: %w", u.GetName(), err)
	}
	spec := &d.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: registriesConf, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: registriesConf}},
	}})
	mounted := false
	for i := range spec.Containers {
		if spec.Containers[i].Name == "manager" {
			spec.Containers[i].VolumeMounts = append(spec.Containers[i].VolumeMounts,
				corev1.VolumeMount{Name: registriesConf, MountPath: "/etc/containers", ReadOnly: true})
			mounted = true
		}
	}
	if !mounted {
		return fmt.Errorf("deployment %s has no manager container", u.GetName())
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		return err
	}
	u.Object = out
	return nil
}

// registriesConfFor is the registries.conf that sends catalogd's and operator-controller's
// pulls from each mirrored registry (catalog and bundle images) to the node's registry
// over plain HTTP, as containerd's hosts.toml does the node's own pulls.
func registriesConfFor(mirrored []string) *unstructured.Unstructured {
	var b strings.Builder
	for _, m := range mirrored {
		fmt.Fprintf(&b, "[[registry]]\nprefix = %q\nlocation = %q\ninsecure = true\n\n", m, cluster.PodRegistryHost)
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: registriesConf, Namespace: Namespace},
		Data:       map[string]string{"registries.conf": b.String()},
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
	if err != nil {
		panic(err) // a ConfigMap always converts
	}
	return &unstructured.Unstructured{Object: out}
}

// componentImage is the image of one OLM v1 binary, bin, as upstream's Dockerfiles build
// it (Dockerfile.catalogd, Dockerfile.operator-controller): the binary at /<name>, run as
// the nonroot user 65532 from /, on the project's base files (passwd and group naming
// that user) and a /tmp.
func componentImage(name, bin string) (imagebuild.Artifact, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	base, err := imagebuild.HostTree("/", filepath.Join(root, "hack", "olm", "images", "rootfs"))
	if err != nil {
		return nil, err
	}
	base = append(base, imagebuild.Dir("/tmp", 0o777|fs.ModeSticky))
	return imagebuild.Image(imagebuild.Config{
		Platform:   images.Platform(),
		Entrypoint: []string{"/" + name},
		User:       "65532:65532",
		WorkingDir: "/",
		Labels:     map[string]string{"org.opencontainers.image.version": Version},
	}, base, []imagebuild.Entry{imagebuild.HostFile("/"+name, bin, 0o755)})
}

// labelControlPlane gives the real node the control-plane role label.
func labelControlPlane(ctx context.Context, k8s client.Client) error {
	node := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: cluster.NodeName}, node); err != nil {
		return err
	}
	patch := client.MergeFrom(node.DeepCopy())
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels["node-role.kubernetes.io/control-plane"] = ""
	return k8s.Patch(ctx, node, patch)
}

// apply applies objs server-side: namespaces first, then CRDs (waiting until they are
// established), then the rest in manifest order.
func apply(ctx context.Context, k8s client.Client, objs []*unstructured.Unstructured) error {
	rank := func(o *unstructured.Unstructured) int {
		switch o.GetKind() {
		case "Namespace":
			return 0
		case "CustomResourceDefinition":
			return 1
		}
		return 2
	}
	for pass := range 3 {
		for _, o := range objs {
			if rank(o) != pass {
				continue
			}
			if err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
				return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
			if o.GetKind() == "CustomResourceDefinition" {
				if err := crds.WaitEstablished(ctx, k8s, o.GetName(), time.Minute); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// waitAvailable waits until the Deployment in OLM v1's namespace is Available with its
// current template, or until healthy reports an error.
func waitAvailable(ctx context.Context, k8s client.Client, name string, timeout time.Duration, healthy func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := &appsv1.Deployment{}
	for {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, d)
		if err == nil && d.Status.ObservedGeneration == d.Generation && d.Spec.Replicas != nil &&
			d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.AvailableReplicas == *d.Spec.Replicas {
			return nil
		}
		if herr := healthy(); herr != nil {
			return herr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment %s/%s not Available within %s: status %+v (last error: %w)", Namespace, name, timeout, d.Status, err)
		case <-time.After(time.Second):
		}
	}
}

// toolModuleDir returns a module's directory in the module cache, at the version the
// olmv1 tool set (hack/tools/olmv1) pins.
func toolModuleDir(mod string) (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod)
	cmd.Dir = filepath.Join(root, "hack", "tools", "olmv1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("find %s in the module cache (run `make tools-olmv1` first): %w: %s", mod, err, stderr.String())
	}
	return dir, nil
}

// decodeObjects decodes a YAML stream of Kubernetes objects, skipping empty documents.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
