package olm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Scorecard runs `operator-sdk scorecard` as docs/install-olm.md tells users to: every test of a
// bundle's scorecard configuration as a pod in Namespace, run by ServiceAccount, under
// the restricted Pod Security Standard.
type Scorecard struct {
	// Kubeconfig is the cluster's.
	Kubeconfig string
	// Namespace holds the bundle's ConfigMap and the test pods; ServiceAccount runs them.
	Namespace, ServiceAccount string
	// UntarImage is --untar-image: the image whose tar unpacks the bundle in each pod
	// (operator-sdk's default names an image by a digest no offline registry can hold).
	UntarImage string
}

// ScorecardResult is what one run printed and how it ended.
type ScorecardResult struct {
	// Tests is the JSON output (--output json).
	Tests scapiv1alpha3.TestList
	// Output is stdout and stderr as the command printed them.
	Output string
	// ExitCode is the command's: operator-sdk scorecard exits 1 when a test did not pass.
	ExitCode int
}

// Run runs the scorecard on bundleDir with extra flags (e.g. --selector).
func (s *Scorecard) Run(ctx context.Context, bundleDir string, extra ...string) (ScorecardResult, error) {
	sdk, err := tools.Path("operator-sdk")
	if err != nil {
		return ScorecardResult{}, err
	}
	args := append([]string{"scorecard", bundleDir,
		"--kubeconfig", s.Kubeconfig,
		"--namespace", s.Namespace,
		"--service-account", s.ServiceAccount,
		"--untar-image", s.UntarImage,
		"--pod-security", "restricted",
		"--wait-time", "10m",
		"--output", "json",
	}, extra...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, sdk, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	res := ScorecardResult{Output: stdout.String() + stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(runErr, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	case runErr != nil:
		return res, fmt.Errorf("operator-sdk %s: %w", strings.Join(args, " "), runErr)
	}
	if err := json.Unmarshal(stdout.Bytes(), &res.Tests); err != nil {
		return res, fmt.Errorf("operator-sdk scorecard (exit %d) printed no test list: %w\n%s", res.ExitCode, err, res.Output)
	}
	return res, nil
}

// Failures lists, for every result of a run that did not pass, its test, state and
// errors: what makes `operator-sdk scorecard` exit 1.
func Failures(list scapiv1alpha3.TestList) []string {
	var failed []string
	for _, t := range list.Items {
		if len(t.Status.Results) == 0 {
			failed = append(failed, fmt.Sprintf("%v: no result", t.Spec.Entrypoint))
		}
		for _, r := range t.Status.Results {
			if r.State != scapiv1alpha3.PassState {
				failed = append(failed, fmt.Sprintf("%s: %s %v", r.Name, r.State, r.Errors))
			}
		}
	}
	return failed
}
