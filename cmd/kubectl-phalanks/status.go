package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

func status(ctx context.Context, args []string, out, errOut *printer, now time.Time) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c common
	c.bind(fs)
	var all bool
	fs.BoolVar(&all, "all-namespaces", false, "Every namespace you may list.")
	fs.BoolVar(&all, "A", false, "Every namespace (short for --all-namespaces).")
	pos, err := parse(fs, args, errOut)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("status takes no arguments, got %q", pos)
	}
	_, ns, insp, err := c.inspector(ctx, errOut, now)
	if err != nil {
		return err
	}
	if all {
		ns = ""
	}
	statuses, err := insp.Inspect(ctx, ns)
	if err != nil {
		return err
	}
	for _, p := range insp.Problems() {
		errOut.ln("warning:", p)
	}
	if len(statuses) == 0 {
		out.f("Nothing%s is under scheduled scaling.\n", inNamespace(ns))
		return nil
	}
	printStatuses(out, statuses, ns == "", now)
	printSavings(out, statuses, now)
	return nil
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return " in namespace " + ns
}

// inspector connects and returns an Inspector with the operator's settings.
func (c *common) inspector(ctx context.Context, errOut *printer, now time.Time) (client.Client, string, *scaling.Inspector, error) {
	cfg, ns, err := c.restConfig()
	if err != nil {
		return nil, "", nil, err
	}
	cl, err := newClient(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	o, note := c.settings.options(ctx, cl, c.operatorNamespace)
	if note != "" {
		errOut.ln("note:", note)
	}
	insp, err := newInspector(cl, o, now)
	if err != nil {
		return nil, "", nil, err
	}
	return cl, ns, insp, nil
}

// newInspector finds what the operator may scale besides the built-in kinds: KEDA's
// ScaledObjects and the kinds named in --scaling-resources, if the cluster serves them.
func newInspector(cl client.Client, o scaling.Options, now time.Time) (*scaling.Inspector, error) {
	resources := o.Resources
	if resources == nil {
		resources = scaling.DefaultResources
	}
	served := func(resource string) (schema.GroupVersionKind, bool) {
		plural, group, _ := strings.Cut(resource, ".")
		gvk, err := cl.RESTMapper().KindFor(schema.GroupVersionResource{Group: group, Resource: plural})
		return gvk, err == nil
	}
	_, scaledObjects := served("scaledobjects.keda.sh")
	extra := map[string]schema.GroupVersionKind{}
	for _, r := range resources {
		if gvk, ok := served(r); ok {
			extra[r] = gvk
		}
	}
	insp, err := scaling.NewInspector(cl, o, now, scaledObjects, extra)
	if err != nil {
		return nil, fmt.Errorf("the operator's settings: %w", err)
	}
	return insp, nil
}

func printStatuses(w *printer, statuses []scaling.Status, withNamespace bool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "KIND\tNAME\tSTATE\tREPLICAS\tSAVED\tNEXT TRANSITION\tWHY"
	if withNamespace {
		header = "NAMESPACE\t" + header
	}
	_, _ = fmt.Fprintln(tw, header)
	for _, s := range statuses {
		saved := "-"
		if s.Saved != nil {
			saved = strconv.Itoa(int(*s.Saved))
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s", s.Kind, s.Name, s.State, s.Level, saved, local(s.Next, now), s.Why)
		if withNamespace {
			row = s.Namespace + "\t" + row
		}
		_, _ = fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()
}

// printSavings prints what the workloads held down save: now, and since each was
// scaled down (the operator's metrics count across downtimes and restarts).
func printSavings(w *printer, statuses []scaling.Status, now time.Time) {
	var replicas int64
	var cpuMilli, memory int64
	var podSeconds, cpuSeconds, memorySeconds float64
	workloads := 0
	for _, s := range statuses {
		if s.ReplicasDown == 0 {
			continue
		}
		workloads++
		r := int64(s.ReplicasDown)
		replicas += r
		cpuMilli += r * s.CPUMilli
		memory += r * s.MemoryBytes
		if secs := now.Sub(s.DownSince).Seconds(); secs > 0 {
			podSeconds += float64(r) * secs
			cpuSeconds += float64(r*s.CPUMilli) / 1000 * secs
			memorySeconds += float64(r*s.MemoryBytes) * secs
		}
	}
	w.f("\nScaled down now: %s of %s, requesting %s CPU and %s of memory.\n",
		plural(int(replicas), "replica"), plural(workloads, "workload"), cores(float64(cpuMilli)/1000), gib(float64(memory)))
	w.f("Saved since each was scaled down: %.1f pod-hours, %s CPU-hours, %s-hours of memory requests.\n",
		podSeconds/3600, cores(cpuSeconds/3600), gib(memorySeconds/3600))
}

func cores(c float64) string { return strconv.FormatFloat(c, 'f', 2, 64) }

func gib(bytes float64) string { return strconv.FormatFloat(bytes/(1<<30), 'f', 2, 64) + " GiB" }

// reasonOf is the reason of an API error, else the error.
func reasonOf(err error) string {
	if s, ok := err.(apierrors.APIStatus); ok {
		return string(s.Status().Reason)
	}
	return err.Error()
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
