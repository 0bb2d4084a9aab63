// Package deploy installs the operator the way its users do with `make deploy`:
// config/default rendered by kustomize and applied to the cluster, the operator's image
// as config/manager names it. The cluster has no cert-manager; Apply plays its part for
// the objects config/default hands it: it issues the certificate each Certificate asks
// for into the Secret the Certificate names, and injects the CA into the resources
// annotated with cert-manager.io/inject-ca-from, as cainjector does.
package deploy

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	certManagerGroup = "cert-manager.io"
	injectCAFrom     = "cert-manager.io/inject-ca-from"
	fieldOwner       = "phalanks-e2e-deploy"
)

// Image returns the operator image config/manager deploys (its kustomization's images
// entry for "controller"): the image a release publishes as IMG.
func Image() (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "config", "manager", "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var k struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	for _, i := range k.Images {
		if i.Name == "controller" && i.NewName != "" && i.NewTag != "" {
			return i.NewName + ":" + i.NewTag, nil
		}
	}
	return "", fmt.Errorf("%s sets no image for controller", path)
}

// Render returns config/default as kustomize builds it.
func Render(ctx context.Context) ([]*unstructured.Unstructured, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, kustomize, "build", filepath.Join(root, "config", "default"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/default: %w: %s", err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode config/default: %w", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// Apply applies objs with server-side apply, namespaces and CRDs first (waiting until
// the CRDs are established), doing cert-manager's part with a CA of its own, which it
// returns: the Certificates' Secrets are signed by it.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) (*certs.CA, error) {
	ca, err := certs.NewCA("phalanks-e2e-cert-manager")
	if err != nil {
		return nil, err
	}
	var first, rest []*unstructured.Unstructured
	certificates := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		switch {
		case gvk.Group == certManagerGroup && gvk.Kind == "Certificate":
			certificates[obj.GetNamespace()+"/"+obj.GetName()] = obj
		case gvk.Group == certManagerGroup:
			// Issuers: the CA above issues in their place.
		case gvk.Kind == "Namespace" || gvk.Kind == "CustomResourceDefinition":
			first = append(first, obj)
		default:
			rest = append(rest, obj)
		}
	}
	for _, obj := range objs {
		if from := obj.GetAnnotations()[injectCAFrom]; from != "" {
			if certificates[from] == nil {
				return nil, fmt.Errorf("%s %s injects the CA of Certificate %s, which config/default does not have", obj.GetKind(), obj.GetName(), from)
			}
			if err := injectCA(obj, ca.CertPEM); err != nil {
				return nil, err
			}
		}
	}
	for _, obj := range first {
		if err := apply(ctx, c, obj); err != nil {
			return nil, err
		}
	}
	for _, obj := range first {
		if obj.GetKind() == "CustomResourceDefinition" {
			if err := crds.WaitEstablished(ctx, c, obj.GetName(), time.Minute); err != nil {
				return nil, err
			}
		}
	}
	for _, cert := range certificates {
		if err := issue(ctx, c, ca, cert); err != nil {
			return nil, err
		}
	}
	for _, obj := range rest {
		if err := apply(ctx, c, obj); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

func apply(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// injectCA sets the CA bundle where cainjector sets it: a CRD's conversion webhook (the
// only kind config/default annotates).
func injectCA(obj *unstructured.Unstructured, caPEM []byte) error {
	if obj.GetKind() != "CustomResourceDefinition" {
		return fmt.Errorf("%s %s: injecting a CA into a %s is not supported", obj.GetKind(), obj.GetName(), obj.GetKind())
	}
	return unstructured.SetNestedField(obj.Object, base64.StdEncoding.EncodeToString(caPEM), "spec", "conversion", "webhook", "clientConfig", "caBundle")
}

// issue writes the Secret a Certificate asks for: a serving certificate for its DNS
// names, with the CA, as cert-manager's CA issuer writes it.
func issue(ctx context.Context, c client.Client, ca *certs.CA, cert *unstructured.Unstructured) error {
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if secretName == "" || len(dnsNames) == 0 {
		return fmt.Errorf("certificate %s/%s has no secretName or dnsNames", cert.GetNamespace(), cert.GetName())
	}
	pair, err := ca.Issue(certs.LeafOptions{CommonName: dnsNames[0], Hosts: dnsNames})
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: cert.GetNamespace()},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: pair.CertPEM, corev1.TLSPrivateKeyKey: pair.KeyPEM, "ca.crt": ca.CertPEM},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(secret)
	if err != nil {
		return err
	}
	return apply(ctx, c, &unstructured.Unstructured{Object: u})
}
