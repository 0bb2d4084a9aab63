package scorecardtests_test

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// The built-in scorecard tests are operator-sdk's scorecard-test binary, which the
// scorecard runs as a pod of the image the configuration names, with the bundle unpacked
// at /bundle (a path compiled into the binary). They read nothing but the bundle, so
// these tests run the same binary, from the sdk tool set, in a directory of its own
// changed into the root (chroot), holding only the binary and the bundle at /bundle: as
// root, or else in a user namespace of its own. make test runs as root.
const (
	scorecardTestBinary = "scorecard-test"
	// podBundleRoot is where the scorecard mounts the bundle in a test pod (operator-sdk's
	// internal/scorecard.PodBundleRoot).
	podBundleRoot = "/bundle"
	sdkModule     = "github.com/operator-framework/operator-sdk"
)

// TestBuiltInScorecardTests runs every built-in test of the committed bundle's scorecard
// configuration with the real scorecard-test binary against the committed bundle, and
// fails on any result that is not "pass" (what operator-sdk scorecard fails on), showing
// the binary's output.
func TestBuiltInScorecardTests(t *testing.T) {
	dir := bundletest.Dir(t)
	names := builtInTests(t, dir)
	root := newScorecardRoot(t, dir)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			result, out := runBuiltIn(t, root, name)
			if err := verdict(result, out); err != nil {
				t.Fatal(err)
			}
			for _, s := range result.Suggestions {
				t.Logf("suggestion: %s", s)
			}
		})
	}
}

// TestBuiltInScorecardTestsFailABundleWithAnExampleWithoutSpec shows the check above can
// fail: a copy of the bundle whose first alm-example has no spec fails
// olm-spec-descriptors, and its verdict carries the binary's output. basic-check-spec,
// despite its name, only suggests in operator-sdk v1.42.3 (it sets "pass" and adds
// "spec missing from [<name>]"), so it alone would not fail the suite; the test records
// that, to notice when a newer operator-sdk makes it fail.
func TestBuiltInScorecardTestsFailABundleWithAnExampleWithoutSpec(t *testing.T) {
	dir := bundletest.Copy(t)
	var name string
	bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) {
		var examples []map[string]any
		if err := json.Unmarshal([]byte(c.Annotations[bundle.ALMExamplesAnnotation]), &examples); err != nil {
			t.Fatal(err)
		}
		delete(examples[0], "spec")
		name, _ = examples[0]["metadata"].(map[string]any)["name"].(string)
		data, err := json.Marshal(examples)
		if err != nil {
			t.Fatal(err)
		}
		c.Annotations[bundle.ALMExamplesAnnotation] = string(data)
	})
	root := newScorecardRoot(t, dir)

	result, out := runBuiltIn(t, root, "olm-spec-descriptors")
	err := verdict(result, out)
	if err == nil {
		t.Fatalf("olm-spec-descriptors passes a bundle whose example %s has no spec:\n%s", name, out)
	}
	if !strings.Contains(err.Error(), `"state": "fail"`) {
		t.Errorf("the verdict does not show the binary's output: %v", err)
	}
	t.Logf("the verdict: %v", err)

	result, out = runBuiltIn(t, root, "basic-check-spec")
	want := fmt.Sprintf("spec missing from [%s]", name)
	if result.State != scapiv1alpha3.PassState || len(result.Suggestions) != 1 || result.Suggestions[0] != want {
		t.Errorf("basic-check-spec of operator-sdk v1.42.3 passes with the suggestion %q; now:\n%s", want, out)
	}
}

// builtInTests returns the names of the configuration's tests that run scorecard-test,
// and checks they run the image of the operator-sdk release the sdk tool set's
// scorecard-test comes from.
func builtInTests(t *testing.T, bundleDir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundleDir, "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg scapiv1alpha3.Configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	release := sdkRelease(t)
	var names []string
	for _, stage := range cfg.Stages {
		for _, test := range stage.Tests {
			if len(test.Entrypoint) == 0 || test.Entrypoint[0] != scorecardTestBinary {
				continue
			}
			if len(test.Entrypoint) != 2 {
				t.Fatalf("built-in test entrypoint %v: want [%s NAME]", test.Entrypoint, scorecardTestBinary)
			}
			if want := "quay.io/operator-framework/scorecard-test:" + release; test.Image != want {
				t.Fatalf("built-in test %s runs %s, but the sdk tool set's scorecard-test is operator-sdk %s's (%s)",
					test.Entrypoint[1], test.Image, release, want)
			}
			names = append(names, test.Entrypoint[1])
		}
	}
	if len(names) == 0 {
		t.Fatal("the scorecard configuration runs no built-in test")
	}
	return names
}

// sdkRelease returns the operator-sdk version the tool set's scorecard-test is built from.
func sdkRelease(t *testing.T) string {
	t.Helper()
	bin, err := tools.Path("scorecard-test")
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	for _, m := range append([]*debug.Module{&info.Main}, info.Deps...) {
		if m.Path == sdkModule {
			return m.Version
		}
	}
	t.Fatalf("%s is not built from %s", bin, sdkModule)
	return ""
}

// newScorecardRoot lays out what a built-in test's pod sees: the scorecard-test binary
// and the bundle directory at /bundle, under a new directory, and returns it.
func newScorecardRoot(t *testing.T, bundleDir string) string {
	t.Helper()
	bin, err := tools.Path("scorecard-test")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, podBundleRoot), os.DirFS(bundleDir)); err != nil {
		t.Fatal(err)
	}
	if err := linkOrCopy(bin, filepath.Join(root, scorecardTestBinary)); err != nil {
		t.Fatal(err)
	}
	return root
}

// linkOrCopy hard-links src to dst, or copies it where they are on different
// filesystems.
func linkOrCopy(src, dst string) error {
	resolved, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	if os.Link(resolved, dst) == nil {
		return nil
	}
	in, err := os.Open(resolved)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755) //nolint:gosec // G302: the binary must be executable
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// runBuiltIn runs one built-in test in root as its pod would run it, and returns its one
// result and the binary's output.
func runBuiltIn(t *testing.T, root, name string) (scapiv1alpha3.TestResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/"+scorecardTestBinary, name)
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	if os.Geteuid() != 0 {
		// chroot needs CAP_SYS_CHROOT: a user namespace gives it to the child alone.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	}
	err := cmd.Run()
	out := stdout.String() + stderr.String()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("run %s in a root of its own: %v (that needs root, or unprivileged user namespaces; make test runs as root)", name, err)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", scorecardTestBinary, name, err, out)
	}
	var status scapiv1alpha3.TestStatus
	if err := json.Unmarshal(stdout.Bytes(), &status); err != nil {
		t.Fatalf("%s %s: stdout is not a TestStatus: %v\n%s", scorecardTestBinary, name, err, out)
	}
	if len(status.Results) != 1 || status.Results[0].Name != name {
		t.Fatalf("%s %s: want one result named %s:\n%s", scorecardTestBinary, name, name, out)
	}
	return status.Results[0], out
}

// verdict is operator-sdk scorecard's: a result that is not "pass" fails, here with the
// binary's output.
func verdict(r scapiv1alpha3.TestResult, out string) error {
	if r.State == scapiv1alpha3.PassState {
		return nil
	}
	return fmt.Errorf("built-in scorecard test %s: state %s; %s printed:\n%s", r.Name, r.State, scorecardTestBinary, out)
}
