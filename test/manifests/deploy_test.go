package manifests_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/phalanks/phalanks-operator/internal/certrotation"
)

const (
	webhookCertDir  = "/tmp/k8s-webhook-server/serving-certs"
	rotationFlag    = "--webhook-cert-rotation"
	storageBucketCR = "storagebuckets.phalanks.io"
)

// managerOf returns the manager container and pod spec of the rendered Deployment.
func managerOf(t *testing.T, objs []*unstructured.Unstructured) (*corev1.Container, *corev1.PodSpec) {
	t.Helper()
	u := find(objs, "Deployment", "phalanks-controller-manager")
	if u == nil {
		t.Fatal("no manager Deployment")
	}
	pod := &convert[appsv1.Deployment](t, u).Spec.Template.Spec
	for i := range pod.Containers {
		if pod.Containers[i].Name == "manager" {
			return &pod.Containers[i], pod
		}
	}
	t.Fatal("the Deployment has no manager container")
	return nil, nil
}

// rotationArg returns the value the manager's arguments give --webhook-cert-rotation
// (the last one wins), or "" when they do not set it.
func rotationArg(c *corev1.Container) string {
	v := ""
	for _, a := range c.Args {
		if rest, ok := strings.CutPrefix(a, rotationFlag+"="); ok {
			v = rest
		} else if a == rotationFlag {
			v = "true"
		}
	}
	return v
}

// certVolume returns the volume mounted where the webhook server reads its certificate.
func certVolume(t *testing.T, c *corev1.Container, pod *corev1.PodSpec) *corev1.Volume {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath != webhookCertDir {
			continue
		}
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == m.Name {
				return &pod.Volumes[i]
			}
		}
	}
	t.Fatalf("nothing is mounted at %s", webhookCertDir)
	return nil
}

func isCertManager(u *unstructured.Unstructured) bool {
	if strings.HasSuffix(u.GroupVersionKind().Group, "cert-manager.io") {
		return true
	}
	for k := range u.GetAnnotations() {
		if strings.Contains(k, "cert-manager.io") {
			return true
		}
	}
	return false
}

// TestDefaultKeepsItsOwnCertificate: config/default turns the rotation on and gives it
// what it needs under the names the manager's flags default to (the Secret, projected
// where the webhook server reads, without the CA's key; the Services the certificate is
// for), the right to write that Secret and the StorageBucket CRD only, and nothing of
// cert-manager.
func TestDefaultKeepsItsOwnCertificate(t *testing.T) {
	objs := render(t, "config/default")
	manager, pod := managerOf(t, objs)
	if v := rotationArg(manager); v != "true" {
		t.Errorf("config/default sets %s=%q, want true", rotationFlag, v)
	}
	secret := find(objs, "Secret", certrotation.DefaultSecretName)
	if secret == nil || secret.GetNamespace() != "phalanks-system" {
		t.Fatalf("config/default has no Secret %s in phalanks-system, which the rotator fills", certrotation.DefaultSecretName)
	}
	if _, found := secret.Object["data"]; found {
		t.Error("the rotator's Secret ships with data: re-applying it would overwrite what the rotator wrote")
	}
	for _, name := range []string{certrotation.DefaultWebhookService, certrotation.DefaultMetricsService} {
		if svc := find(objs, "Service", name); svc == nil || svc.GetNamespace() != "phalanks-system" {
			t.Errorf("the certificate is for Service %s, which config/default does not have", name)
		}
	}
	crd := find(objs, "CustomResourceDefinition", storageBucketCR)
	if svc := str(t, crd, "spec", "conversion", "webhook", "clientConfig", "service", "name"); svc != certrotation.DefaultWebhookService {
		t.Errorf("the CRD's conversion calls Service %q, the certificate is for %q", svc, certrotation.DefaultWebhookService)
	}

	vol := certVolume(t, manager, pod)
	if vol.Secret == nil || vol.Secret.SecretName != certrotation.DefaultSecretName {
		t.Fatalf("the certificate volume is %+v, want the Secret %s", vol.VolumeSource, certrotation.DefaultSecretName)
	}
	var keys []string
	for _, item := range vol.Secret.Items {
		keys = append(keys, item.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"ca.crt", "tls.crt", "tls.key"}) {
		t.Errorf("the pod gets the Secret's keys %v, want ca.crt, tls.crt, tls.key (never ca.key)", keys)
	}
	if vol.Secret.Optional == nil || !*vol.Secret.Optional {
		t.Error("the Secret volume must be optional: its keys appear after the pod started")
	}

	// The rotator may update its own Secret and the StorageBucket CRD, by name, and no more.
	writes := map[string][]string{}
	for key, rules := range rulesOf(t, objs) {
		for _, r := range rules {
			if !slices.Contains(r.Verbs, "update") {
				continue
			}
			for _, res := range r.Resources {
				if res == "secrets" || res == "customresourcedefinitions" {
					writes[key+" "+res] = append(writes[key+" "+res], r.ResourceNames...)
				}
			}
		}
	}
	want := map[string][]string{
		"Role/phalanks-cert-rotation secrets":                          {certrotation.DefaultSecretName},
		"ClusterRole/phalanks-cert-rotation customresourcedefinitions": {storageBucketCR},
	}
	for k, names := range writes {
		if !slices.Equal(names, want[k]) {
			t.Errorf("%s may update %v, want only %v", k, names, want[k])
		}
	}
	for k := range want {
		if _, ok := writes[k]; !ok {
			t.Errorf("%s does not grant the rotator's update", k)
		}
	}
	for name, rules := range rulesOf(t, objs) {
		if w := wildcards(rules); len(w) > 0 {
			t.Errorf("%s grants '*' in %v", name, w)
		}
	}
	bound := false
	for _, u := range objs {
		if u.GetKind() == "RoleBinding" && u.GetName() == "phalanks-cert-rotation" {
			b := convert[rbacv1.RoleBinding](t, u)
			bound = b.RoleRef.Name == "phalanks-cert-rotation" && len(b.Subjects) == 1 && b.Subjects[0].Name == pod.ServiceAccountName
		}
	}
	if !bound {
		t.Errorf("the rotator's Role is not bound to the manager's service account %s", pod.ServiceAccountName)
	}

	for _, u := range objs {
		if isCertManager(u) {
			t.Errorf("config/default has cert-manager's %s %s", u.GetKind(), u.GetName())
		}
	}
}

// TestCertManagerOverlayStaysForUsersWhoHaveIt: config/certmanager renders, names
// cert-manager's current API, has cert-manager issue the certificate the pod mounts and
// inject its CA into the CRD, and keeps the rotation off.
func TestCertManagerOverlayStaysForUsersWhoHaveIt(t *testing.T) {
	objs := render(t, "config/certmanager")
	manager, pod := managerOf(t, objs)
	if v := rotationArg(manager); v != "false" {
		t.Errorf("config/certmanager sets %s=%q, want false", rotationFlag, v)
	}
	var cert *unstructured.Unstructured
	for _, u := range objs {
		if !strings.HasSuffix(u.GroupVersionKind().Group, "cert-manager.io") {
			continue
		}
		if u.GetAPIVersion() != "cert-manager.io/v1" {
			t.Errorf("%s %s is %s, want cert-manager.io/v1", u.GetKind(), u.GetName(), u.GetAPIVersion())
		}
		if u.GetKind() == "Certificate" {
			cert = u
		}
	}
	if cert == nil {
		t.Fatal("config/certmanager has no Certificate")
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if want := certrotation.DefaultWebhookService + ".phalanks-system.svc"; !slices.Contains(dnsNames, want) {
		t.Errorf("the Certificate is for %v, not the webhook Service %s", dnsNames, want)
	}
	issuer := find(objs, "Issuer", str(t, cert, "spec", "issuerRef", "name"))
	if issuer == nil {
		t.Errorf("the Certificate's issuer %s is not in config/certmanager", str(t, cert, "spec", "issuerRef", "name"))
	}
	if vol := certVolume(t, manager, pod); vol.Secret == nil || vol.Secret.SecretName != str(t, cert, "spec", "secretName") {
		t.Errorf("the pod mounts %+v, not the Certificate's Secret %s", vol.VolumeSource, str(t, cert, "spec", "secretName"))
	}
	crd := find(objs, "CustomResourceDefinition", storageBucketCR)
	if from := crd.GetAnnotations()["cert-manager.io/inject-ca-from"]; from != cert.GetNamespace()+"/"+cert.GetName() {
		t.Errorf("the CRD injects the CA of %q, want the Certificate %s/%s", from, cert.GetNamespace(), cert.GetName())
	}
	if find(objs, "Role", "phalanks-cert-rotation") != nil {
		t.Error("config/certmanager grants the rotator's writes, which it does not run")
	}
}

// TestBundleSourceKeepsRotationOff: the OLM bundle is generated from config/manifests,
// and OLM issues the certificate and writes the CRD's caBundle itself: the rotation
// must be off there, in the sources and in the committed CSV.
func TestBundleSourceKeepsRotationOff(t *testing.T) {
	manager, _ := managerOf(t, render(t, "config/manifests"))
	if v := rotationArg(manager); v != "false" {
		t.Errorf("config/manifests sets %s=%q, want false", rotationFlag, v)
	}
	for _, u := range objects(t, "bundle/manifests/*.clusterserviceversion.yaml") {
		deployments, _, _ := unstructured.NestedSlice(u.Object, "spec", "install", "spec", "deployments")
		for _, d := range deployments {
			containers, _, _ := unstructured.NestedSlice(d.(map[string]any), "spec", "template", "spec", "containers")
			for _, c := range containers {
				args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
				if slices.Contains(args, rotationFlag+"=true") || slices.Contains(args, rotationFlag) {
					t.Errorf("the committed CSV turns the rotation on: %v", args)
				}
			}
		}
	}
}

// TestEgressComponentReachesTheManager: config/egress, added to an overlay of
// config/default as docs/configuration.md says, gives the manager container the proxy
// variables, a NO_PROXY with the API server's Service range, and SSL_CERT_FILE at a file
// of the CA ConfigMap it mounts read-only; and changes nothing else of the pod.
func TestEgressComponentReachesTheManager(t *testing.T) {
	plain, plainPod := managerOf(t, render(t, "config/default"))
	manager, pod := managerOf(t, render(t, "test/manifests/testdata/egress"))
	env := map[string]string{}
	for _, e := range manager.Env {
		env[e.Name] = e.Value
	}
	for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY"} {
		if env[name] == "" {
			t.Errorf("%s is not set", name)
		}
	}
	if !strings.Contains(env["NO_PROXY"], "10.96.0.0/12") || !strings.Contains(env["NO_PROXY"], ".svc") {
		t.Errorf("NO_PROXY=%q leaves the API server's Service range or .svc to the proxy", env["NO_PROXY"])
	}
	var mount *corev1.VolumeMount
	for i, m := range manager.VolumeMounts {
		if strings.HasPrefix(env["SSL_CERT_FILE"], m.MountPath+"/") {
			mount = &manager.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("SSL_CERT_FILE=%q is in no read-only mount of %+v", env["SSL_CERT_FILE"], manager.VolumeMounts)
	}
	var vol *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == mount.Name {
			vol = &pod.Volumes[i]
		}
	}
	file := strings.TrimPrefix(env["SSL_CERT_FILE"], mount.MountPath+"/")
	if vol == nil || vol.ConfigMap == nil || len(vol.ConfigMap.Items) != 1 || vol.ConfigMap.Items[0].Path != file {
		t.Fatalf("the volume %q does not put a ConfigMap's key at %s: %+v", mount.Name, file, vol)
	}
	if key := vol.ConfigMap.Items[0].Key; key != "ca-bundle.crt" {
		t.Errorf("the CA is read from key %q, not ca-bundle.crt (OpenShift's trusted-CA injection)", key)
	}

	// Nothing else changes: the default's variables, mounts and volumes are all there.
	for _, e := range plain.Env {
		if !slices.ContainsFunc(manager.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
			t.Errorf("the component dropped the variable %s", e.Name)
		}
	}
	if len(manager.VolumeMounts) != len(plain.VolumeMounts)+1 || len(pod.Volumes) != len(plainPod.Volumes)+1 {
		t.Errorf("the component should add one mount and one volume: %d→%d mounts, %d→%d volumes",
			len(plain.VolumeMounts), len(manager.VolumeMounts), len(plainPod.Volumes), len(pod.Volumes))
	}
	if !slices.Equal(manager.Args, plain.Args) {
		t.Errorf("the component changed the arguments: %q → %q", plain.Args, manager.Args)
	}
}
