package envtest_test

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

func TestInstallsTheProjectCRDs(t *testing.T) {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	env, err := envtest.Start(envtest.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := env.Client.List(t.Context(), &crds); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range crds.Items {
		names[c.Name] = true
	}
	for _, want := range []string{"storagebuckets.phalanks.io", "foos.phalanks.io"} {
		if !names[want] {
			t.Errorf("CRD %s not installed; have %v", want, names)
		}
	}
}
