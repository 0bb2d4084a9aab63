// Package scorecardtests holds this project's custom scorecard tests: behaviour checks run
// against a cluster with the operator installed, by the phalanks-scorecard-tests image
// the scorecard configuration's custom suite names. Each test reads the bundle (mounted at
// /bundle by the scorecard), works from its alm-examples in the scorecard's namespace,
// and returns one v1alpha3.TestResult.
package scorecardtests

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
)

// Env is what a test works with.
type Env struct {
	Client    client.Client
	Namespace string
	Bundle    *apimanifests.Bundle
	// Timeout bounds each wait for the operator.
	Timeout time.Duration
	// Poll is the interval of those waits.
	Poll time.Duration
}

// Report is what a test records besides its verdict: a log, and suggestions for findings
// that do not fail it.
type Report struct {
	log         strings.Builder
	suggestions []string
}

// Logf adds a line to the test's log.
func (r *Report) Logf(format string, args ...any) {
	fmt.Fprintf(&r.log, format+"\n", args...)
}

// Suggest records a finding that does not fail the test.
func (r *Report) Suggest(format string, args ...any) {
	r.suggestions = append(r.suggestions, fmt.Sprintf(format, args...))
}

// Test checks one behaviour and returns what went wrong, or nil.
type Test func(ctx context.Context, env *Env, r *Report) error

// Tests are the custom tests by the names the scorecard configuration runs them under.
var Tests = map[string]Test{
	"served-versions":                  servedVersions,
	"foo-creates-deployment":           fooCreatesDeployment,
	"storagebucket-terminal-condition": storageBucketTerminalCondition,
}

// Names returns the test names, sorted.
func Names() []string {
	names := make([]string, 0, len(Tests))
	for n := range Tests {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run runs the named test and wraps its outcome as the scorecard expects it.
func Run(ctx context.Context, name string, env *Env) scapiv1alpha3.TestStatus {
	r := scapiv1alpha3.TestResult{Name: name, State: scapiv1alpha3.PassState, Errors: []string{}, Suggestions: []string{}}
	test, ok := Tests[name]
	if !ok {
		r.State = scapiv1alpha3.FailState
		r.Errors = append(r.Errors, fmt.Sprintf("unknown test %q; valid tests: %s", name, strings.Join(Names(), ", ")))
		return scapiv1alpha3.TestStatus{Results: []scapiv1alpha3.TestResult{r}}
	}
	var report Report
	if err := test(ctx, env, &report); err != nil {
		r.State = scapiv1alpha3.FailState
		r.Errors = append(r.Errors, err.Error())
	}
	r.Log = report.log.String()
	r.Suggestions = append(r.Suggestions, report.suggestions...)
	return scapiv1alpha3.TestStatus{Results: []scapiv1alpha3.TestResult{r}}
}

// examplesOf returns the bundle's alm-examples of a kind.
func examplesOf(env *Env, kind string) ([]*unstructured.Unstructured, error) {
	all, err := bundle.ALMExamples(env.Bundle.CSV)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, u := range all {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the bundle has no %s example in alm-examples", kind)
	}
	return out, nil
}

// instantiate copies an example into the test namespace under a fresh name, so that
// repeated runs and existing objects never collide.
func instantiate(env *Env, example *unstructured.Unstructured) *unstructured.Unstructured {
	u := example.DeepCopy()
	u.SetName(fmt.Sprintf("%s-%s", example.GetName(), rand.String(5)))
	u.SetNamespace(env.Namespace)
	u.SetLabels(map[string]string{"app.kubernetes.io/created-by": "phalanks-scorecard-tests"})
	return u
}

// cleanup deletes what a test created; the scorecard namespace may outlive the test.
func cleanup(env *Env, u *unstructured.Unstructured) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = env.Client.Delete(ctx, u, client.PropagationPolicy("Background"))
}

// waitFor polls check until it reports done, and returns the last state it described.
func waitFor(ctx context.Context, env *Env, check func(ctx context.Context) (done bool, state string, err error)) (string, error) {
	var state string
	err := wait.PollUntilContextTimeout(ctx, env.Poll, env.Timeout, true, func(ctx context.Context) (bool, error) {
		done, s, err := check(ctx)
		if s != "" && ctx.Err() == nil {
			state = s
		}
		return done, err
	})
	if errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err) {
		return state, fmt.Errorf("not within %s; last seen: %s", env.Timeout, state)
	}
	return state, err
}
