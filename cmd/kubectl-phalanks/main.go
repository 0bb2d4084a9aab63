// Command kubectl-phalanks is the kubectl plugin of phalanks-operator's scheduled
// scaling: what is up or down and why, wake-ups and sleeps on demand, and what a
// schedule means. It uses only the user's own credentials and RBAC (through the
// kubeconfig, like kubectl), talks to no endpoint of the operator, and leaves nothing
// to clean up: a wake or a sleep is a timed annotation that the operator honours and
// that runs its course.
//
//	kubectl phalanks status [-n NAMESPACE | -A]
//	kubectl phalanks wake NAMESPACE[/KIND/NAME] [--for 2h] [--cancel]
//	kubectl phalanks sleep NAMESPACE[/KIND/NAME] [--for 30m] [--cancel]
//	kubectl phalanks explain SCHEDULE [--count 6] [-n NAMESPACE]
//
// Exit status: 0 success, 1 failure (an error from the cluster, a wake or sleep that
// could not be set or would have no effect, an invalid schedule), 2 wrong usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// printer writes to w and keeps the first error: output that cannot be written (a
// closed pipe) fails the command like any other error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

func (p *printer) f(format string, args ...any) { _, _ = fmt.Fprintf(p, format, args...) }

func (p *printer) ln(args ...any) { _, _ = fmt.Fprintln(p, args...) }

// usageError is wrong usage: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

const usage = `kubectl phalanks: scheduled scaling of phalanks-operator, with your own credentials.

Commands:
  status [-n NAMESPACE | -A]                    each scheduled workload: state, saved count, next transition, why; and the savings
  wake NAMESPACE[/KIND/NAME] [--for 1h]         keep it up (restore it now) for a while, through phalanks.io/exclude-until
  sleep NAMESPACE[/KIND/NAME] [--for 1h]        scale it down now for a while, through a timed phalanks.io/force-downtime
  explain SCHEDULE [--count 6] [-n NAMESPACE]   the next transitions of a schedule, and the peers' reading if it differs

wake and sleep --cancel end what an earlier wake or sleep set. Times are shown in your
local time zone (TZ). Run "kubectl phalanks COMMAND -h" for a command's flags.
`

func main() {
	os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, time.Now()), os.Stderr))
}

// exitCode reports the error run returned on stderr and returns the exit status: 0
// (also for -h), 1 for a failure, 2 for wrong usage, followed by the usage text.
func exitCode(err error, stderr io.Writer) int {
	var u usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &u):
		_, _ = fmt.Fprintln(stderr, "error:", err)
		_, _ = fmt.Fprint(stderr, usage)
		return 2
	default:
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return 1
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, now time.Time) error {
	if len(args) == 0 {
		return usagef("no command")
	}
	cmd, rest := args[0], args[1:]
	out, errOut := &printer{w: stdout}, &printer{w: stderr}
	var err error
	switch cmd {
	case "status":
		err = status(ctx, rest, out, errOut, now)
	case "wake", "sleep":
		err = wakeOrSleep(ctx, cmd, rest, out, errOut, now)
	case "explain":
		err = explain(ctx, rest, out, errOut, now)
	case "help", "-h", "--help":
		out.f("%s", usage)
	default:
		return usagef("unknown command %q", cmd)
	}
	if err == nil {
		err = out.err
	}
	return err
}

// common are the flags every command takes: where the cluster is, as for kubectl, and
// where the operator runs.
type common struct {
	kubeconfig, context, namespace string
	operatorNamespace              string
	// settings are the operator's scheduling flags, where they cannot be read from it.
	settings settingsFlags
}

func (c *common) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path of the kubeconfig (default: $KUBECONFIG, then ~/.kube/config).")
	fs.StringVar(&c.context, "context", "", "The kubeconfig context to use.")
	fs.StringVar(&c.namespace, "namespace", "", "Namespace (default: the context's).")
	fs.StringVar(&c.namespace, "n", "", "Namespace (short for --namespace).")
	fs.StringVar(&c.operatorNamespace, "operator-namespace", "",
		"Namespace of the operator, whose Deployment's flags (time zone, week frame, defaults) and holiday calendars are read when you may "+
			"(default: the first of "+strings.Join(defaultOperatorNamespaces, ", ")+" that holds its Deployment).")
	c.settings.bind(fs)
}

// parse parses args, flags and positional arguments in any order. -h prints the
// flags to help.
func parse(fs *flag.FlagSet, args []string, help io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(help)
				fs.PrintDefaults()
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// restConfig loads the kubeconfig as kubectl does and returns the namespace to use.
func (c *common) restConfig() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("load the kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-phalanks"
	ns := c.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("read the kubeconfig's namespace: %w", err)
		}
	}
	return cfg, ns, nil
}

func newClient(cfg *rest.Config) (client.Client, error) {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return c, nil
}

// local formats an instant in the user's zone, with the weekday, and how far ahead.
func local(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	lt := t.In(time.Local)
	out := lt.Format("Mon 2006-01-02 15:04 MST")
	if d := t.Sub(now); d > 0 {
		out += " (in " + roughly(d) + ")"
	}
	return out
}

// roughly formats a duration to the minute, or the hour beyond a day.
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "<1m"
	case d < 24*time.Hour:
		return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
	default:
		days := int(d / (24 * time.Hour))
		return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
	}
}
