package main

import (
	"context"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/phalanks/phalanks-operator/test/harness/samples"
)

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}()

// The demo's adapters and expectations: the samples harness's, with the
// scheduled-scaling sample's replaced (scaling.go).
var (
	adapters     = samples.Adapters()
	expectations = samples.Expectations()
)

// samplesEnv is what the samples are adapted to.
func (e *env) samplesEnv() samples.Env {
	return samples.Env{Client: e.client, S3: e.s3, Image: e.image, Namespace: demoNamespace}
}

// applySamples applies config/samples, adapted, into the demo namespace.
func (e *env) applySamples(ctx context.Context) ([]*unstructured.Unstructured, error) {
	return samples.Apply(ctx, e.samplesEnv(), adapters, "phalanks-demo")
}

func describe(obj *unstructured.Unstructured) string { return samples.Describe(obj) }

// kindsArg lists the sample kinds for a kubectl get command line.
func kindsArg(samples []*unstructured.Unstructured) string {
	seen := map[string]bool{}
	var kinds []string
	for _, s := range samples {
		k := strings.ToLower(s.GetKind())
		if s.GroupVersionKind().Group != "" {
			k += "." + s.GroupVersionKind().Group
		}
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	if len(kinds) == 0 {
		return "all"
	}
	return strings.Join(kinds, ",")
}
