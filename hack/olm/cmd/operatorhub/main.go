// Command operatorhub lays out the pull request OperatorHub's community catalogs would
// get for this operator and runs their pipelines' static checks on it (make operatorhub);
// any finding fails.
//
//	operatorhub --out DIR --k8s-version 1.37
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/phalanks/phalanks-operator/hack/olm/operatorhub"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func main() {
	// operator-registry reports optional bundle files it did not find at info level.
	logrus.SetLevel(logrus.WarnLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "operatorhub:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("operatorhub", flag.ContinueOnError)
	o := operatorhub.Options{Root: root}
	fs.StringVar(&o.Out, "out", "", "Directory to lay the pull request out in (replaced).")
	fs.StringVar(&o.KubernetesVersion, "k8s-version", "", "Newest Kubernetes version the operator supports (the deprecated-API checks use it).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Out == "" || o.KubernetesVersion == "" {
		return errors.New("--out and --k8s-version are required")
	}
	if err := operatorhub.Layout(ctx, o); err != nil {
		return err
	}
	fmt.Printf("operatorhub: laid out the pull request in %s\n", o.Out)
	findings, err := operatorhub.Check(ctx, o)
	if err != nil {
		return err
	}
	for _, f := range findings {
		fmt.Println("operatorhub:", f)
	}
	if len(findings) > 0 {
		return fmt.Errorf("%d finding(s) the hubs' pipelines would report", len(findings))
	}
	fmt.Println("operatorhub: every check passed")
	return nil
}
