package bundle_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// committed loads the bundle/ directory in the repository.
func committed(t *testing.T) (string, *apimanifests.Bundle) {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	return root, b
}

// committedParams reads back the release values the committed bundle was generated with.
func committedParams(t *testing.T, root string, b *apimanifests.Bundle) bundle.Params {
	t.Helper()
	p := bundle.Params{Version: b.CSV.Spec.Version.String(), Image: b.CSV.Annotations["containerImage"]}
	data, err := os.ReadFile(filepath.Join(root, bundle.Dir, "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg scapiv1alpha3.Configuration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, st := range cfg.Stages {
		for _, test := range st.Tests {
			if test.Labels["suite"] == "custom" {
				p.ScorecardImage = test.Image
			}
		}
	}
	return p
}

// TestBundleIsUpToDate regenerates the bundle from the tree with the committed bundle's
// release values and requires the committed files to be exactly that: a change to
// config/, the API markers or the generator without `make bundle` fails here.
func TestBundleIsUpToDate(t *testing.T) {
	root, b := committed(t)
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		t.Fatal(err)
	}
	want, err := bundle.Generate(t.Context(), root, kustomize, committedParams(t, root, b))
	if err != nil {
		t.Fatal(err)
	}
	got, err := bundle.ReadTree(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range want {
		names = append(names, name)
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		w, inWant := want[name]
		g, inGot := got[name]
		switch {
		case !inGot:
			t.Errorf("%s is missing: run `make bundle`", name)
		case !inWant:
			t.Errorf("%s is not generated any more: run `make bundle`", name)
		case !bytes.Equal(w, g):
			t.Errorf("%s is stale: run `make bundle`\n%s", name, firstDifference(w, g))
		}
	}
}

func firstDifference(want, got []byte) string {
	ws, gs := bufio.NewScanner(bytes.NewReader(want)), bufio.NewScanner(bytes.NewReader(got))
	ws.Buffer(nil, 1<<20)
	gs.Buffer(nil, 1<<20)
	for line := 1; ; line++ {
		wok, gok := ws.Scan(), gs.Scan()
		if !wok && !gok {
			return "(identical lines, different bytes)"
		}
		if ws.Text() != gs.Text() || wok != gok {
			return fmt.Sprintf("first difference at line %d:\n  generated: %q\n  committed: %q", line, ws.Text(), gs.Text())
		}
	}
}

func TestBundleDockerfileLabelsMatchTheAnnotations(t *testing.T) {
	root, _ := committed(t)
	var annotations struct {
		Annotations map[string]string `json:"annotations"`
	}
	data, err := os.ReadFile(filepath.Join(root, bundle.Dir, "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &annotations); err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, bundle.Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, line := range strings.Split(string(dockerfile), "\n") {
		if kv, ok := strings.CutPrefix(line, "LABEL "); ok {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = v
		}
	}
	if fmt.Sprint(labels) != fmt.Sprint(annotations.Annotations) {
		t.Errorf("bundle.Dockerfile labels %v differ from metadata/annotations.yaml %v", labels, annotations.Annotations)
	}
	for k, want := range map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.package.v1":         "phalanks-operator",
		"operators.operatorframework.io.bundle.channels.v1":        "stable",
		"operators.operatorframework.io.bundle.channel.default.v1": "stable",
		"operators.operatorframework.io.test.config.v1":            "tests/scorecard/",
	} {
		if annotations.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, annotations.Annotations[k], want)
		}
	}
}

// TestBundleLeavesCertificatesToOLM: OLM issues the webhook certificate, mounts it where the
// manager reads it by default, and writes the CRDs' conversion stanzas.
func TestBundleLeavesCertificatesToOLM(t *testing.T) {
	root, b := committed(t)
	files, err := bundle.ReadTree(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if bytes.Contains(bytes.ToLower(data), []byte("cert-manager")) {
			t.Errorf("%s mentions cert-manager", name)
		}
	}
	for _, crd := range b.V1CRDs {
		if crd.Spec.Conversion != nil {
			t.Errorf("CRD %s carries a conversion stanza", crd.Name)
		}
	}
	for _, d := range b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		pod := d.Spec.Template.Spec
		if len(pod.Volumes) > 0 {
			t.Errorf("deployment %s has volumes %v; OLM adds the certificate volume itself", d.Name, pod.Volumes)
		}
		for _, c := range pod.Containers {
			for _, a := range c.Args {
				switch {
				case strings.HasPrefix(a, "--webhook-cert-rotation"):
					// The manager's own certificate rotation would fight OLM over the CRD's CA.
					if a != "--webhook-cert-rotation=false" {
						t.Errorf("container %s argument %q: under OLM the certificate rotation must be off", c.Name, a)
					}
				case strings.Contains(a, "cert"):
					t.Errorf("container %s argument %q: the manager reads OLM's certificate path by default", c.Name, a)
				}
			}
		}
	}
}

func TestBundleInstallsForAllNamespacesOnly(t *testing.T) {
	_, b := committed(t)
	for _, m := range b.CSV.Spec.InstallModes {
		if m.Supported != (m.Type == operatorsv1alpha1.InstallModeTypeAllNamespaces) {
			t.Errorf("install mode %s supported=%v", m.Type, m.Supported)
		}
	}
}

// TestBundleRunsRestricted: the manager pod meets the restricted Pod Security Standard and
// requests resources.
func TestBundleRunsRestricted(t *testing.T) {
	_, b := committed(t)
	for _, d := range b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		pod := d.Spec.Template.Spec
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
			pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault" {
			t.Errorf("deployment %s: pod security context %+v is not restricted", d.Name, pod.SecurityContext)
		}
		for _, c := range pod.Containers {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
				len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
				t.Errorf("container %s: security context %+v is not restricted", c.Name, sc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("container %s requests no CPU or memory", c.Name)
			}
		}
	}
}
