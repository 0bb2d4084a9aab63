// Command naive is the benchmark baseline for the StorageBucket controller, built the
// way the seed project did it: every tick lists all StorageBuckets and enqueues every
// one of them, each reconcile probes its bucket with HeadBucket and writes the status
// (lastProbeTime) after every probe. It exists only for test/bench and is never a user
// mode of the operator.
//
// To keep the comparison about scheduling and status writes, it probes the way the
// operator does (one shared transport, cached clients, one attempt per probe) and
// ignores its own status writes (GenerationChangedPredicate), so it does not loop.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// The same series names as the operator, so the benchmark reads both the same way.
var (
	lateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "phalanks_storagebucket_probe_lateness_seconds",
		Help: "How long after its tick a probe started.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1, 1.5, 2, 3, 5, 10, 30, 60,
			120, 300},
	})
	probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_probes_total",
		Help: "Probes, by cause.",
	}, []string{"cause"})
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "naive:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr string
		concurrency int
		interval    time.Duration
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:0", "metrics address")
	flag.IntVar(&concurrency, "concurrency", 16, "concurrent reconciles")
	flag.DurationVar(&interval, "interval", 30*time.Second, "tick")
	flag.Parse()
	metrics.Registry.MustRegister(lateness, probes)

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	cfg, err := ctrl.GetConfig() // --kubeconfig is controller-runtime's flag
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	r := &reconciler{client: mgr.GetClient(), ticked: map[types.NamespacedName]time.Time{},
		transport: &http.Transport{MaxIdleConnsPerHost: concurrency, IdleConnTimeout: 90 * time.Second},
		clients:   map[string]*miniogo.Client{}}
	ticks := make(chan event.GenericEvent, 1024)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if err := r.enqueueAll(ctx, ticks); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})); err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("naive-storagebucket").
		For(&phalanksv1beta1.StorageBucket{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(ticks, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(r)
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

type reconciler struct {
	client    client.Client
	transport http.RoundTripper

	mu      sync.Mutex
	ticked  map[types.NamespacedName]time.Time
	clients map[string]*miniogo.Client
}

// enqueueAll lists every StorageBucket and sends each one, remembering the tick time.
func (r *reconciler) enqueueAll(ctx context.Context, ticks chan<- event.GenericEvent) error {
	var list phalanksv1beta1.StorageBucketList
	if err := r.client.List(ctx, &list); err != nil {
		return err
	}
	now := time.Now()
	for i := range list.Items {
		sb := &list.Items[i]
		r.mu.Lock()
		r.ticked[client.ObjectKeyFromObject(sb)] = now
		r.mu.Unlock()
		select {
		case ticks <- event.GenericEvent{Object: sb}:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	r.mu.Lock()
	tick, ticked := r.ticked[req.NamespacedName]
	delete(r.ticked, req.NamespacedName)
	r.mu.Unlock()
	cause := "new"
	if ticked {
		cause = "schedule"
		lateness.Observe(start.Sub(tick).Seconds())
	}
	probes.WithLabelValues(cause).Inc()

	sb := &phalanksv1beta1.StorageBucket{}
	if err := r.client.Get(ctx, req.NamespacedName, sb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	secret := &corev1.Secret{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: sb.Spec.CredentialsSecretRef.Name}, secret); err != nil {
		return ctrl.Result{}, err
	}
	c, err := r.clientFor(sb, secret)
	if err != nil {
		return ctrl.Result{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, sb.Spec.HealthCheck.TimeoutDuration())
	_, probeErr := c.BucketExists(pctx, sb.Spec.BucketName)
	cancel()

	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "BucketReady", Message: "HeadBucket passed"}
	if probeErr != nil {
		cond = metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ProbeFailed", Message: probeErr.Error()}
	}
	before := sb.DeepCopy()
	meta.SetStatusCondition(&sb.Status.Conditions, cond)
	now := metav1.NewTime(start)
	sb.Status.LastProbeTime = &now
	sb.Status.ObservedGeneration = sb.Generation
	return ctrl.Result{}, r.client.Status().Patch(ctx, sb, client.MergeFrom(before))
}

func (r *reconciler) clientFor(sb *phalanksv1beta1.StorageBucket, secret *corev1.Secret) (*miniogo.Client, error) {
	idKey, secretKey := sb.Spec.CredentialsSecretRef.Keys()
	id, key := string(secret.Data[idKey]), string(secret.Data[secretKey])
	cacheKey := sb.Spec.Endpoint + "|" + id + "|" + key
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[cacheKey]; ok {
		return c, nil
	}
	host := sb.Spec.Endpoint[len("http://"):]
	c, err := miniogo.New(host, &miniogo.Options{Creds: credentials.NewStaticV4(id, key, ""), Region: sb.Spec.Region,
		Transport: r.transport, MaxRetries: 1})
	if err != nil {
		return nil, err
	}
	r.clients[cacheKey] = c
	return c, nil
}
