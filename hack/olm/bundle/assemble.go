package bundle

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	// PackageName is the OLM package this operator ships in.
	PackageName = "phalanks-operator"
	// Channel is the only channel, and the default one.
	Channel = "stable"

	// ManagerContainer is the container in the manager Deployment whose image --image sets.
	ManagerContainer = "manager"
	// WebhookPortName names the manager container port that serves webhooks.
	WebhookPortName = "webhook-server"
	// ConversionPath is where the manager's webhook server serves CRD conversion.
	ConversionPath = "/convert"
	// CustomTestsImagePlaceholder stands for the custom scorecard test image in
	// config/scorecard; Params.ScorecardImage replaces it.
	CustomTestsImagePlaceholder = "custom-scorecard-tests"
)

// Params are the release-specific values of a bundle.
type Params struct {
	// Version is the operator version, semver without a leading v.
	Version string
	// Image is the manager image; empty keeps what config/manager sets.
	Image string
	// ScorecardImage is the custom scorecard test image.
	ScorecardImage string
}

// Bundle is a generated bundle.
type Bundle struct {
	CSV *operatorsv1alpha1.ClusterServiceVersion
	// CRDs are the owned CRDs as the bundle ships them, without conversion stanza.
	CRDs []*unstructured.Unstructured
	// Objects are the other manifests OLM applies with the operator (Services,
	// ClusterRoles for users, …).
	Objects []*unstructured.Unstructured
	// Scorecard is the scorecard Configuration.
	Scorecard *unstructured.Unstructured
	// LeftOut describes the cert-manager pieces of config/manifests the bundle leaves to
	// OLM.
	LeftOut []string
}

// Assemble builds the bundle from its inputs. It fails on anything it cannot place (a
// second CSV, an owned version without example) rather than guess.
func Assemble(in *Inputs, p Params) (*Bundle, error) {
	v, err := semver.Parse(p.Version)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", p.Version, err)
	}
	objs, leftOut, err := leaveCertManagerToOLM(in.Manifests)
	if err != nil {
		return nil, err
	}
	m, err := classify(objs)
	if err != nil {
		return nil, err
	}
	csv := m.csv
	csv.Name = fmt.Sprintf("%s.v%s", PackageName, v)
	csv.Namespace = ""
	csv.Spec.Version = version.OperatorVersion{Version: v}
	csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(in.Icon), MediaType: "image/svg+xml"}}
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}

	if err := m.setManagerImage(p.Image); err != nil {
		return nil, err
	}
	strategy, err := m.installStrategy()
	if err != nil {
		return nil, err
	}
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{
		StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
		StrategySpec: strategy,
	}
	csv.Spec.RelatedImages, csv.Annotations["containerImage"] = relatedImages(m.deployments)
	labels, err := platformLabels(m.deployments)
	if err != nil {
		return nil, err
	}
	for k, v := range labels {
		if csv.Labels == nil {
			csv.Labels = map[string]string{}
		}
		csv.Labels[k] = v
	}

	owned, err := ownedCRDs(m.crds, in.Kinds)
	if err != nil {
		return nil, err
	}
	csv.Spec.CustomResourceDefinitions.Owned = owned
	examples, err := almExamples(m.crds, in.Samples)
	if err != nil {
		return nil, err
	}
	csv.Annotations[ALMExamplesAnnotation] = examples
	csv.Spec.WebhookDefinitions, err = conversionWebhooks(m.crds, m.deployments)
	if err != nil {
		return nil, err
	}

	scorecard, err := scorecardConfig(in.Scorecard, p.ScorecardImage)
	if err != nil {
		return nil, err
	}
	b := &Bundle{CSV: csv, Scorecard: scorecard, Objects: m.others, LeftOut: leftOut}
	for _, crd := range m.crds {
		u, err := toUnstructured(crd)
		if err != nil {
			return nil, err
		}
		b.CRDs = append(b.CRDs, u)
	}
	return b, nil
}

// manifests is config/manifests sorted by what the bundle does with each object.
type manifests struct {
	csv          *operatorsv1alpha1.ClusterServiceVersion
	crds         []*apiextensionsv1.CustomResourceDefinition
	deployments  []*appsv1.Deployment
	roles        map[string][]rbacv1.PolicyRule // "Role/name" or "ClusterRole/name"
	bindings     []binding
	services     []*corev1.Service
	others       []*unstructured.Unstructured
	serviceAccts map[string]bool
}

type binding struct {
	namespaced bool
	roleRef    string // "Role/name" or "ClusterRole/name"
	subjects   []rbacv1.Subject
	obj        *unstructured.Unstructured
}

func classify(objs []*unstructured.Unstructured) (*manifests, error) {
	m := &manifests{roles: map[string][]rbacv1.PolicyRule{}, serviceAccts: map[string]bool{}}
	var roleObjs []*unstructured.Unstructured
	var serviceObjs []*unstructured.Unstructured
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		switch gvk.GroupKind() {
		case schema.GroupKind{Group: "operators.coreos.com", Kind: "ClusterServiceVersion"}:
			if m.csv != nil {
				return nil, fmt.Errorf("config/manifests renders more than one ClusterServiceVersion")
			}
			m.csv = &operatorsv1alpha1.ClusterServiceVersion{}
			if err := fromUnstructured(u, m.csv); err != nil {
				return nil, err
			}
		case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := fromUnstructured(u, crd); err != nil {
				return nil, err
			}
			m.crds = append(m.crds, cleanCRD(crd))
		case schema.GroupKind{Group: "apps", Kind: "Deployment"}:
			d := &appsv1.Deployment{}
			if err := fromUnstructured(u, d); err != nil {
				return nil, err
			}
			m.deployments = append(m.deployments, d)
		case schema.GroupKind{Kind: "Namespace"}:
			// OLM installs into the namespace of the OperatorGroup.
		case schema.GroupKind{Kind: "ServiceAccount"}:
			// Recorded so that an SA no Deployment uses is still shipped.
			m.serviceAccts[u.GetName()] = true
			roleObjs = append(roleObjs, u)
		case schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"},
			schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:
			var rules struct {
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			if err := runtimeConvert(u.Object, &rules); err != nil {
				return nil, err
			}
			m.roles[gvk.Kind+"/"+u.GetName()] = rules.Rules
			roleObjs = append(roleObjs, u)
		case schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"},
			schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:
			var rb rbacv1.RoleBinding // same shape as a ClusterRoleBinding
			if err := runtimeConvert(u.Object, &rb); err != nil {
				return nil, err
			}
			m.bindings = append(m.bindings, binding{
				namespaced: gvk.Kind == "RoleBinding",
				roleRef:    rb.RoleRef.Kind + "/" + rb.RoleRef.Name,
				subjects:   rb.Subjects,
				obj:        u,
			})
		case schema.GroupKind{Kind: "Service"}:
			svc := &corev1.Service{}
			if err := fromUnstructured(u, svc); err != nil {
				return nil, err
			}
			m.services = append(m.services, svc)
			serviceObjs = append(serviceObjs, u)
		default:
			m.others = append(m.others, clean(u))
		}
	}
	if m.csv == nil {
		return nil, fmt.Errorf("config/manifests renders no ClusterServiceVersion base")
	}
	if len(m.deployments) == 0 {
		return nil, fmt.Errorf("config/manifests renders no Deployment")
	}
	m.keepUnboundRBAC(roleObjs)
	m.keepNonWebhookServices(serviceObjs)
	return m, nil
}

// operatorSAs are the service accounts the Deployments run as.
func (m *manifests) operatorSAs() map[string]bool {
	sas := map[string]bool{}
	for _, d := range m.deployments {
		sa := d.Spec.Template.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		sas[sa] = true
	}
	return sas
}

func bindsAny(b binding, sas map[string]bool) bool {
	for _, s := range b.subjects {
		if s.Kind == rbacv1.ServiceAccountKind && sas[s.Name] {
			return true
		}
	}
	return false
}

// keepUnboundRBAC ships the RBAC objects that are not about the operator's own service
// accounts (e.g. the aggregated editor and viewer roles for users); the rest becomes the
// CSV's permissions.
func (m *manifests) keepUnboundRBAC(objs []*unstructured.Unstructured) {
	sas := m.operatorSAs()
	consumed := map[string]bool{}
	for _, b := range m.bindings {
		if bindsAny(b, sas) {
			consumed[b.roleRef] = true
		} else {
			m.others = append(m.others, clean(b.obj))
		}
	}
	for _, u := range objs {
		key := u.GetKind() + "/" + u.GetName()
		if u.GetKind() == "ServiceAccount" {
			if !sas[u.GetName()] {
				m.others = append(m.others, clean(u))
			}
			continue
		}
		if !consumed[key] {
			m.others = append(m.others, clean(u))
		}
	}
}

// keepNonWebhookServices ships every Service except the one in front of the webhook
// port: OLM creates its own Service for each webhookdefinition.
func (m *manifests) keepNonWebhookServices(objs []*unstructured.Unstructured) {
	for i, svc := range m.services {
		if !m.servesWebhook(svc) {
			m.others = append(m.others, clean(objs[i]))
		}
	}
}

func (m *manifests) servesWebhook(svc *corev1.Service) bool {
	for _, d := range m.deployments {
		if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		port, ok := webhookPort(d)
		if !ok {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if sp.TargetPort.String() == WebhookPortName || sp.TargetPort.IntValue() == int(port) {
				return true
			}
		}
	}
	return false
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// webhookPort returns the container port named WebhookPortName of a Deployment.
func webhookPort(d *appsv1.Deployment) (int32, bool) {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == WebhookPortName {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

func (m *manifests) setManagerImage(image string) error {
	if image == "" {
		return nil
	}
	for _, d := range m.deployments {
		for i := range d.Spec.Template.Spec.Containers {
			if d.Spec.Template.Spec.Containers[i].Name == ManagerContainer {
				d.Spec.Template.Spec.Containers[i].Image = image
				return nil
			}
		}
	}
	return fmt.Errorf("no Deployment has a container named %q to run %s", ManagerContainer, image)
}

func (m *manifests) installStrategy() (operatorsv1alpha1.StrategyDetailsDeployment, error) {
	var s operatorsv1alpha1.StrategyDetailsDeployment
	for _, d := range m.deployments {
		s.DeploymentSpecs = append(s.DeploymentSpecs, operatorsv1alpha1.StrategyDeploymentSpec{
			Name:  d.Name,
			Spec:  d.Spec,
			Label: d.Labels,
		})
	}
	perms := map[string][]rbacv1.PolicyRule{}
	clusterPerms := map[string][]rbacv1.PolicyRule{}
	sas := m.operatorSAs()
	for _, b := range m.bindings {
		rules, ok := m.roles[b.roleRef]
		if !ok {
			if bindsAny(b, sas) {
				return s, fmt.Errorf("a binding for the operator's service account refers to %s, which config/manifests does not render", b.roleRef)
			}
			continue
		}
		target := clusterPerms
		if b.namespaced {
			target = perms
		}
		for _, subj := range b.subjects {
			if subj.Kind == rbacv1.ServiceAccountKind && sas[subj.Name] {
				target[subj.Name] = append(target[subj.Name], rules...)
			}
		}
	}
	s.Permissions = permissionList(perms)
	s.ClusterPermissions = permissionList(clusterPerms)
	return s, nil
}

func permissionList(bySA map[string][]rbacv1.PolicyRule) []operatorsv1alpha1.StrategyDeploymentPermissions {
	var out []operatorsv1alpha1.StrategyDeploymentPermissions
	for sa, rules := range bySA {
		out = append(out, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: rules})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ServiceAccountName < out[j].ServiceAccountName })
	return out
}

// Platform labels tell OLM and OperatorHub which nodes the operator runs on
// (operatorframework.io/arch.<arch>, os.<os>: supported); operator-sdk's multiarch
// validator wants them to match the images and the Deployments' node affinity.
const (
	archLabelPrefix = "operatorframework.io/arch."
	osLabelPrefix   = "operatorframework.io/os."
)

// platformLabels derives the CSV's platform labels from the node affinity of the manager
// Deployments: every architecture and operating system their required node selector
// terms allow (kubernetes.io/arch, kubernetes.io/os In […]). config/manager states the
// platforms the manager image is built for there, so the labels, the affinity and the
// image cannot disagree. A Deployment without such terms is an error: it would be
// scheduled on nodes its image may not run on.
func platformLabels(deps []*appsv1.Deployment) (map[string]string, error) {
	labels := map[string]string{}
	for _, d := range deps {
		found := map[string]bool{}
		aff := d.Spec.Template.Spec.Affinity
		if aff != nil && aff.NodeAffinity != nil && aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			for _, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				for _, e := range term.MatchExpressions {
					prefix := map[string]string{"kubernetes.io/arch": archLabelPrefix, "kubernetes.io/os": osLabelPrefix}[e.Key]
					if prefix == "" || e.Operator != corev1.NodeSelectorOpIn {
						continue
					}
					found[e.Key] = true
					for _, v := range e.Values {
						labels[prefix+v] = "supported"
					}
				}
			}
		}
		if !found["kubernetes.io/arch"] || !found["kubernetes.io/os"] {
			return nil, fmt.Errorf("deployment %s: its pod template needs a required node affinity on kubernetes.io/arch and kubernetes.io/os (In the image's platforms)", d.Name)
		}
	}
	return labels, nil
}

// relatedImages lists every container image of the Deployments, and returns the manager
// image for the containerImage annotation.
func relatedImages(deps []*appsv1.Deployment) ([]operatorsv1alpha1.RelatedImage, string) {
	var out []operatorsv1alpha1.RelatedImage
	var manager string
	seen := map[string]bool{}
	for _, d := range deps {
		for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
			if c.Name == ManagerContainer && manager == "" {
				manager = c.Image
			}
			if !seen[c.Image] {
				seen[c.Image] = true
				out = append(out, operatorsv1alpha1.RelatedImage{Name: c.Name, Image: c.Image})
			}
		}
	}
	return out, manager
}

// ownedCRDs describes each version of each CRD from its Go type.
func ownedCRDs(crds []*apiextensionsv1.CustomResourceDefinition, kinds map[schema.GroupVersionKind]KindDescription) ([]operatorsv1alpha1.CRDDescription, error) {
	var out []operatorsv1alpha1.CRDDescription
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			k, ok := kinds[gvk]
			if !ok {
				return nil, fmt.Errorf("CRD %s serves %s, but api/ has no Go type for it", crd.Name, gvk)
			}
			out = append(out, operatorsv1alpha1.CRDDescription{
				Name:              crd.Name,
				Version:           v.Name,
				Kind:              gvk.Kind,
				DisplayName:       k.DisplayName,
				Description:       k.Description,
				Resources:         k.Resources,
				SpecDescriptors:   k.SpecDescriptors,
				StatusDescriptors: k.StatusDescriptors,
			})
		}
	}
	return out, nil
}

// almExamples returns the samples of owned kinds as the alm-examples JSON, ordered like
// the owned CRDs, and requires one for every served version.
func almExamples(crds []*apiextensionsv1.CustomResourceDefinition, samples []*unstructured.Unstructured) (string, error) {
	var examples []map[string]any
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			var found []*unstructured.Unstructured
			for _, s := range samples {
				if s.GroupVersionKind() == gvk {
					found = append(found, s)
				}
			}
			if len(found) == 0 && v.Served {
				return "", fmt.Errorf("config/samples has no %s: every served version of an owned CRD needs an example (alm-examples)", gvk)
			}
			sort.Slice(found, func(i, j int) bool { return found[i].GetName() < found[j].GetName() })
			for _, s := range found {
				examples = append(examples, clean(s).Object)
			}
		}
	}
	data, err := json.MarshalIndent(examples, "", "  ")
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// conversionWebhooks declares the conversion webhook of every CRD with more than one
// version, served by the Deployment that exposes the webhook port. OLM issues the
// certificate, creates the Service and writes each CRD's conversion stanza.
func conversionWebhooks(crds []*apiextensionsv1.CustomResourceDefinition, deps []*appsv1.Deployment) ([]operatorsv1alpha1.WebhookDescription, error) {
	var names, plurals []string
	for _, crd := range crds {
		if len(crd.Spec.Versions) > 1 {
			names = append(names, crd.Name)
			plurals = append(plurals, crd.Spec.Names.Plural)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	for _, d := range deps {
		port, ok := webhookPort(d)
		if !ok {
			continue
		}
		target := intstr.FromInt32(port)
		path := ConversionPath
		sideEffects := admissionregistrationv1.SideEffectClassNone
		return []operatorsv1alpha1.WebhookDescription{{
			GenerateName:   "c" + strings.Join(plurals, "") + "." + crds[0].Spec.Group,
			Type:           operatorsv1alpha1.ConversionWebhook,
			DeploymentName: d.Name,
			ContainerPort:  port,
			TargetPort:     &target,
			WebhookPath:    &path,
			ConversionCRDs: names,
			SideEffects:    &sideEffects,
			// OLM uses these as the CRDs' conversionReviewVersions.
			AdmissionReviewVersions: []string{"v1"},
		}}, nil
	}
	return nil, fmt.Errorf("CRDs %v have several versions but no Deployment has a container port named %q for the conversion webhook", names, WebhookPortName)
}

// scorecardConfig returns the one scorecard Configuration with the custom test image set.
func scorecardConfig(objs []*unstructured.Unstructured, image string) (*unstructured.Unstructured, error) {
	if len(objs) != 1 || objs[0].GetKind() != "Configuration" {
		return nil, fmt.Errorf("config/scorecard must render exactly one scorecard Configuration, got %d objects", len(objs))
	}
	cfg := objs[0].DeepCopy()
	stages, _, err := unstructured.NestedSlice(cfg.Object, "stages")
	if err != nil {
		return nil, fmt.Errorf("scorecard configuration: %w", err)
	}
	for _, st := range stages {
		tests, _ := st.(map[string]any)["tests"].([]any)
		for _, t := range tests {
			test, _ := t.(map[string]any)
			if test["image"] == CustomTestsImagePlaceholder {
				if image == "" {
					return nil, fmt.Errorf("config/scorecard uses %s: set the custom scorecard test image", CustomTestsImagePlaceholder)
				}
				test["image"] = image
			}
		}
	}
	if err := unstructured.SetNestedSlice(cfg.Object, stages, "stages"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// leaveCertManagerToOLM removes what config/certmanager adds for cert-manager, derived from
// the objects themselves: cert-manager objects, cert-manager annotations (CA injection),
// and the Deployment volumes (and their mounts) of the Secrets cert-manager Certificates
// write. Under OLM, OLM issues the webhook certificate and mounts it where the manager
// reads it by default, and writes the CRDs' conversion stanza with its CA. It returns the
// remaining objects and a line for each thing it left out.
func leaveCertManagerToOLM(objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
	var kept []*unstructured.Unstructured
	var leftOut []string
	certSecrets := map[string]bool{}
	for _, u := range objs {
		if !isCertManager(u.GroupVersionKind().Group) {
			kept = append(kept, u)
			continue
		}
		leftOut = append(leftOut, fmt.Sprintf("%s %s (cert-manager)", u.GetKind(), u.GetName()))
		if u.GetKind() == "Certificate" {
			if name, _, _ := unstructured.NestedString(u.Object, "spec", "secretName"); name != "" {
				certSecrets[name] = true
			}
		}
	}
	for i, u := range kept {
		u = u.DeepCopy()
		annotations := u.GetAnnotations()
		for k := range annotations {
			if isCertManager(k[:max(strings.Index(k, "/"), 0)]) {
				delete(annotations, k)
				leftOut = append(leftOut, fmt.Sprintf("annotation %s on %s %s", k, u.GetKind(), u.GetName()))
			}
		}
		if len(annotations) == 0 {
			annotations = nil
		}
		u.SetAnnotations(annotations)
		if u.GroupVersionKind().GroupKind() == (schema.GroupKind{Group: "apps", Kind: "Deployment"}) && len(certSecrets) > 0 {
			removed, err := dropSecretVolumes(u, certSecrets)
			if err != nil {
				return nil, nil, err
			}
			for _, v := range removed {
				leftOut = append(leftOut, fmt.Sprintf("volume %s of Deployment %s (the cert-manager certificate)", v, u.GetName()))
			}
		}
		kept[i] = u
	}
	return kept, leftOut, nil
}

func isCertManager(group string) bool {
	return group == "cert-manager.io" || strings.HasSuffix(group, ".cert-manager.io")
}

// dropSecretVolumes removes a Deployment's volumes of the given Secrets and every mount of
// them, and returns the names of the volumes removed.
func dropSecretVolumes(u *unstructured.Unstructured, secrets map[string]bool) ([]string, error) {
	d := &appsv1.Deployment{}
	if err := fromUnstructured(u, d); err != nil {
		return nil, err
	}
	pod := &d.Spec.Template.Spec
	removed := map[string]bool{}
	var volumes []corev1.Volume
	for _, v := range pod.Volumes {
		if v.Secret != nil && secrets[v.Secret.SecretName] {
			removed[v.Name] = true
			continue
		}
		volumes = append(volumes, v)
	}
	if len(removed) == 0 {
		return nil, nil
	}
	pod.Volumes = volumes
	for _, containers := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range containers {
			var mounts []corev1.VolumeMount
			for _, m := range containers[i].VolumeMounts {
				if !removed[m.Name] {
					mounts = append(mounts, m)
				}
			}
			containers[i].VolumeMounts = mounts
		}
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		return nil, err
	}
	u.Object = out
	names := make([]string, 0, len(removed))
	for n := range removed {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// cleanCRD drops what OLM owns or the cluster sets: the conversion stanza (OLM writes it
// from webhookdefinitions), status and the namespace.
func cleanCRD(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	crd.Spec.Conversion = nil
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	crd.Namespace = ""
	return crd
}

// clean drops the namespace (OLM installs into its own) and server-set metadata.
func clean(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	u.SetNamespace("")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		return fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

func runtimeConvert(obj map[string]any, into any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// toUnstructured converts a typed object through JSON and drops null timestamps and empty
// status, so the YAML shows only what was set.
func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	pruneNullTimestamps(m)
	delete(m, "status")
	return &unstructured.Unstructured{Object: m}, nil
}

func pruneNullTimestamps(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			if k == "creationTimestamp" && val == nil {
				delete(t, k)
				continue
			}
			pruneNullTimestamps(val)
		}
	case []any:
		for _, val := range t {
			pruneNullTimestamps(val)
		}
	}
}
