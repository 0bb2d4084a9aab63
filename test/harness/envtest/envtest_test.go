package envtest_test

import (
	"strings"
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

// A gate the running version does not have: off, it is left out of the flags (such a
// server lacks the feature anyway); on, the start fails instead of testing a server
// that silently lacks what the suite asked for.
func TestFeatureGatesTheServerDoesNotHave(t *testing.T) {
	// Every version lists the AllAlpha and AllBeta pseudo-gates.
	if known, err := envtest.KnowsFeatureGate("AllBeta"); err != nil || !known {
		t.Fatalf("KnowsFeatureGate(AllBeta) = %v, %v; want true", known, err)
	}
	const gate = "PhalanksNoSuchGate"
	known, err := envtest.KnowsFeatureGate(gate)
	if err != nil || known {
		t.Fatalf("KnowsFeatureGate(%s) = %v, %v; want false", gate, known, err)
	}
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	if _, err := envtest.Start(envtest.Options{Scheme: s, FeatureGates: map[string]bool{gate: true}}); err == nil ||
		!strings.Contains(err.Error(), "has no feature gate "+gate) {
		t.Fatalf("start with %s=true: %v; want an error naming the gate", gate, err)
	}
	env, err := envtest.Start(envtest.Options{Scheme: s, FeatureGates: map[string]bool{gate: false}})
	if err != nil {
		t.Fatalf("start with %s=false: %v", gate, err)
	}
	_ = env.Stop()
}
