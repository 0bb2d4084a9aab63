// Package storagebucket is the StorageBucket controller: it probes each bucket on its
// own schedule (a due-time heap fed to the controller by a leader-only ticker through a
// channel source), records the health in status only when it changes, manages the
// bucket under managementPolicy Manage, and deletes it by policy.
package storagebucket

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpproxy"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/source"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/grandfather"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/sharding"
	"github.com/phalanks/phalanks-operator/internal/workers"
)

// Options configure the StorageBucket controller.
type Options struct {
	// Concurrency bounds how many buckets are probed (reconciled) at once.
	Concurrency int
	// Tick is the longest the ticker sleeps without looking at the schedule; it wakes
	// for each bucket's due time anyway (at most dispatchGather after it).
	Tick time.Duration
	// StatusHeartbeat is how often an unchanged status is still written, to refresh
	// lastProbeTime.
	StatusHeartbeat time.Duration
	// EndpointAllowCIDRs and EndpointDenyCIDRs add to the endpoint policy's built-in
	// rules (see s3probe.Policy).
	EndpointAllowCIDRs, EndpointDenyCIDRs []string
	// EndpointAllowUnresolvableViaProxy trusts the egress proxy's resolution of an
	// endpoint name that does not resolve where the operator runs.
	EndpointAllowUnresolvableViaProxy bool
	// AmbientCredentials gives a StorageBucket without a credentials Secret the
	// operator's own credentials (s3probe.AmbientCredentials) instead of none.
	AmbientCredentials bool
	// NamespaceDeletionTimeout is how long a StorageBucket in a namespace being deleted
	// waits for its bucket to be deleted before it lets go and keeps the bucket.
	NamespaceDeletionTimeout time.Duration
	// Shard, when set, makes this replica one member of a ring that shares the
	// StorageBuckets: the controller runs on every replica, not only the elected one,
	// and probes, manages and writes only the buckets of the member's slots. Nil means
	// the elected replica handles every bucket.
	Shard *sharding.Member
	// ShardLeaseDuration, ShardRenewPeriod and ServerSideSharding are the ring's flags
	// (main.go builds Shard from them).
	ShardLeaseDuration, ShardRenewPeriod time.Duration
	ServerSideSharding                   string
	// Grandfathered holds the credentials references that predate the Secret label rule,
	// whose unlabelled Secrets are still read; nil refuses every unlabelled Secret.
	Grandfathered *grandfather.Record
	// Clock drives the schedule; nil means the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// EgressProxy, when set, is the URL of the proxy of every request to a StorageBucket
	// endpoint, plain and TLS, except to the hosts EgressNoProxy lists (NO_PROXY's
	// syntax); empty leaves it to HTTPS_PROXY, HTTP_PROXY and NO_PROXY from the
	// environment. ValidateProxy checks them.
	EgressProxy   string
	EgressNoProxy string
	// Resolver and Proxy replace the system resolver and the proxy, for tests; nil means
	// the defaults. Proxy wins over EgressProxy.
	Resolver *net.Resolver
	Proxy    func(*http.Request) (*url.URL, error)
}

// Defaults of the flags.
const (
	defaultConcurrency = 32
	defaultTick        = time.Second
	// At a 30s interval a healthy bucket is probed 120 times per hour: one heartbeat
	// write per 120 probes, under 0.01 writes per probe.
	defaultStatusHeartbeat          = time.Hour
	defaultNamespaceDeletionTimeout = 5 * time.Minute
	// liveConcurrencyUpTo is how high --storagebucket-concurrency can rise while the
	// operator runs: the workers started (about 3 KiB each while idle).
	liveConcurrencyUpTo       = 256
	defaultShardLeaseDuration = 15 * time.Second
	defaultShardRenewPeriod   = 5 * time.Second
)

// BindFlags registers the controller's flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Concurrency, "storagebucket-concurrency", defaultConcurrency,
		"How many StorageBuckets are probed at once. Size it to cover the buckets due per second "+
			"times the probe latency; a probe that times out holds its slot for the whole healthCheck.timeout. "+
			fmt.Sprintf("Changes while the operator runs up to %d (or the value at start, if higher).", liveConcurrencyUpTo))
	fs.DurationVar(&o.Tick, "storagebucket-tick", defaultTick,
		"The longest the scheduler sleeps without looking at the schedule; it wakes for each StorageBucket's due time anyway "+
			"(at most 20ms after it, so the StorageBuckets due meanwhile share the wake-up).")
	fs.DurationVar(&o.StatusHeartbeat, "storagebucket-status-heartbeat", defaultStatusHeartbeat,
		"How often a StorageBucket status that did not change is still written, to refresh lastProbeTime. "+
			"Changes (conditions, observedGeneration, certificate expiry) are written at once.")
	fs.Func("storagebucket-endpoint-allow-cidrs",
		"Comma-separated CIDR prefixes (or addresses) StorageBucket endpoints may connect to although a built-in or denied "+
			"prefix contains them, e.g. 127.0.0.1/32 for an S3 server on the node. The most specific prefix decides.",
		appendCIDRs(&o.EndpointAllowCIDRs))
	fs.Func("storagebucket-endpoint-deny-cidrs",
		"Comma-separated CIDR prefixes StorageBucket endpoints may not connect to, besides the built-in ones (loopback, "+
			"link-local, cloud metadata, unspecified, multicast), e.g. the cluster's Pod and Service ranges.",
		appendCIDRs(&o.EndpointDenyCIDRs))
	fs.BoolVar(&o.EndpointAllowUnresolvableViaProxy, "storagebucket-endpoint-allow-unresolvable-via-proxy", false,
		"With an egress proxy (HTTPS_PROXY, HTTP_PROXY), allow StorageBucket endpoints whose names do not resolve where the "+
			"operator runs, trusting the proxy's resolution and its egress policy. Off, such a name is denied: the operator "+
			"cannot check where it leads.")
	// A function, not fs.StringVar: the flag package would quote a bad value in its
	// error, and ValidateProxy says what is wrong without the password a URL may hold.
	fs.Func("storagebucket-proxy",
		"The proxy StorageBucket endpoints are reached through (an http://, https:// or socks5:// URL), for plain and TLS "+
			"endpoints alike. Only these requests use it, never the Kubernetes client. Empty: HTTPS_PROXY, HTTP_PROXY "+
			"and NO_PROXY from the environment decide.",
		func(v string) error { o.EgressProxy = v; return nil })
	fs.StringVar(&o.EgressNoProxy, "storagebucket-no-proxy", "",
		"With --storagebucket-proxy, the endpoints reached directly, in NO_PROXY's syntax: comma-separated host names, "+
			".domain suffixes, addresses and CIDR prefixes, each with an optional :port.")
	fs.BoolVar(&o.AmbientCredentials, "storagebucket-ambient-credentials", false,
		"Give StorageBuckets without credentialsSecretRef the operator's own credentials (its environment's AWS_ACCESS_KEY_ID, "+
			"a web identity token file (IRSA), EKS Pod Identity, instance metadata) instead of anonymous requests. Every "+
			"namespace that can create a StorageBucket then acts with the operator's rights: for single-tenant clusters only.")
	fs.DurationVar(&o.NamespaceDeletionTimeout, "storagebucket-namespace-deletion-timeout", defaultNamespaceDeletionTimeout,
		"How long a StorageBucket with deletionPolicy Delete in a namespace being deleted waits for its bucket to be "+
			"deleted; then it lets go, keeping the bucket, so the namespace deletion completes.")
	fs.DurationVar(&o.ShardLeaseDuration, "storagebucket-shard-lease-duration", defaultShardLeaseDuration,
		"With --leader-elect, every replica probes a share of the StorageBuckets and holds a Lease in the ring; a replica "+
			"that stops renewing it loses its share to the others after this long. Size replicas so that each probes at "+
			"most concurrency / probe latency buckets per second (docs/storagebucket.md, \"Running more than one replica\").")
	fs.DurationVar(&o.ShardRenewPeriod, "storagebucket-shard-renew-period", defaultShardRenewPeriod,
		"How often a replica renews its ring Lease and rereads the ring's members; a joining or leaving replica "+
			"is seen by the others within this period.")
	fs.StringVar(&o.ServerSideSharding, "storagebucket-server-side-sharding", "auto",
		"Whether each replica's StorageBucket informer asks the API server for its share only (KEP-5866 shard "+
			"selectors, feature gate ShardedListAndWatch): auto (when the API server supports it), true, or false "+
			"(hold every StorageBucket and filter in the replica).")
}

// parseProxyURL reads --storagebucket-proxy: empty is no proxy. A user name or password
// in it is refused, since the configuration is not a Secret; no error quotes them.
func parseProxyURL(v string) (*url.URL, error) {
	if v = strings.TrimSpace(v); v == "" {
		return nil, nil
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return nil, errors.New("--storagebucket-proxy is not a URL")
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5":
		return nil, fmt.Errorf("--storagebucket-proxy %q: the scheme must be http, https or socks5", u.Redacted())
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("--storagebucket-proxy %q has no host", u.Redacted())
	case u.User != nil:
		return nil, fmt.Errorf("--storagebucket-proxy %q holds credentials, which the configuration must not: a proxy that needs them is not supported", u.Redacted())
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("--storagebucket-proxy %q: a proxy URL is a scheme, a host and a port only", u.Redacted())
	}
	return u, nil
}

// ValidateProxy checks --storagebucket-proxy, and that --storagebucket-no-proxy comes
// with it.
func (o *Options) ValidateProxy() error {
	if _, err := parseProxyURL(o.EgressProxy); err != nil {
		return err
	}
	if o.EgressNoProxy != "" && strings.TrimSpace(o.EgressProxy) == "" {
		return errors.New("--storagebucket-no-proxy is set without --storagebucket-proxy: NO_PROXY from the environment applies then")
	}
	return nil
}

// proxyFunc is the proxy choice of S3 requests: the test's, then --storagebucket-proxy's,
// then nil (the environment's).
func (o *Options) proxyFunc() func(*http.Request) (*url.URL, error) {
	u, err := parseProxyURL(o.EgressProxy)
	if o.Proxy != nil || u == nil || err != nil {
		return o.Proxy
	}
	p := u.String()
	choose := (&httpproxy.Config{HTTPProxy: p, HTTPSProxy: p, NoProxy: o.EgressNoProxy}).ProxyFunc()
	return func(r *http.Request) (*url.URL, error) { return choose(r.URL) }
}

func appendCIDRs(to *[]string) func(string) error {
	return func(v string) error {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				*to = append(*to, c)
			}
		}
		return nil
	}
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = defaultConcurrency
	}
	if o.Tick <= 0 {
		o.Tick = defaultTick
	}
	if o.StatusHeartbeat <= 0 {
		o.StatusHeartbeat = defaultStatusHeartbeat
	}
	if o.NamespaceDeletionTimeout <= 0 {
		o.NamespaceDeletionTimeout = defaultNamespaceDeletionTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// mayHaveMissed reports whether the previous owner of a bucket this replica took over
// may have missed its probe at the grid instant prev: a replica that crashed stopped
// probing up to a lease duration and two renew periods before its slots were taken
// over, one that left up to two renew periods before (sharding.Gain). Without a shard
// ring, and for what a replica owns from its start, nothing counts as missed.
func (r *Reconciler) mayHaveMissed(uid types.UID, prev time.Time) bool {
	if r.opts.Shard == nil {
		return false
	}
	g := r.opts.Shard.Gained(sharding.SlotOf(uid))
	return g.Window > 0 && prev.After(g.At.Add(-g.Window))
}

// owns reports whether this replica handles the StorageBucket with this UID.
func (r *Reconciler) owns(uid types.UID) bool {
	return r.opts.Shard == nil || r.opts.Shard.OwnsUID(uid)
}

// The controller reads StorageBuckets and writes their status and finalizer. It watches
// the metadata of ConfigMaps and of the Secrets labelled phalanks.io/storagebucket-secret,
// reads the data of the referenced ones (get), and reads Namespaces to tell whether one
// is being deleted. RBAC has no metadata-only verb: list and watch on Secrets would
// allow reading every Secret's data, although the operator asks only for the metadata
// of labelled ones (docs/storagebucket.md, "What the operator can read").
// +kubebuilder:rbac:groups=phalanks.io,resources=storagebuckets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=phalanks.io,resources=storagebuckets/status,verbs=get;patch
// +kubebuilder:rbac:groups=phalanks.io,resources=storagebuckets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// Reconciler reconciles StorageBuckets.
type Reconciler struct {
	client   client.Client
	api      client.Reader
	recorder events.EventRecorder
	clock    clock.WithTicker
	prober   *s3probe.Prober
	sched    *scheduler
	refs     *refReader
	mem      *memory
	opts     Options
	// heartbeat is opts.StatusHeartbeat, which Reconfigure changes while it runs.
	heartbeat atomic.Int64
	// concurrency is opts.Concurrency, which Reconfigure changes while it runs.
	concurrency *workers.Limit
}

// LiveFlags are the flags whose change Reconfigure applies to a running operator; the
// others take effect at its next start.
var LiveFlags = []string{"storagebucket-status-heartbeat", "storagebucket-concurrency"}

// Reconfigure applies the settings of LiveFlags in o to the running controller; the
// other settings in o are ignored. The status heartbeat counts from each StorageBucket's
// lastProbeTime, so a shorter one is due at the bucket's next probe. A lower
// concurrency lets the probes running finish; a higher one is capped at the workers
// started (liveConcurrencyUpTo, or the concurrency at start if higher).
func (r *Reconciler) Reconfigure(o Options) error {
	o.defaults()
	r.heartbeat.Store(int64(o.StatusHeartbeat))
	r.concurrency.Set(o.Concurrency)
	return nil
}

// statusHeartbeat is the status heartbeat in force.
func (r *Reconciler) statusHeartbeat() time.Duration { return time.Duration(r.heartbeat.Load()) }

// SetupWithManager registers the StorageBucket controller, its field indexes, its
// Secret informer and its leader-only ticker with the manager.
func SetupWithManager(mgr ctrl.Manager, o Options) (*Reconciler, error) {
	o.defaults()
	if err := o.ValidateProxy(); err != nil {
		return nil, err
	}
	policy, err := s3probe.NewPolicy(o.EndpointAllowCIDRs, o.EndpointDenyCIDRs)
	if err != nil {
		return nil, err
	}
	pool := &s3probe.Pool{MaxIdleConnsPerHost: o.Concurrency, Clock: o.Clock, Policy: policy, Resolver: o.Resolver, Proxy: o.proxyFunc(),
		UnresolvableViaProxy: o.EndpointAllowUnresolvableViaProxy}
	secrets, err := newSecretInformer(mgr)
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		client:   mgr.GetClient(),
		api:      mgr.GetAPIReader(),
		recorder: mgr.GetEventRecorder("storagebucket-controller"),
		clock:    o.Clock,
		prober:   &s3probe.Prober{Pool: pool, Clock: o.Clock},
		sched:    newScheduler(),
		refs:     &refReader{secrets: secrets, configMaps: mgr.GetClient(), api: mgr.GetAPIReader()},
		mem:      newMemory(),
		opts:     o,

		concurrency: workers.New(o.Concurrency, liveConcurrencyUpTo),
	}
	r.heartbeat.Store(int64(o.StatusHeartbeat))
	due := make(chan event.TypedGenericEvent[dueBatch], 1)
	if err := mgr.Add(&ticker{sched: r.sched, events: due, period: o.Tick, gather: dispatchGather, clock: o.Clock, leaderOnly: o.Shard == nil,
		onDispatch: func(n int) { dispatchedBuckets.Add(float64(n)); scheduledBuckets.Set(float64(r.sched.Len())) }}); err != nil {
		return nil, fmt.Errorf("add StorageBucket ticker: %w", err)
	}
	if err := mgr.Add(seriesServer{mem: r.mem, leaderOnly: o.Shard == nil}); err != nil {
		return nil, fmt.Errorf("add StorageBucket series: %w", err)
	}
	handover, err := r.setupShard(mgr)
	if err != nil {
		return nil, err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("storagebucket").
		For(&phalanksv1beta1.StorageBucket{}, builder.WithPredicates(r.ownedOrDeleted(), specOrLifecycleChanged())).
		WatchesRawSource(source.Kind(secrets, secretMetadata(), referenceChanged[*metav1.PartialObjectMetadata](r, kindSecret))).
		WatchesMetadata(&corev1.ConfigMap{}, referenceChanged[client.Object](r, kindConfigMap)).
		WatchesRawSource(source.Channel(due, dueHandler())).
		WatchesRawSource(source.Channel(handover, handoverHandler())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.concurrency.Workers(), NeedLeaderElection: new(o.Shard == nil)}).
		WithLogConstructor(requestLogger(mgr.GetLogger().WithValues("controller", "storagebucket"))).
		Complete(workers.Reconciler(r.concurrency, r))
	if err != nil {
		return nil, fmt.Errorf("set up StorageBucket controller: %w", err)
	}
	return r, nil
}

// Reconcile probes a StorageBucket when it is due (or its spec or inputs changed),
// manages or deletes its bucket by policy, and writes the status when it changed.
//
// Requeueing: the bucket stays on its schedule whatever a pass does (the deferred Arm),
// so the ticker looks at it again at its next due time. Problems with the bucket or the
// endpoint are results, reported in the status, never errors. An API error (reading a
// Secret, patching the status or the finalizer) is returned as well, so the controller
// retries it with backoff before the next due time; a status patch that lost a race
// with another write is retried at once through the schedule instead (writeStatus).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Most passes only read the object, so they read the cache's own copy: every write
	// (patchStatus, the finalizer patches) works on a deep copy of it. The struct it is
	// read into is reused by later passes; nothing keeps it beyond this one.
	sb := shells.Get().(*phalanksv1beta1.StorageBucket)
	defer func() { *sb = phalanksv1beta1.StorageBucket{}; shells.Put(sb) }()
	if err := r.client.Get(ctx, req.NamespacedName, sb, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			for _, uid := range r.knownAs(req.NamespacedName) {
				r.forget(uid)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get StorageBucket: %w", err)
	}
	ctx, slot, owned := r.begin(ctx, sb.UID)
	if owned {
		defer r.end(slot)
	}
	if !owned || !r.owns(sb.UID) {
		// Another replica's share (or ours until a moment ago): drop what we hold under
		// this name, also for a predecessor of ours that was deleted and replaced by this
		// one before we saw it go (its series and schedule would outlive it).
		for _, uid := range append(r.knownAs(req.NamespacedName), sb.UID) {
			r.forget(uid)
		}
		return ctrl.Result{}, nil
	}
	if known, ok := r.mem.uidOf(req.NamespacedName); r.opts.Shard != nil && (!ok || known != sb.UID) {
		// The first pass since this replica took the slot: its cache may still hold a
		// StorageBucket that another replica deleted meanwhile (this process was paused
		// or its watch away), whose bucket name a new StorageBucket may have taken since.
		if current, err := r.current(ctx, sb); err != nil || !current {
			r.forget(sb.UID)
			return ctrl.Result{}, err
		}
	}
	if predecessor, replaced := r.mem.track(sb.UID, req.NamespacedName); replaced {
		// Deleted and created again while the queue merged the events: the old object's
		// memory and schedule go, the new one starts unknown.
		r.forget(predecessor)
	}
	defer r.sched.Arm(sb.UID)

	if !sb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, sb)
	}
	if added, err := r.reconcileFinalizer(ctx, sb); err != nil || added {
		// The finalizer comes first; its update event starts the next pass.
		return ctrl.Result{}, err
	}
	st := r.mem.state(sb.UID)
	in, err := r.inputsFor(ctx, sb, st)
	if err != nil {
		return ctrl.Result{}, err
	}

	now := r.clock.Now()
	due, scheduled := r.sched.Due(sb.UID)
	cause := decideProbe(sb, st, in.fingerprint, due, scheduled, now)
	if cause == causeSchedule && st == nil && r.sched.Resuming(sb.UID) {
		cause = causeResume
	}
	switch cause {
	case causeNone:
	case causeResume:
		if scheduled {
			st = r.probe(ctx, sb, in, st, cause, due, now)
			break
		}
		r.continueTakenOver(sb, now)
		return ctrl.Result{}, nil
	default:
		st = r.probe(ctx, sb, in, st, cause, due, now)
	}
	if st == nil {
		return ctrl.Result{}, nil
	}
	if ctx.Err() != nil && !r.owns(sb.UID) {
		// The slot was given up during the pass, which was stopped: its result is not
		// this replica's to write.
		r.forget(sb.UID)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.writeStatus(ctx, sb, st)
}

// shells are the structs passes read their StorageBucket into.
var shells = sync.Pool{New: func() any { return &phalanksv1beta1.StorageBucket{} }}

// knownAs returns the UIDs this process holds anything for under a name.
func (r *Reconciler) knownAs(key types.NamespacedName) []types.UID {
	uids := r.sched.UIDsOf(key)
	if uid, ok := r.mem.uidOf(key); ok {
		uids = append(uids, uid)
	}
	return uids
}

// forgetSlots forgets every StorageBucket of the slots (given up to another replica).
func (r *Reconciler) forgetSlots(slots sharding.Set) {
	if slots == 0 {
		return
	}
	for _, uid := range r.sched.UIDsIn(slots) {
		r.forget(uid)
	}
	for _, uid := range r.mem.uidsIn(slots) {
		r.forget(uid)
	}
}

// forget drops a StorageBucket that is gone (or replaced by a new object of the same
// name) from the schedule, the memory, the referenced objects' data and the metrics.
func (r *Reconciler) forget(uid types.UID) {
	r.sched.Forget(uid)
	r.refs.release(uid)
	r.mem.forget(uid) // its series go with it
	scheduledBuckets.Set(float64(r.sched.Len()))
}
