// Command manager runs the phalanks-operator controllers and webhooks.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	// The operator image has no CA certificates (an empty base): with no system roots,
	// TLS to S3 endpoints verifies against the Mozilla roots compiled in here.
	// SSL_CERT_FILE and SSL_CERT_DIR still take precedence.
	_ "golang.org/x/crypto/x509roots/fallback"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/foo"
	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/controllers/storagebucket"
	"github.com/phalanks/phalanks-operator/internal/certrotation"
	"github.com/phalanks/phalanks-operator/internal/clockoffset"
	"github.com/phalanks/phalanks-operator/internal/grandfather"
	"github.com/phalanks/phalanks-operator/internal/memlimit"
	"github.com/phalanks/phalanks-operator/internal/selfscale"
	"github.com/phalanks/phalanks-operator/internal/sharding"
	"github.com/phalanks/phalanks-operator/internal/storagemigration"
	"github.com/phalanks/phalanks-operator/internal/webhooks"
)

// defaultWebhookDrain covers kube-proxy's reaction to a pod's deletion (its rules are
// synced within a second or two of the EndpointSlice change) with room for a loaded node.
const defaultWebhookDrain = 5 * time.Second

// leaderElectionID names the Lease that elects the one replica running leader-only work.
const leaderElectionID = "phalanks-operator.phalanks.io"

// storageBucketCRD is the CRD whose conversion webhook the manager serves.
var storageBucketCRD = "storagebuckets." + phalanksv1beta1.GroupVersion.Group

// config is everything the command line sets. Each controller package owns its options
// (an Options struct with BindFlags) and is registered in setupReconcilers.
type config struct {
	metricsAddr    string
	metricsSecure  bool
	metricsCertDir string
	probeAddr      string
	pprofAddr      string
	webhookPort    int
	webhookCertDir string
	webhookDrain   time.Duration
	// webhookDrainSet: --webhook-shutdown-delay was given (outside a pod it defaults to 0).
	webhookDrainSet bool
	enableHTTP2     bool
	certRotation    certrotation.Options

	leaderElect          bool
	leaderElectNamespace string
	leaseDuration        time.Duration
	renewDeadline        time.Duration
	retryPeriod          time.Duration
	shutdownTimeout      time.Duration

	// controllers is --controllers; enabled is the set it names.
	controllers string
	enabled     map[string]bool

	kubeAPIQPS   float64
	kubeAPIBurst int
	kubeconfig   string
	// memoryLimitRatio is the share of the container's memory limit given to Go's
	// garbage collector as its soft limit (internal/memlimit).
	memoryLimitRatio float64
	// operatorReplicas is the count the elected replica keeps its own Deployment at; 0
	// leaves it alone.
	operatorReplicas int
	// unknownEnv are PHALANKS_ variables that name no flag, ignored.
	unknownEnv []string
	// configMap names the configuration ConfigMap in the operator's namespace;
	// fromConfigMap are the values its keys gave flags, by flag, and unknownConfigKeys
	// its keys that name none, ignored.
	configMap         string
	fromConfigMap     map[string]string
	unknownConfigKeys []string
	// configHash identifies the ConfigMap's data (phalanks_config_hash).
	configHash float64
	// args is the command line, which a reload of the ConfigMap parses again.
	args []string
	// logLevel is the level of the process's logger, which a reload may change.
	logLevel uberzap.AtomicLevel

	scaling       scaling.Options
	foo           foo.Options
	storageBucket storagebucket.Options

	zap zap.Options
}

// newFlagSet registers every flag of the manager, bound to c: its own, the
// controllers', controller-runtime's --kubeconfig and zap's. docs/configuration.md lists
// them all (TestConfigurationReferenceListsEveryFlag).
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":8443",
		"Address the metrics endpoint binds to; \"0\" disables it.")
	fs.BoolVar(&c.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS and require an authenticated, authorized client. "+
			"Set to false only when something else protects the endpoint.")
	fs.StringVar(&c.metricsCertDir, "metrics-cert-dir", "",
		"Directory with tls.crt and tls.key for the metrics endpoint; empty generates a self-signed certificate.")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz endpoints bind to.")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "",
		"Address Go's /debug/pprof endpoints bind to, without authentication; empty (the default) disables them. "+
			"For profiling on a trusted network only.")
	fs.IntVar(&c.webhookPort, "webhook-port", webhook.DefaultPort, "Port the webhook server (CRD conversion) listens on.")
	fs.StringVar(&c.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"Directory with the webhook server's tls.crt and tls.key (where OLM mounts them). "+
			"Outside a cluster, when they are missing, the manager serves with a self-signed certificate.")
	fs.DurationVar(&c.webhookDrain, "webhook-shutdown-delay", defaultWebhookDrain,
		"How long the webhook server (CRD conversion) keeps serving after the manager stopped: the API server may send "+
			"conversion requests to a pod being replaced until kube-proxy drops it from the webhook Service. The process "+
			"exits after it. Outside a pod the default is 0 (no Service).")
	c.certRotation.BindFlags(fs)
	fs.BoolVar(&c.enableHTTP2, "enable-http2", false,
		"Serve HTTP/2 on the metrics and webhook servers (off by default: CVE-2023-44487, CVE-2023-39325).")
	fs.BoolVar(&c.leaderElect, "leader-elect", false,
		"Elect a leader that runs the leader-only work (Foo, scheduled scaling, storage migration); the replicas "+
			"also share the StorageBuckets through a ring of Leases in the same namespace.")
	fs.StringVar(&c.leaderElectNamespace, "leader-elect-namespace", "",
		"Namespace of the leader election Lease and the StorageBucket ring's Leases; empty means the pod's namespace "+
			"(POD_NAMESPACE, else the service account's), or outside a cluster the namespace of the kubeconfig's current context.")
	fs.DurationVar(&c.leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long a non-leader waits before it may take over an unrenewed lease.")
	fs.DurationVar(&c.renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps retrying to renew before it gives up leadership.")
	fs.DurationVar(&c.retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often candidates try to acquire or renew the lease.")
	fs.DurationVar(&c.shutdownTimeout, "graceful-shutdown-timeout", 30*time.Second,
		"How long to wait for running reconciles and probes on SIGTERM.")
	fs.StringVar(&c.controllers, "controllers", strings.Join(controllerNames, ","),
		"The controllers this operator runs, separated by commas, of "+strings.Join(controllerNames, ", ")+
			". One left out starts no watch of its kinds and needs none of its permissions; the StorageBucket "+
			"conversion webhook is served either way.")
	c.scaling.BindFlags(fs)
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", 0,
		"Client-side limit of requests per second to the API server; 0 leaves it off and relies on API Priority and Fairness.")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 0,
		"Burst above --kube-api-qps; 0 means client-go's default (10).")
	fs.Float64Var(&c.memoryLimitRatio, "memory-limit-ratio", 0.9,
		"Share of the container's memory limit (its cgroup's) given to Go's garbage collector as a soft limit, so that "+
			"it collects harder near the limit instead of the kernel killing the process; 0 turns this off. "+
			"GOMEMLIMIT, when set, wins.")
	fs.IntVar(&c.operatorReplicas, "operator-replicas", 2,
		"Replicas of the operator's own Deployment, which the elected replica keeps through the Deployment's scale "+
			"subresource (raising it one replica at a time, each once all are available), across upgrades on every "+
			"install path; 0 leaves the count to whoever else sets it (kubectl scale, an autoscaler). At most 64.")
	fs.StringVar(&c.configMap, "config-map", defaultConfigMap,
		"Name of the ConfigMap in the operator's namespace whose keys, named as these flags, set what neither a flag "+
			"nor its environment variable sets; it may be missing. Empty reads none.")
	c.foo.BindFlags(fs)
	c.storageBucket.BindFlags(fs)
	ctrlconfig.RegisterFlags(fs)
	c.zap = zap.Options{}
	c.zap.BindFlags(fs)
	return fs
}

// parseFlags is the configuration the command line and the environment set.
func parseFlags(args []string) (config, error) { return parseConfig(args, nil) }

// parseConfig is the configuration the command line, the environment and cm (nil: no
// ConfigMap) set, in that order of precedence, validated.
func parseConfig(args []string, cm *configMapData) (config, error) {
	c := config{args: args}
	fs := newFlagSet(&c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	unknown, err := setFromEnv(fs, environ())
	if err != nil {
		return c, err
	}
	c.unknownEnv = unknown
	if cm != nil {
		c.configHash = configHash(cm.data)
		if c.fromConfigMap, c.unknownConfigKeys, err = setFromConfigMap(fs, cm.data, cm.source); err != nil {
			return c, err
		}
	}
	fs.Visit(func(f *flag.Flag) { c.webhookDrainSet = c.webhookDrainSet || f.Name == "webhook-shutdown-delay" })
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.enabled, err = parseControllers(c.controllers); err != nil {
		return c, fmt.Errorf("--controllers: %w", err)
	}
	if c.enabled[controllerScaling] {
		if err := c.scaling.Validate(); err != nil {
			return c, err
		}
	}
	if c.enabled[controllerStorageBucket] {
		if err := c.storageBucket.ValidateProxy(); err != nil {
			return c, err
		}
	}
	if c.leaderElect {
		if err := sharding.ValidateTiming(c.storageBucket.ShardLeaseDuration, c.storageBucket.ShardRenewPeriod); err != nil {
			return c, fmt.Errorf("--storagebucket-shard-lease-duration and --storagebucket-shard-renew-period: %w", err)
		}
	}
	if err := c.certRotation.Validate(); err != nil {
		return c, err
	}
	if c.operatorReplicas < 0 || c.operatorReplicas > selfscale.MaxReplicas {
		return c, fmt.Errorf("--operator-replicas: %d is not between 0 and %d", c.operatorReplicas, selfscale.MaxReplicas)
	}
	if c.memoryLimitRatio < 0 || c.memoryLimitRatio > 1 || math.IsNaN(c.memoryLimitRatio) {
		return c, fmt.Errorf("--memory-limit-ratio: %v is not between 0 and 1", c.memoryLimitRatio)
	}
	if c.certRotation.Enabled && c.metricsCertDir != "" {
		return c, errors.New("--metrics-cert-dir and --webhook-cert-rotation: with the rotation on, the metrics endpoint serves the rotated certificate")
	}
	c.kubeconfig = fs.Lookup(ctrlconfig.KubeconfigFlagName).Value.String()
	return c, nil
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	// The storage migration reads and patches the StorageBucket CRD.
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	utilruntime.Must(phalanksv1beta1.AddToScheme(s))
	return s
}

// cgroupRoot is where a container sees its own cgroup (its memory limit).
const cgroupRoot = "/sys/fs/cgroup"

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	if cfg, err = withConfigMap(context.Background(), cfg, restCfg); err != nil {
		return err
	}
	cfg.logLevel = liveLogLevel(&cfg.zap)
	logger := zap.New(zap.UseFlagOptions(&cfg.zap))
	ctrl.SetLogger(logger)
	// client-go (leader election, the event broadcaster) logs through klog: the same
	// structured lines, not klog's own text format.
	klog.SetLogger(logger)
	log := ctrl.Log.WithName("setup")
	if len(cfg.unknownEnv) > 0 {
		log.Info("WARNING: ignoring environment variables that name no flag", "variables", cfg.unknownEnv)
	}
	if len(cfg.unknownConfigKeys) > 0 {
		log.Info("WARNING: ignoring keys of the configuration ConfigMap that name no flag", "keys", cfg.unknownConfigKeys)
	}
	if len(cfg.fromConfigMap) > 0 {
		log.Info("settings from the configuration ConfigMap", "configMap", cfg.configMap, "flags", slices.Sorted(maps.Keys(cfg.fromConfigMap)))
	}
	mem, err := memlimit.Set(cgroupRoot, cfg.memoryLimitRatio, os.Getenv("GOMEMLIMIT"))
	if err != nil {
		// A limit that cannot be read leaves Go's default: the process runs as it would
		// without this, and says why.
		log.Error(err, "cannot read the container's memory limit; the garbage collector has no soft limit")
	} else {
		log.Info("memory limit", "containerBytes", mem.Container, "garbageCollectorSoftLimitBytes", mem.Soft, "because", mem.Why)
	}
	if err := leaseNamespace(&cfg, log); err != nil {
		return err
	}
	removeCerts, err := outOfClusterDefaults(&cfg, log)
	if err != nil {
		return err
	}
	defer removeCerts()
	clk, offset, err := clockoffset.FromEnv()
	if err != nil {
		return err
	}
	if offset != 0 {
		log.Info("WARNING: this process's clock is shifted for fault-injection testing", "variable", clockoffset.EnvVar, "offset", offset.String())
	}
	cfg.storageBucket.Clock = clk

	if cfg.kubeAPIQPS > 0 {
		restCfg.QPS, restCfg.Burst = float32(cfg.kubeAPIQPS), cfg.kubeAPIBurst
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := newManager(ctx, cfg, restCfg, log)
	if err != nil {
		return err
	}
	log.Info("starting manager")
	err = mgr.Start(ctx)
	if s, ok := mgr.GetWebhookServer().(*drainingServer); ok {
		s.Wait()
	}
	if err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// newManager builds the manager with the controllers cfg turns on, the conversion
// webhook, the storage migration and the health checks, not yet started.
func newManager(ctx context.Context, cfg config, restCfg *rest.Config, log logr.Logger) (manager.Manager, error) {
	newInformer, err := setupShard(&cfg, restCfg, log)
	if err != nil {
		return nil, err
	}
	var rotation *certrotation.Rotation
	if cfg.certRotation.Enabled {
		rotation = certrotation.New(ctx, cfg.certRotation, cfg.webhookCertDir)
	}
	opts := managerOptions(cfg, rotation)
	opts.Cache.NewInformer = newInformer
	mgr, err := ctrl.NewManager(restCfg, opts)
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	grandfathered, err := grandfatheredReferences(mgr, cfg)
	if err != nil {
		return nil, err
	}
	cfg.storageBucket.Grandfathered = grandfathered
	if rotation != nil {
		if err := rotation.Add(mgr, podNamespace(), []string{storageBucketCRD}); err != nil {
			return nil, err
		}
	}
	reconfigure, err := setupReconcilers(mgr, cfg)
	if err != nil {
		return nil, err
	}
	if keeper, err := replicaKeeper(mgr, cfg, log); err != nil {
		return nil, err
	} else if keeper != nil {
		controllers := reconfigure
		reconfigure = func(c config) error {
			if err := controllers(c); err != nil {
				return err
			}
			keeper.Set(c.operatorReplicas)
			return nil
		}
	}
	if err := webhooks.Setup(mgr); err != nil {
		return nil, fmt.Errorf("set up webhooks: %w", err)
	}
	reloader, err := newConfigReloader(mgr, cfg, restCfg, reconfigure, log)
	if err != nil {
		return nil, fmt.Errorf("the configuration ConfigMap: %w", err)
	}
	if reloader != nil {
		if err := mgr.Add(reloader); err != nil {
			return nil, fmt.Errorf("add the configuration reloader: %w", err)
		}
	}
	if err := setupMigrations(mgr, grandfathered); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add health check: %w", err)
	}
	// Ready once the conversion webhook serves: before that, reads of v1alpha1 fail.
	ready := mgr.GetWebhookServer().StartedChecker()
	if rotation != nil {
		ready = rotation.ReadyChecker(cfg.webhookPort)
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return nil, fmt.Errorf("add ready check: %w", err)
	}
	return mgr, nil
}

// managerOptions configures the manager; with rotation, the webhook and metrics servers
// serve its certificate.
func managerOptions(cfg config, rotation *certrotation.Rotation) manager.Options {
	var tlsOpts []func(*tls.Config)
	if !cfg.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	if rotation != nil {
		tlsOpts = append(tlsOpts, rotation.TLSOption)
	}
	metrics := metricsserver.Options{
		BindAddress:   cfg.metricsAddr,
		SecureServing: cfg.metricsSecure,
		CertDir:       cfg.metricsCertDir,
		TLSOpts:       tlsOpts,
	}
	if cfg.metricsSecure {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return manager.Options{
		Scheme:                        newScheme(),
		Metrics:                       metrics,
		HealthProbeBindAddress:        cfg.probeAddr,
		PprofBindAddress:              cfg.pprofAddr,
		WebhookServer:                 newDrainingServer(webhook.NewServer(webhook.Options{Port: cfg.webhookPort, CertDir: cfg.webhookCertDir, TLSOpts: tlsOpts}), cfg.webhookDrain),
		LeaderElection:                cfg.leaderElect,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       cfg.leaderElectNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &cfg.leaseDuration,
		RenewDeadline:                 &cfg.renewDeadline,
		RetryPeriod:                   &cfg.retryPeriod,
		GracefulShutdownTimeout:       &cfg.shutdownTimeout,
		// Nothing reads managedFields from the cache; dropping them saves memory and copies.
		// Deployments: only those Foos created (scheduled scaling has its own slim cache).
		// StorageBuckets: with the strings many of them share held once.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: cacheByObject()},
	}
}

// cacheByObject is what each controller asks of the manager's cache for its kinds.
func cacheByObject() map[client.Object]cache.ByObject {
	out := foo.CacheByObject()
	maps.Copy(out, storagebucket.CacheByObject())
	return out
}

// Every reconciler reports through the events.k8s.io API.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// The names --controllers takes.
const (
	controllerStorageBucket = "storagebucket"
	controllerFoo           = "foo"
	controllerScaling       = "scaling"
)

// controllerNames are the names --controllers takes, as its help lists them; all run by
// default.
var controllerNames = []string{controllerStorageBucket, controllerFoo, controllerScaling}

// parseControllers returns the set of controllers a --controllers value names.
func parseControllers(value string) (map[string]bool, error) {
	enabled := map[string]bool{}
	for _, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(controllerNames, name) {
			return nil, fmt.Errorf("%q is not a controller: name some of %s", name, strings.Join(controllerNames, ", "))
		}
		enabled[name] = true
	}
	if len(enabled) == 0 {
		return nil, fmt.Errorf("%q names no controller: name some of %s", value, strings.Join(controllerNames, ", "))
	}
	return enabled, nil
}

// setupReconcilers registers each controller cfg turns on through its own setup
// function. It returns what applies the live settings of a new configuration to them.
func setupReconcilers(mgr manager.Manager, cfg config) (reconfigure func(config) error, err error) {
	var apply []func(config) error
	if cfg.enabled[controllerStorageBucket] {
		sb, err := storagebucket.SetupWithManager(mgr, cfg.storageBucket)
		if err != nil {
			return nil, fmt.Errorf("set up storagebucket controller: %w", err)
		}
		apply = append(apply, func(c config) error { return sb.Reconfigure(c.storageBucket) })
	}
	if cfg.enabled[controllerScaling] {
		sc, err := scaling.SetupWithManager(mgr, cfg.scaling)
		if err != nil {
			return nil, fmt.Errorf("set up scheduled scaling: %w", err)
		}
		apply = append(apply, func(c config) error { return sc.Reconfigure(c.scaling) })
	}
	if cfg.enabled[controllerFoo] {
		fc, err := foo.SetupWithManager(mgr, cfg.foo)
		if err != nil {
			return nil, fmt.Errorf("set up foo controller: %w", err)
		}
		apply = append(apply, func(c config) error { return fc.Reconfigure(c.foo) })
	}
	return func(c config) error {
		for _, f := range apply {
			if err := f(c); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// replicaKeeper adds the keeper of the operator's own replica count to mgr; nil outside
// a pod (no POD_NAME), where no Deployment runs the process.
func replicaKeeper(mgr manager.Manager, cfg config, log logr.Logger) (*selfscale.Keeper, error) {
	pod, ns := os.Getenv("POD_NAME"), podNamespace()
	if pod == "" || ns == "" {
		return nil, nil
	}
	k := selfscale.New(selfscale.Options{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient().SubResource("scale"), Namespace: ns, Pod: pod,
		Source: "the operator's operator-replicas setting", Recorder: mgr.GetEventRecorder(selfscale.FieldManager), Log: log.WithName("replicas"),
	}, cfg.operatorReplicas)
	if err := mgr.Add(k); err != nil {
		return nil, fmt.Errorf("add the replica keeper: %w", err)
	}
	return k, nil
}

// grandfatheredReferences is the record of the StorageBucket credentials references
// that predate the Secret label rule, kept in the operator's namespace.
func grandfatheredReferences(mgr manager.Manager, cfg config) (*grandfather.Record, error) {
	ns, err := operatorNamespace(cfg)
	if err != nil {
		return nil, err
	}
	return &grandfather.Record{
		Namespace: ns,
		CRDName:   storageBucketCRD,
		Reader:    mgr.GetAPIReader(),
		Cache:     mgr.GetClient(),
		Writer:    mgr.GetClient(),
		Clock:     cfg.storageBucket.Clock,
		Log:       ctrl.Log.WithName("grandfather"),
	}, nil
}

// setupMigrations moves objects stored in an older version to the storage version once
// per start (leader only), so that a later release can drop the old version. The record
// of grandfathered Secret references is decided first, while storedVersions still shows
// an upgrade from a release before the label rule.
func setupMigrations(mgr manager.Manager, grandfathered *grandfather.Record) error {
	m := &storagemigration.Migrator{
		CRDName: storageBucketCRD,
		Reader:  mgr.GetAPIReader(),
		Writer:  mgr.GetClient(),
		Log:     ctrl.Log.WithName("storage-migration"),
		Before:  grandfathered.Ensure,
	}
	if err := mgr.Add(m); err != nil {
		return fmt.Errorf("add storage migration: %w", err)
	}
	return nil
}
