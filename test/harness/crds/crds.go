// Package crds installs this project's CRDs into a test or demo cluster, pointing CRD
// conversion at a webhook server that runs outside the cluster.
package crds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Webhook is where conversion requests go.
type Webhook struct {
	// URL of the conversion endpoint, e.g. https://127.0.0.1:9443/convert.
	URL string
	// CABundle is the PEM CA that signed the webhook server's certificate.
	CABundle []byte
}

// Load reads every CRD from the YAML files in dir.
func Load(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
		for {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := dec.Decode(crd); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decode %s: %w", f, err)
			}
			if crd.Kind == "CustomResourceDefinition" {
				out = append(out, crd)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	return out, nil
}

// Install creates or replaces the CRDs and waits until each is Established. CRDs with
// more than one version get webhook conversion through wh when wh is not nil.
func Install(ctx context.Context, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition, wh *Webhook) error {
	for _, crd := range crds {
		crd = crd.DeepCopy()
		if wh != nil && len(crd.Spec.Versions) > 1 {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &wh.URL, CABundle: wh.CABundle},
					ConversionReviewVersions: []string{"v1"},
				},
			}
		}
		existing := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Get(ctx, client.ObjectKeyFromObject(crd), existing)
		switch {
		case apierrors.IsNotFound(err):
			err = c.Create(ctx, crd)
		case err == nil:
			crd.ResourceVersion = existing.ResourceVersion
			crd.Status = existing.Status
			err = c.Update(ctx, crd)
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		if err := WaitEstablished(ctx, c, crd.Name, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// WaitEstablished waits until the named CRD is Established, and says how it was last
// seen when it is not within timeout.
func WaitEstablished(ctx context.Context, c client.Client, name string, timeout time.Duration) error {
	last := "not found"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			last = err.Error()
			return false, nil // keep polling through transient errors
		}
		last = "no Established condition"
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established {
				last = fmt.Sprintf("Established=%s (%s: %s)", cond.Status, cond.Reason, cond.Message)
				return cond.Status == apiextensionsv1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established after %s; last seen: %s", name, timeout, last)
	}
	return nil
}
