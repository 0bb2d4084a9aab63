// Package scaling scales workloads down outside the working hours their annotations
// (or their Namespace's, or the operator's defaults) give, and back up inside them:
// Deployments, StatefulSets, CronJobs, Jobs, DaemonSets, HorizontalPodAutoscalers, KEDA
// ScaledObjects, any resource with a /scale subresource, and the PodDisruptionBudgets of
// what it scaled down.
//
// It is level-triggered: each reconcile decides from the current time and the objects
// alone, writes only when the decision differs from what is there, and wakes the object
// again at the next scheduled transition. The count to restore is written to the object
// before (or with) the change that needs it. An operator restart or outage therefore
// misses nothing and loses nothing.
package scaling

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// FieldManager is the server-side apply field manager of everything the operator
// writes: the replica count (or suspend, nodeSelector key, minReplicas, paused-replicas,
// disruption budget) and its annotations.
const FieldManager = "phalanks-scaler"

// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=batch,resources=cronjobs;jobs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;patch
// Read only, for PodDisruptionBudgets: the pods a budget selects and, through their
// ReplicaSets, the Deployments they belong to.
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch
// Holiday calendars: the cache lists and watches only ConfigMaps labelled
// phalanks.io/holiday-calendar=true (RBAC cannot grant by label), and never gets one.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=list;watch
// Only the metadata of CRDs, to notice a kind named in --scaling-resources appear.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list;watch

// Options configure scheduled scaling; the flags set the cluster-wide defaults.
type Options struct {
	// Concurrency is the number of objects of each kind decided in parallel.
	Concurrency int
	// TimeZone is the zone of schedule elements that name none.
	TimeZone string
	// Weekdays is the week frame of schedule elements that name none, e.g. Mon-Fri.
	Weekdays string
	// GracePeriod protects new workloads from a scale-down right after creation.
	GracePeriod time.Duration
	// WakeLead restores a workload this long before its uptime begins.
	WakeLead time.Duration
	// RestoreRate is how many restores per second the operator writes at most, cluster
	// wide; 0 writes every restore as it falls due.
	RestoreRate float64
	// DryRun logs decisions and records events but writes nothing.
	DryRun bool
	// DefaultUptime, DefaultDowntime and DefaultDowntimeReplicas are the schedule of
	// every workload that neither it nor its Namespace schedules.
	DefaultUptime, DefaultDowntime string
	DefaultDowntimeReplicas        int
	// DefaultKinds are the kinds, as <plural>.<group>, that Namespace annotations and
	// the operator's defaults schedule; nil means DefaultScalingKinds. Objects of other
	// kinds are scheduled by their own annotations only.
	DefaultKinds []string
	// ExcludeNamespaces are kept out of scheduled scaling, by name or shell pattern
	// (kube-*); nil means DefaultExcludeNamespaces of the operator's own namespace.
	ExcludeNamespaces []string
	// ExcludeNamespaceSelector keeps Namespaces whose labels it matches out of scheduled
	// scaling; empty matches none.
	ExcludeNamespaceSelector string
	// CalendarNamespace holds the holiday calendars every namespace shares; the
	// operator's own namespace by default.
	CalendarNamespace string
	// Resources are the kinds scaled, as <plural>.<group>; nil means DefaultResources.
	// Any resource named that is not built in is scaled through its /scale subresource
	// once the API server serves it.
	Resources []string
	// Clock decides what time it is and times the wake-ups at transitions; nil is the
	// real clock. Tests inject one they can move.
	Clock clock.WithTicker
}

// DefaultScalingKinds are the kinds Namespace annotations and the operator's defaults
// schedule unless --default-scaling-kinds says otherwise: what a platform team means
// when it turns on --default-uptime. DaemonSets (node agents), Jobs, CronJobs and kinds
// scaled through /scale are scheduled by their own annotations.
var DefaultScalingKinds = []string{"deployments.apps", "statefulsets.apps"}

// LabelScaling on a Namespace, with the value ScalingDisabled, keeps it out of scheduled
// scaling, whatever the flags say.
const (
	LabelScaling    = annotationPrefix + "scaling"
	ScalingDisabled = "disabled"
)

// criticalPriorityClasses are the priority classes of the pods that keep nodes and the
// cluster running: a workload whose pods run at one is never scaled.
var criticalPriorityClasses = []string{"system-node-critical", "system-cluster-critical"}

// DefaultResources are the kinds scaled unless --scaling-resources says otherwise.
var DefaultResources = []string{
	"deployments.apps", "statefulsets.apps", "cronjobs.batch", "jobs.batch", "daemonsets.apps",
	"horizontalpodautoscalers.autoscaling", "poddisruptionbudgets.policy", "scaledobjects.keda.sh",
}

// BindFlags registers the scheduled-scaling flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Concurrency, "scaling-concurrency", 10,
		fmt.Sprintf("Objects of each kind that scheduled scaling decides in parallel. Changes while the operator runs "+
			"up to %d (or the value at start, if higher).", LiveConcurrencyUpTo))
	fs.StringVar(&o.TimeZone, "scaling-time-zone", "",
		"IANA time zone for schedule elements that name none (e.g. Europe/Berlin); empty requires every element to name one.")
	fs.StringVar(&o.Weekdays, "scaling-weekdays", "",
		"Week frame for schedule elements that name no weekdays (e.g. Mon-Fri); empty requires every element to name them.")
	fs.DurationVar(&o.GracePeriod, "scaling-grace-period", 15*time.Minute,
		"How long a new workload runs before scheduled scaling may scale it down (the phalanks.io/grace-period annotation overrides it).")
	fs.DurationVar(&o.WakeLead, "scaling-wake-lead", 0,
		"How long before its uptime begins a workload is restored, so that it runs when the uptime starts (at most 12h; "+
			"the phalanks.io/wake-lead annotation overrides it).")
	fs.Float64Var(&o.RestoreRate, "scaling-restore-rate", 0,
		"Restores per second scheduled scaling writes at most, cluster wide, by the workloads' phalanks.io/restore-priority "+
			"(higher first) and then in the order they fall due (e.g. 0.5: one every 2 s); 0 writes each as it falls due.")
	fs.BoolVar(&o.DryRun, "scaling-dry-run", false,
		"Log scheduled-scaling decisions and record them as events, but change nothing.")
	fs.StringVar(&o.DefaultUptime, "default-uptime", "",
		"Uptime schedule of every workload that neither it nor its namespace schedules (e.g. \"Mon-Fri 07:30-20:30 Europe/Berlin\"); empty: none.")
	fs.StringVar(&o.DefaultDowntime, "default-downtime", "",
		"Downtime schedule of every workload that neither it nor its namespace schedules; empty: none.")
	fs.IntVar(&o.DefaultDowntimeReplicas, "default-downtime-replicas", 0,
		"Replicas during the downtime of --default-uptime/--default-downtime.")
	o.DefaultKinds = DefaultScalingKinds
	fs.Func("default-scaling-kinds",
		"Comma-separated kinds, as <plural>.<group>, of those --scaling-resources names, that Namespace annotations and --default-uptime/--default-downtime schedule (default \""+
			strings.Join(DefaultScalingKinds, ",")+"\"); objects of other kinds are scheduled by their own annotations only.",
		func(v string) error { o.DefaultKinds = splitList(v); return nil })
	o.ExcludeNamespaces = DefaultExcludeNamespaces(ownNamespace())
	fs.Func("scaling-exclude-namespaces",
		"Comma-separated namespaces kept out of scheduled scaling, annotations and defaults alike, by name or shell pattern such as kube-*; "+
			"replaces the default list of the cluster's and the platform's own namespaces and the operator's (\""+
			strings.Join(o.ExcludeNamespaces, ",")+"\"). A Namespace labelled "+LabelScaling+"="+ScalingDisabled+" is always kept out.",
		func(v string) error { o.ExcludeNamespaces = splitList(v); return nil })
	fs.StringVar(&o.ExcludeNamespaceSelector, "scaling-exclude-namespace-selector", "",
		"Label selector of namespaces kept out of scheduled scaling (e.g. \"environment=production\"); empty selects none.")
	fs.StringVar(&o.CalendarNamespace, "scaling-calendar-namespace", ownNamespace(),
		"Namespace of the holiday calendars (ConfigMaps labelled "+LabelHolidayCalendar+"=true) that schedules in every namespace may name; "+
			"a calendar in a workload's own namespace shadows one of the same name here.")
	o.Resources = DefaultResources
	fs.Func("scaling-resources",
		"Comma-separated kinds scheduled scaling scales, as <plural>.<group> (default \""+strings.Join(DefaultResources, ",")+
			"\"). Any other resource named is scaled through its /scale subresource once the API server serves it; grant the operator "+
			"get/list/watch/patch on it and get/patch on its scale subresource (docs/scheduled-scaling.md).",
		func(v string) error { o.Resources = splitList(v); return nil })
}

// DefaultExcludeNamespaces are the namespaces kept out of scheduled scaling unless
// --scaling-exclude-namespaces replaces them: Kubernetes' and OpenShift's own, those the
// platform's controllers usually run in (OLM, cert-manager, monitoring, ingress, CNI),
// and own, the operator's (scaling the operator down would leave nothing to scale it
// back up).
func DefaultExcludeNamespaces(own string) []string {
	out := []string{"kube-*", "openshift-*", "olm", "operators", "cert-manager", "monitoring", "prometheus",
		"ingress-nginx", "istio-system", "calico-system", "calico-apiserver", "tigera-operator", "cilium"}
	if own != "" && !slices.Contains(out, own) {
		out = append(out, own)
	}
	return out
}

// ownNamespace is the namespace the operator runs in: POD_NAMESPACE (set from the pod's
// metadata in config/manager), else its service account's.
func ownNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// policy is the operator-wide part of every decision, from the flags.
type policy struct {
	scheduleDefaults schedule.Defaults
	// defaults is the operator's default schedule group; empty if none.
	defaults map[string]string
	// defaultKinds are the resources Namespace annotations and defaults schedule.
	defaultKinds    map[string]bool
	grace           time.Duration
	wakeLead        time.Duration
	dryRun          bool
	excludePatterns []string
	excludeSelector labels.Selector
}

// newPolicy validates the flags by parsing what they give.
func (o *Options) newPolicy() (*policy, error) {
	if o.ExcludeNamespaces == nil {
		o.ExcludeNamespaces = DefaultExcludeNamespaces(ownNamespace())
	}
	if o.DefaultKinds == nil {
		o.DefaultKinds = DefaultScalingKinds
	}
	p := &policy{
		scheduleDefaults: schedule.Defaults{TimeZone: o.TimeZone, Weekdays: o.Weekdays},
		grace:            o.GracePeriod,
		wakeLead:         o.WakeLead,
		dryRun:           o.DryRun,
		defaultKinds:     map[string]bool{},
		excludeSelector:  labels.Nothing(),
	}
	if o.RestoreRate < 0 || o.RestoreRate > 1000 || math.IsNaN(o.RestoreRate) {
		return nil, fmt.Errorf("--scaling-restore-rate: %v is not between 0 and 1000", o.RestoreRate)
	}
	if o.WakeLead < 0 || o.WakeLead > MaxWakeLead {
		return nil, fmt.Errorf("--scaling-wake-lead: %s is not between 0 and 12h", o.WakeLead)
	}
	if o.TimeZone != "" {
		if _, err := schedule.Parse("Mon 00:00-24:00", p.scheduleDefaults); err != nil {
			return nil, fmt.Errorf("--scaling-time-zone: %w", err)
		}
	}
	if o.Weekdays != "" {
		if _, err := schedule.Parse("00:00-24:00 UTC", p.scheduleDefaults); err != nil {
			return nil, fmt.Errorf("--scaling-weekdays: %w", err)
		}
	}
	// Calendars are read once the operator runs; at start only their names are checked.
	syntax := p.scheduleDefaults
	syntax.Calendars = anyCalendar{}
	for flagName, spec := range map[string]string{"--default-uptime": o.DefaultUptime, "--default-downtime": o.DefaultDowntime} {
		if spec == "" {
			continue
		}
		if _, err := schedule.Parse(spec, syntax); err != nil {
			return nil, fmt.Errorf("%s: %w", flagName, err)
		}
	}
	switch {
	case o.DefaultDowntimeReplicas < 0:
		return nil, errors.New("--default-downtime-replicas must be 0 or more")
	case o.DefaultUptime != "" || o.DefaultDowntime != "":
		p.defaults = map[string]string{AnnotationDowntimeReplicas: fmt.Sprint(o.DefaultDowntimeReplicas)}
		if o.DefaultUptime != "" {
			p.defaults[AnnotationUptime] = o.DefaultUptime
		}
		if o.DefaultDowntime != "" {
			p.defaults[AnnotationDowntime] = o.DefaultDowntime
		}
	case o.DefaultDowntimeReplicas != 0:
		return nil, errors.New("--default-downtime-replicas needs --default-uptime or --default-downtime")
	}
	for _, n := range o.ExcludeNamespaces {
		if _, err := path.Match(n, ""); err != nil {
			return nil, fmt.Errorf("--scaling-exclude-namespaces: %q: %w", n, err)
		}
		p.excludePatterns = append(p.excludePatterns, n)
	}
	// A kind named here but not in --scaling-resources is not scaled at all, so naming
	// it changes nothing.
	for _, r := range o.DefaultKinds {
		p.defaultKinds[r] = true
	}
	if o.ExcludeNamespaceSelector != "" {
		sel, err := labels.Parse(o.ExcludeNamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("--scaling-exclude-namespace-selector: %w", err)
		}
		p.excludeSelector = sel
	}
	return p, nil
}

// excluded reports whether a Namespace is kept out of scheduled scaling: by its label,
// or by the flags.
func (p *policy) excluded(name string, nsLabels map[string]string) bool {
	if nsLabels[LabelScaling] == ScalingDisabled || p.excludeSelector.Matches(labels.Set(nsLabels)) {
		return true
	}
	for _, pattern := range p.excludePatterns {
		if ok, _ := path.Match(pattern, name); ok {
			return true
		}
	}
	return false
}

// LiveConcurrencyUpTo is how high --scaling-concurrency can rise while the operator
// runs: the workers each kind's controller starts.
const LiveConcurrencyUpTo = 64

// LiveFlags are the flags whose change Reconfigure applies to a running operator; the
// others take effect at its next start.
var LiveFlags = []string{
	"default-uptime", "default-downtime", "default-downtime-replicas", "default-scaling-kinds",
	"scaling-exclude-namespaces", "scaling-exclude-namespace-selector",
	"scaling-grace-period", "scaling-wake-lead", "scaling-dry-run", "scaling-concurrency",
}

// Validate checks o as SetupWithManager does.
func (o Options) Validate() error {
	if _, err := o.newPolicy(); err != nil {
		return err
	}
	if o.Concurrency < 1 {
		return errors.New("--scaling-concurrency must be at least 1")
	}
	return nil
}

// Scaling is scheduled scaling as set up in a manager.
type Scaling struct{ s *scaler }

// Reconfigure applies the settings of LiveFlags in o to the running controllers and has
// them re-decide every object, so that a workload in a namespace excluded now is
// restored and one the defaults schedule now is scaled. The other settings in o are
// ignored. An invalid o changes nothing.
func (sc *Scaling) Reconfigure(o Options) error {
	o.TimeZone, o.Weekdays = sc.s.opts.TimeZone, sc.s.opts.Weekdays
	p, err := o.newPolicy()
	if err != nil {
		return err
	}
	if o.Concurrency < 1 {
		return errors.New("--scaling-concurrency must be at least 1")
	}
	sc.s.setConcurrency(o.Concurrency)
	sc.s.policy.Store(p)
	sc.s.resyncAll()
	return nil
}

// SetupWithManager registers a controller for every kind named in o.Resources that the
// API server serves now, and sets up the others when they appear.
func SetupWithManager(mgr ctrl.Manager, o Options) (*Scaling, error) {
	p, err := o.newPolicy()
	if err != nil {
		return nil, err
	}
	if o.Concurrency < 1 {
		return nil, errors.New("--scaling-concurrency must be at least 1")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	tracked.setClock(o.Clock)
	if o.Resources == nil {
		o.Resources = DefaultResources
	}
	s, err := newScaler(mgr, o, p)
	if err != nil {
		return nil, err
	}
	if err := s.setup(); err != nil {
		return nil, err
	}
	return &Scaling{s: s}, nil
}
