package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// The operator's own flags decide what a schedule leaves out (zone, week frame), which
// namespaces are excluded and what its defaults are. The plugin reads them from the
// operator's Deployment when the user may; the same flags given to the plugin win.

// operatorLabels select the operator's Deployment by its pod template (config/manager;
// OLM keeps the template of the CSV's deployment).
var operatorLabels = map[string]string{"app.kubernetes.io/name": "phalanks-operator", "control-plane": "controller-manager"}

// settingsFlags are the operator's scheduling flags, taken by the plugin too.
type settingsFlags struct {
	// given are the values given on the plugin's command line, in order.
	given [][2]string
}

// recorded records what the user gives a flag; the operator's flags are applied later,
// over what its Deployment says.
type recorded struct {
	name  string
	to    *settingsFlags
	check flag.Value
}

func (r recorded) String() string { return "" }

func (r recorded) Set(v string) error {
	if err := r.check.Set(v); err != nil {
		return err
	}
	r.to.given = append(r.to.given, [2]string{r.name, v})
	return nil
}

func (r recorded) IsBoolFlag() bool {
	b, ok := r.check.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (s *settingsFlags) bind(fs *flag.FlagSet) {
	check := flag.NewFlagSet("operator", flag.ContinueOnError)
	var o scaling.Options
	o.BindFlags(check)
	check.VisitAll(func(f *flag.Flag) {
		if f.Name == "scaling-concurrency" || f.Name == "scaling-dry-run" {
			return
		}
		fs.Var(recorded{name: f.Name, to: s, check: f.Value}, f.Name, "The operator's flag, where its Deployment cannot be read: "+f.Usage)
	})
}

// defaultOperatorNamespaces are where the install paths put the operator, in the order
// the plugin looks for it when --operator-namespace is not given: make deploy's
// (kustomize) and the namespace the bundle suggests to OLM.
var defaultOperatorNamespaces = []string{"phalanks-system", "phalanks-operator"}

// options returns the operator's settings: read from its Deployment if the user may,
// with the flags given to the plugin on top. operatorNamespace "" looks for the
// Deployment in defaultOperatorNamespaces. note says what could not be read.
func (s *settingsFlags) options(ctx context.Context, c client.Client, operatorNamespace string) (scaling.Options, string) {
	fresh := flag.NewFlagSet("operator", flag.ContinueOnError)
	var o scaling.Options
	o.BindFlags(fresh)
	candidates := []string{operatorNamespace}
	if operatorNamespace == "" {
		candidates = defaultOperatorNamespaces
	}
	namespace, args, note := candidates[0], []string(nil), ""
	if c != nil {
		namespace, args, note = findOperator(ctx, c, candidates)
	}
	// In the operator's pod POD_NAMESPACE names its namespace: the default exclusion
	// and the calendars' namespace.
	o.ExcludeNamespaces = scaling.DefaultExcludeNamespaces(namespace)
	o.CalendarNamespace = namespace
	applyArgs(fresh, args)
	for _, g := range s.given {
		_ = fresh.Set(g[0], g[1])
	}
	return o, note
}

// findOperator returns the first of namespaces that holds the operator's Deployment, with
// its manager's arguments; when none does (or the user may not read them), the first
// namespace and what each answered.
func findOperator(ctx context.Context, c client.Client, namespaces []string) (string, []string, string) {
	var notes []string
	for _, ns := range namespaces {
		args, note := operatorArgs(ctx, c, ns)
		if note == "" {
			return ns, args, ""
		}
		notes = append(notes, note)
	}
	return namespaces[0], nil, strings.Join(notes, "; ")
}

// operatorArgs returns the command-line arguments of the operator's manager container.
func operatorArgs(ctx context.Context, c client.Client, namespace string) ([]string, string) {
	list := &appsv1.DeploymentList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Sprintf("could not read the operator's Deployment in namespace %s (%v); "+
			"deciding without its flags (give --operator-namespace, or its flags such as --scaling-time-zone)", namespace, reasonOf(err))
	}
	for _, d := range list.Items {
		if !matches(d.Spec.Template.Labels, operatorLabels) {
			continue
		}
		for _, ct := range d.Spec.Template.Spec.Containers {
			if ct.Name == "manager" || len(d.Spec.Template.Spec.Containers) == 1 {
				return containerArgs(ct), ""
			}
		}
	}
	return nil, fmt.Sprintf("found no phalanks-operator Deployment in namespace %s; deciding without its flags "+
		"(give --operator-namespace, or its flags such as --scaling-time-zone)", namespace)
}

func containerArgs(ct corev1.Container) []string {
	var args []string
	if len(ct.Command) > 1 {
		args = append(args, ct.Command[1:]...)
	}
	return append(args, ct.Args...)
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// applyArgs sets the flags of fs that args set; other flags are passed over.
func applyArgs(fs *flag.FlagSet, args []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if !hasValue {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				value = "true"
			} else if i+1 < len(args) {
				i++
				value = args[i]
			}
		}
		_ = fs.Set(name, value)
	}
}
