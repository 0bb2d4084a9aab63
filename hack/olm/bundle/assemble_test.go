package bundle_test

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

var params = bundle.Params{
	Version:        "1.2.3",
	Image:          "registry.example.com/phalanks/phalanks-operator:v1.2.3",
	ScorecardImage: "registry.example.com/phalanks/phalanks-operator-scorecard-tests:v1.2.3",
}

// treeInputs reads the inputs of the repository's own bundle.
func treeInputs(t *testing.T) *bundle.Inputs {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		t.Fatal(err)
	}
	in, err := bundle.ReadInputs(t.Context(), root, kustomize)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func findObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// withSecondStorageBucketVersion makes sure the inputs' StorageBucket CRD serves v1alpha1
// next to v1beta1 with a conversion stanza, as kustomize deployments carry one: the tree
// has that since conversion landed; before, the fixture added a v1alpha1 copy of the
// v1beta1 version with its own example.
func withSecondStorageBucketVersion(t *testing.T, in *bundle.Inputs) {
	t.Helper()
	u := findObject(in.Manifests, "CustomResourceDefinition", "storagebuckets.phalanks.io")
	if u == nil {
		t.Fatal("no StorageBucket CRD in config/manifests")
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) > 1 {
		if crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy != apiextensionsv1.WebhookConverter {
			t.Fatalf("config/manifests renders the two-version StorageBucket CRD without webhook conversion: %+v", crd.Spec.Conversion)
		}
		return
	}
	old := *crd.Spec.Versions[0].DeepCopy()
	old.Name, old.Storage = "v1alpha1", false
	crd.Spec.Versions = append([]apiextensionsv1.CustomResourceDefinitionVersion{old}, crd.Spec.Versions...)
	path := "/convert"
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig:             &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: "system", Name: "webhook-service", Path: &path}},
			ConversionReviewVersions: []string{"v1"},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		t.Fatal(err)
	}
	u.Object = obj

	hub := schema.GroupVersionKind{Group: "phalanks.io", Version: "v1beta1", Kind: "StorageBucket"}
	spoke := hub
	spoke.Version = "v1alpha1"
	in.Kinds[spoke] = in.Kinds[hub]
	for _, s := range in.Samples {
		if s.GroupVersionKind() == hub {
			older := s.DeepCopy()
			older.SetAPIVersion("phalanks.io/v1alpha1")
			older.SetName(s.GetName() + "-v1alpha1")
			in.Samples = append(in.Samples, older)
			break
		}
	}
}

func TestConversionWebhookForACRDWithTwoVersions(t *testing.T) {
	in := treeInputs(t)
	withSecondStorageBucketVersion(t, in)
	b, err := bundle.Assemble(in, params)
	if err != nil {
		t.Fatal(err)
	}
	defs := b.CSV.Spec.WebhookDefinitions
	if len(defs) != 1 {
		t.Fatalf("want one webhook definition, got %+v", defs)
	}
	d := defs[0]
	switch {
	case d.Type != operatorsv1alpha1.ConversionWebhook:
		t.Errorf("type %s, want ConversionWebhook", d.Type)
	case !slices.Equal(d.ConversionCRDs, []string{"storagebuckets.phalanks.io"}):
		t.Errorf("conversionCRDs %v, want only the two-version CRD", d.ConversionCRDs)
	case d.DeploymentName != "phalanks-controller-manager":
		t.Errorf("deploymentName %q", d.DeploymentName)
	case d.ContainerPort != 9443 || d.TargetPort == nil || d.TargetPort.IntValue() != 9443:
		t.Errorf("containerPort %d targetPort %v, want the manager's webhook-server port 9443", d.ContainerPort, d.TargetPort)
	case d.WebhookPath == nil || *d.WebhookPath != "/convert":
		t.Errorf("webhookPath %v", d.WebhookPath)
	case !slices.Equal(d.AdmissionReviewVersions, []string{"v1"}):
		t.Errorf("review versions %v, want [v1]", d.AdmissionReviewVersions)
	case d.SideEffects == nil || *d.SideEffects != "None":
		t.Errorf("sideEffects %v", d.SideEffects)
	}
	for _, crd := range b.CRDs {
		if _, found, _ := unstructured.NestedMap(crd.Object, "spec", "conversion"); found {
			t.Errorf("bundle CRD %s carries a conversion stanza; OLM writes it", crd.GetName())
		}
	}
	var owned []string
	for _, o := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		owned = append(owned, o.Kind+"/"+o.Version)
	}
	if !slices.Contains(owned, "StorageBucket/v1alpha1") || !slices.Contains(owned, "StorageBucket/v1beta1") {
		t.Errorf("owned CRDs %v, want both StorageBucket versions", owned)
	}

	// The bundle with the webhook passes the same validators as the real one: OLM's
	// rule that conversion webhooks need AllNamespaces only is among them.
	dir := writeBundle(t, b)
	report, err := validate.Bundle(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() {
		t.Errorf("the two-version bundle does not validate cleanly:\nerrors:\n  %s\nwarnings:\n  %s",
			strings.Join(report.Errors, "\n  "), strings.Join(report.Warnings, "\n  "))
	}
}

func TestWebhookDefinitionsNameExactlyTheCRDsWithSeveralVersions(t *testing.T) {
	b, err := bundle.Assemble(treeInputs(t), params)
	if err != nil {
		t.Fatal(err)
	}
	var multi []string
	for _, crd := range b.CRDs {
		if versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions"); len(versions) > 1 {
			multi = append(multi, crd.GetName())
		}
	}
	var converted []string
	for _, d := range b.CSV.Spec.WebhookDefinitions {
		converted = append(converted, d.ConversionCRDs...)
	}
	slices.Sort(multi)
	slices.Sort(converted)
	if !slices.Equal(multi, converted) {
		t.Errorf("conversion webhooks for %v, CRDs with several versions %v", converted, multi)
	}
}

func TestInstallStrategyFromTheGeneratedRBAC(t *testing.T) {
	b, err := bundle.Assemble(treeInputs(t), params)
	if err != nil {
		t.Fatal(err)
	}
	s := b.CSV.Spec.InstallStrategy.StrategySpec
	if len(s.DeploymentSpecs) != 1 || s.DeploymentSpecs[0].Name != "phalanks-controller-manager" {
		t.Fatalf("deployments %+v", s.DeploymentSpecs)
	}
	c := s.DeploymentSpecs[0].Spec.Template.Spec.Containers[0]
	if c.Image != params.Image {
		t.Errorf("manager image %s, want %s", c.Image, params.Image)
	}
	if got := b.CSV.Annotations["containerImage"]; got != params.Image {
		t.Errorf("containerImage %s", got)
	}
	if len(b.CSV.Spec.RelatedImages) != 1 || b.CSV.Spec.RelatedImages[0].Image != params.Image {
		t.Errorf("relatedImages %+v", b.CSV.Spec.RelatedImages)
	}
	hasRule := func(perms []operatorsv1alpha1.StrategyDeploymentPermissions, group, resource string) bool {
		for _, p := range perms {
			if p.ServiceAccountName != "phalanks-controller-manager" {
				continue
			}
			for _, r := range p.Rules {
				if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
					return true
				}
			}
		}
		return false
	}
	if !hasRule(s.ClusterPermissions, "events.k8s.io", "events") {
		t.Errorf("clusterPermissions lack the manager ClusterRole (events.k8s.io events): %+v", s.ClusterPermissions)
	}
	if !hasRule(s.ClusterPermissions, "authentication.k8s.io", "tokenreviews") {
		t.Errorf("clusterPermissions lack the metrics auth ClusterRole: %+v", s.ClusterPermissions)
	}
	if !hasRule(s.Permissions, "coordination.k8s.io", "leases") {
		t.Errorf("permissions lack the leader election Role: %+v", s.Permissions)
	}
	if hasRule(s.Permissions, "events.k8s.io", "events") {
		t.Errorf("the namespaced permissions carry cluster rules: %+v", s.Permissions)
	}
	for _, o := range b.Objects {
		switch {
		case o.GetKind() == "Namespace", o.GetKind() == "ServiceAccount":
			t.Errorf("bundle ships %s %s, which OLM provides", o.GetKind(), o.GetName())
		case strings.HasSuffix(o.GetKind(), "Binding"):
			t.Errorf("bundle ships %s %s; bindings of the operator's account become CSV permissions", o.GetKind(), o.GetName())
		case o.GetKind() == "Service" && o.GetName() == "phalanks-webhook-service":
			t.Errorf("bundle ships the webhook Service; OLM creates its own for webhookdefinitions")
		case o.GetNamespace() != "":
			t.Errorf("%s %s keeps namespace %s; OLM installs into its own", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	if findObject(b.Objects, "ClusterRole", "phalanks-storagebucket-editor-role") == nil {
		t.Error("the aggregated editor role for users is missing from the bundle")
	}
	if findObject(b.Objects, "Service", "phalanks-controller-manager-metrics-service") == nil {
		t.Error("the metrics Service is missing from the bundle")
	}
}

func TestAlmExamplesNeedEveryServedVersion(t *testing.T) {
	in := treeInputs(t)
	withSecondStorageBucketVersion(t, in)
	var kept []*unstructured.Unstructured
	for _, s := range in.Samples {
		if s.GetAPIVersion() != "phalanks.io/v1alpha1" || s.GetKind() != "StorageBucket" {
			kept = append(kept, s)
		}
	}
	in.Samples = kept
	_, err := bundle.Assemble(in, params)
	if err == nil || !strings.Contains(err.Error(), "phalanks.io/v1alpha1, Kind=StorageBucket") {
		t.Fatalf("err = %v, want a missing v1alpha1 StorageBucket example", err)
	}
}

func TestSamplesOfOtherKindsStayOutOfTheBundle(t *testing.T) {
	in := treeInputs(t)
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": "storagebucket-sample-credentials"},
		"stringData": map[string]any{"AWS_SECRET_ACCESS_KEY": "demo-secret-value-7f3a"},
	}}
	in.Samples = append(in.Samples, secret)
	b, err := bundle.Assemble(in, params)
	if err != nil {
		t.Fatal(err)
	}
	examples := b.CSV.Annotations["alm-examples"]
	if findObject(b.Objects, "Secret", secret.GetName()) != nil || strings.Contains(examples, "demo-secret-value-7f3a") || strings.Contains(examples, secret.GetName()) {
		t.Error("a demo Secret from config/samples reached the bundle")
	}
}

// TestCertManagerPiecesAreLeftToOLM: whatever config/certmanager adds for cert-manager (the
// Issuer and Certificate, the CA injection annotation, the Deployment volume of the
// certificate's Secret and its mount) stays out of the bundle, and the generator says so.
func TestCertManagerPiecesAreLeftToOLM(t *testing.T) {
	in := treeInputs(t)
	// Beyond what the tree has: a second certificate mounted into the manager.
	in.Manifests = append(in.Manifests, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "extra-cert", "namespace": "phalanks-system"},
		"spec":     map[string]any{"secretName": "extra-cert-secret"},
	}})
	dep := findObject(in.Manifests, "Deployment", "phalanks-controller-manager")
	pod := dep.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	volumes, _ := pod["volumes"].([]any)
	pod["volumes"] = append(volumes,
		map[string]any{"name": "extra", "secret": map[string]any{"secretName": "extra-cert-secret"}},
		map[string]any{"name": "scratch", "emptyDir": map[string]any{}})
	container := pod["containers"].([]any)[0].(map[string]any)
	mounts, _ := container["volumeMounts"].([]any)
	container["volumeMounts"] = append(mounts,
		map[string]any{"name": "extra", "mountPath": "/extra"},
		map[string]any{"name": "scratch", "mountPath": "/scratch"})

	b, err := bundle.Assemble(in, params)
	if err != nil {
		t.Fatal(err)
	}
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if strings.Contains(strings.ToLower(string(data)), "cert-manager") {
			t.Errorf("%s mentions cert-manager", name)
		}
	}
	podSpec := b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec
	if len(podSpec.Volumes) != 1 || podSpec.Volumes[0].Name != "scratch" {
		t.Errorf("volumes %+v, want only the scratch volume", podSpec.Volumes)
	}
	if m := podSpec.Containers[0].VolumeMounts; len(m) != 1 || m[0].Name != "scratch" {
		t.Errorf("mounts %+v, want only the scratch mount", m)
	}
	report := strings.Join(b.LeftOut, "\n")
	for _, want := range []string{"Certificate extra-cert", "volume extra of Deployment"} {
		if !strings.Contains(report, want) {
			t.Errorf("the generator's report does not mention %q:\n%s", want, report)
		}
	}
}

func writeBundle(t *testing.T, b *bundle.Bundle) string {
	t.Helper()
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := bundle.Write(root, files); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, bundle.Dir)
}

// TestPlatformLabelsFollowTheManagerNodeAffinity: the CSV declares exactly the
// architectures and operating systems the manager Deployment's node affinity allows, and
// a Deployment without such an affinity is refused.
func TestPlatformLabelsFollowTheManagerNodeAffinity(t *testing.T) {
	in := treeInputs(t)
	b, err := bundle.Assemble(in, params)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, v := range b.CSV.Labels {
		if strings.HasPrefix(k, "operatorframework.io/") {
			got[k] = v
		}
	}
	want := map[string]string{
		"operatorframework.io/arch.amd64": "supported",
		"operatorframework.io/arch.arm64": "supported",
		"operatorframework.io/os.linux":   "supported",
	}
	if !maps.Equal(got, want) {
		t.Errorf("CSV platform labels %v, want %v", got, want)
	}

	d := findObject(in.Manifests, "Deployment", "phalanks-controller-manager")
	if d == nil {
		t.Fatal("no manager Deployment in the inputs")
	}
	unstructured.RemoveNestedField(d.Object, "spec", "template", "spec", "affinity")
	if _, err := bundle.Assemble(in, params); err == nil || !strings.Contains(err.Error(), "node affinity") {
		t.Errorf("a manager Deployment without node affinity: err = %v", err)
	}
}
