// Package validate runs `operator-sdk bundle validate` on a bundle directory, as users
// and OperatorHub's pipelines do, and checks what operator-sdk cannot: that the CSV's
// platform labels and node affinity match the images it names (MultiArch), and that a
// bundle made with USE_IMAGE_DIGESTS=true names every image by digest (Pinned).
package validate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Report holds what the validators found, each entry prefixed with the validator's name.
type Report struct {
	Errors   []string
	Warnings []string
}

// OK reports whether there were neither errors nor warnings.
func (r Report) OK() bool { return len(r.Errors) == 0 && len(r.Warnings) == 0 }

// Bundle runs `operator-sdk bundle validate DIR --select-optional
// suite=operatorframework` (the default validators, then OperatorHub's) on the bundle
// directory dir and returns its findings in the CLI's own words. optionalValues become
// --optional-values (e.g. "k8s-version": "1.37").
func Bundle(ctx context.Context, dir string, optionalValues map[string]string) (Report, error) {
	return Run(ctx, dir, "suite=operatorframework", optionalValues)
}

// Run runs `operator-sdk bundle validate DIR --select-optional SELECTOR` on the bundle
// directory dir, as Bundle does.
func Run(ctx context.Context, dir, selector string, optionalValues map[string]string) (Report, error) {
	sdk, err := tools.Path("operator-sdk")
	if err != nil {
		return Report{}, err
	}
	args := []string{"bundle", "validate", dir, "--select-optional", selector, "--output", "json-alpha1"}
	keys := make([]string, 0, len(optionalValues))
	for k := range optionalValues {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--optional-values", k+"="+optionalValues[k])
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, sdk, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var res struct {
		Passed  bool `json:"passed"`
		Outputs []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"outputs"`
	}
	var exitErr *exec.ExitError
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		if errors.As(runErr, &exitErr) && stderr.Len() > 0 {
			// A bundle it cannot even load ends the CLI with a fatal log line and no report.
			return Report{Errors: []string{strings.TrimSpace(stderr.String())}}, nil
		}
		return Report{}, fmt.Errorf("operator-sdk %s printed no report: %w: %s%s", strings.Join(args, " "), errors.Join(err, runErr), stdout.String(), stderr.String())
	}
	var r Report
	for _, o := range res.Outputs {
		switch o.Type {
		case "error":
			r.Errors = append(r.Errors, o.Message)
		case "warning":
			r.Warnings = append(r.Warnings, o.Message)
		}
	}
	if runErr != nil && !errors.As(runErr, &exitErr) {
		return r, fmt.Errorf("operator-sdk bundle validate: %w", runErr)
	}
	if !res.Passed && len(r.Errors) == 0 {
		r.Errors = append(r.Errors, "operator-sdk bundle validate did not pass: "+strings.TrimSpace(stderr.String()))
	}
	return r, nil
}
