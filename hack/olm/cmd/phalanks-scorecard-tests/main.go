// Command phalanks-scorecard-tests runs one of this project's custom scorecard tests and
// prints its v1alpha3.TestStatus as JSON on stdout, and nothing else: the scorecard reads
// the test pod's log as the result.
//
//	phalanks-scorecard-tests [--bundle /bundle] [--namespace NS] [--timeout 2m] TEST
//
// In a scorecard pod the bundle is mounted at /bundle, the namespace comes from
// SCORECARD_NAMESPACE and the cluster from the pod's service account; outside one,
// --kubeconfig or KUBECONFIG selects the cluster.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/sirupsen/logrus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/phalanks/phalanks-operator/hack/olm/scorecardtests"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, stdout io.Writer) int {
	// Nothing but the result may reach the pod log.
	ctrl.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	logrus.SetOutput(io.Discard)

	fs := flag.NewFlagSet("phalanks-scorecard-tests", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bundleDir := fs.String("bundle", "/bundle", "Directory of the bundle under test.")
	namespace := fs.String("namespace", os.Getenv("SCORECARD_NAMESPACE"), "Namespace to create test objects in.")
	timeout := fs.Duration("timeout", 2*time.Minute, "How long each wait for the operator may take.")
	ctrlconfig.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || *namespace == "" {
		return report(stdout, "", fmt.Errorf("usage: phalanks-scorecard-tests [--bundle DIR] [--namespace NS] [--timeout D] TEST (namespace from SCORECARD_NAMESPACE); tests: %v", scorecardtests.Names()))
	}
	name := fs.Arg(0)

	b, err := apimanifests.GetBundleFromDir(*bundleDir)
	if err != nil {
		return report(stdout, name, fmt.Errorf("load bundle %s: %w", *bundleDir, err))
	}
	cfg, err := ctrlconfig.GetConfig()
	if err != nil {
		return report(stdout, name, fmt.Errorf("cluster config: %w", err))
	}
	cfg.WarningHandler = rest.NoWarnings{}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return report(stdout, name, fmt.Errorf("client: %w", err))
	}
	env := &scorecardtests.Env{Client: c, Namespace: *namespace, Bundle: b, Timeout: *timeout, Poll: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 4**timeout)
	defer cancel()
	return write(stdout, scorecardtests.Run(ctx, name, env))
}

// report prints a failed result for an error outside the test itself.
func report(stdout io.Writer, name string, err error) int {
	write(stdout, scapiv1alpha3.TestStatus{Results: []scapiv1alpha3.TestResult{{
		Name: name, State: scapiv1alpha3.ErrorState, Errors: []string{err.Error()},
	}}})
	return 1
}

func write(stdout io.Writer, status scapiv1alpha3.TestStatus) int {
	out, err := json.MarshalIndent(status, "", "  ")
	if err != nil {
		return 1
	}
	if _, err := fmt.Fprintln(stdout, string(out)); err != nil {
		return 1
	}
	return 0
}
