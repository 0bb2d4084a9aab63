package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/phalanks/phalanks-operator/controllers/foo"
	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/controllers/storagebucket"
)

// defaultConfigMap names the ConfigMap in the operator's namespace whose keys set flags.
// No install path creates it: the user does, and no upgrade replaces it.
const defaultConfigMap = "phalanks-operator-config"

// Where a setting comes from when its flag is not on the command line: its PHALANKS_
// variable, else its key in the ConfigMap, else its default.
//
// notFromConfigMap are the flags that find the ConfigMap (its name, the kubeconfig, the
// namespace it is read from): a key for one of them is refused.
var notFromConfigMap = map[string]bool{
	"config-map":             true,
	"kubeconfig":             true,
	"leader-elect-namespace": true,
}

// liveFlags are the settings a changed ConfigMap applies to a running process; a
// change to any other waits for the process's next start.
var liveFlags = func() map[string]bool {
	live := map[string]bool{"zap-log-level": true, "operator-replicas": true}
	for _, f := range slices.Concat(scaling.LiveFlags, storagebucket.LiveFlags, foo.LiveFlags) {
		live[f] = true
	}
	return live
}()

// setFromConfigMap gives every flag that neither the command line nor the environment
// set the value of its key in data. A value the flag does not accept, or a key for a
// flag that cannot come from the ConfigMap, is an error naming the key and the value.
// It returns the values it set, by flag, and the keys that name no flag, sorted.
func setFromConfigMap(fs *flag.FlagSet, data map[string]string, source string) (applied map[string]string, unknown []string, err error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	applied = map[string]string{}
	for _, k := range keys {
		v := data[k]
		switch {
		case fs.Lookup(k) == nil:
			unknown = append(unknown, k)
		case notFromConfigMap[k]:
			errs = append(errs, fmt.Errorf("%s key %s: --%s finds the ConfigMap and cannot be set in it; pass the flag or %s", source, k, k, envName(k)))
		case set[k]:
		default:
			if err := fs.Set(k, v); err != nil {
				errs = append(errs, fmt.Errorf("%s key %s=%q: %w", source, k, v, err))
				continue
			}
			applied[k] = v
		}
	}
	return applied, unknown, errors.Join(errs...)
}

// configMapData is what the configuration ConfigMap holds, and its name for messages.
type configMapData struct {
	source string
	data   map[string]string
}

// configMapSource names the ConfigMap in messages.
func configMapSource(namespace, name string) string {
	return "ConfigMap " + namespace + "/" + name
}

// readConfigMap returns the data of the ConfigMap, or found false when there is none.
func readConfigMap(ctx context.Context, cs kubernetes.Interface, namespace, name string) (data map[string]string, found bool, err error) {
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read the configuration %s: %w", configMapSource(namespace, name), err)
	}
	return cm.Data, true, nil
}

// configMapClient returns the namespace of cfg's ConfigMap and a client to read it.
func configMapClient(cfg config, restCfg *rest.Config) (string, kubernetes.Interface, error) {
	ns, err := operatorNamespace(cfg)
	if err != nil {
		return "", nil, err
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	return ns, cs, err
}

// withConfigMap is cfg with the settings of its configuration ConfigMap, read once at
// start: a value that does not parse stops the process with a message naming the key and
// the value. A missing ConfigMap sets nothing.
func withConfigMap(ctx context.Context, cfg config, restCfg *rest.Config) (config, error) {
	if cfg.configMap == "" {
		return cfg, nil
	}
	ns, cs, err := configMapClient(cfg, restCfg)
	if err != nil {
		return cfg, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	data, found, err := readConfigMap(ctx, cs, ns, cfg.configMap)
	if apierrors.IsForbidden(err) {
		return cfg, fmt.Errorf("%w: the operator needs get, list and watch on configmaps in its namespace "+
			"(config/rbac/leader_election_role.yaml), or --config-map= to read none", err)
	}
	if err != nil || !found {
		return cfg, err
	}
	return parseConfig(cfg.args, &configMapData{source: configMapSource(ns, cfg.configMap), data: data})
}

// configHash identifies a ConfigMap's data (0 for none): the first 52 bits of the
// SHA-256 of its keys and values in order, so that it is exact as a float64 metric.
func configHash(data map[string]string) float64 {
	if len(data) == 0 {
		return 0
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		_, _ = fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(data[k]), data[k]) // a hash.Hash never fails to write
	}
	return float64(binary.BigEndian.Uint64(h.Sum(nil)) >> 12)
}

var (
	configReloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "phalanks_config_last_reload_successful",
		Help: "1 when the last change of the configuration ConfigMap was valid (and applied, or is waiting for a restart), 0 when it was refused and the process keeps its last good configuration.",
	})
	configHashMetric = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "phalanks_config_hash",
		Help: "Hash of the configuration ConfigMap's data this process last accepted (0 for none): replicas that differ run different configurations.",
	})
	configRestartRequired = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "phalanks_config_restart_required",
		Help: "1 when the configuration ConfigMap changes a setting that takes effect only at the process's next start.",
	})
)

func init() { metrics.Registry.MustRegister(configReloadOK, configHashMetric, configRestartRequired) }

// Reasons of the events on the configuration ConfigMap.
const (
	reasonConfigInvalid         = "InvalidConfiguration"
	reasonConfigUnknownKeys     = "UnknownConfigurationKeys"
	reasonConfigApplied         = "ConfigurationApplied"
	reasonConfigRestartRequired = "RestartRequired"
	actionConfigReload          = "Reload"
)

// configReloader watches the configuration ConfigMap and applies a change of it to the
// running process: a live setting at once, any other at the next start (an event and
// phalanks_config_restart_required say which). A configuration that does not parse is
// refused with a Warning event on the ConfigMap, and the process keeps its last good one.
type configReloader struct {
	namespace, name string
	// parse turns the ConfigMap's data into the process's configuration, with the
	// command line's and the environment's precedence.
	parse func(data map[string]string) (config, error)
	// started is what the ConfigMap set when the process started; live, the values of
	// the live settings it runs with now (a flag absent: not from the ConfigMap).
	started, live map[string]string
	unknown       []string
	level         uberzap.AtomicLevel
	development   bool
	// reconfigure applies the live settings of a configuration to the controllers.
	reconfigure func(config) error
	client      kubernetes.Interface
	recorder    events.EventRecorder
	log         logr.Logger
}

// NeedLeaderElection is false: every replica applies the configuration to itself.
func (r *configReloader) NeedLeaderElection() bool { return false }

// Start watches the ConfigMap by name until ctx ends.
func (r *configReloader) Start(ctx context.Context) error {
	byName := fields.OneTermEqualSelector("metadata.name", r.name).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return r.client.CoreV1().ConfigMaps(r.namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return r.client.CoreV1().ConfigMaps(r.namespace).Watch(ctx, o)
		},
	}
	inf := toolscache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.changed(obj.(*corev1.ConfigMap)) },
		UpdateFunc: func(_, obj any) { r.changed(obj.(*corev1.ConfigMap)) },
		DeleteFunc: func(any) { r.changed(nil) },
	}); err != nil {
		return err
	}
	inf.RunWithContext(ctx)
	return nil
}

// changed applies cm (nil: deleted) to the process. The informer calls it from one
// goroutine, one change at a time.
func (r *configReloader) changed(cm *corev1.ConfigMap) {
	var data map[string]string
	if cm != nil {
		data = cm.Data
	}
	next, err := r.parse(data)
	var live, restart []string
	if err == nil {
		for _, f := range changedFlags(r.live, next.fromConfigMap) {
			if liveFlags[f] {
				live = append(live, f)
			}
		}
		for _, f := range changedFlags(r.started, next.fromConfigMap) {
			if !liveFlags[f] {
				restart = append(restart, f)
			}
		}
		if len(live) > 0 && r.reconfigure != nil {
			err = r.reconfigure(next)
		}
	}
	if err != nil {
		configReloadOK.Set(0)
		r.log.Error(err, "refused a change of the configuration ConfigMap; keeping the last good configuration",
			"configMap", configMapSource(r.namespace, r.name))
		r.event(cm, corev1.EventTypeWarning, reasonConfigInvalid,
			"Refused, the operator keeps its last good configuration: "+err.Error())
		return
	}
	configReloadOK.Set(1)
	configHashMetric.Set(next.configHash)
	if len(next.unknownConfigKeys) > 0 && !slices.Equal(next.unknownConfigKeys, r.unknown) {
		r.event(cm, corev1.EventTypeWarning, reasonConfigUnknownKeys,
			"Ignored keys that name no setting: "+strings.Join(next.unknownConfigKeys, ", "))
	}
	r.unknown = next.unknownConfigKeys
	if slices.Contains(live, "zap-log-level") {
		r.level.SetLevel(logLevel(next.zap, r.development))
	}
	for _, f := range live {
		if v, ok := next.fromConfigMap[f]; ok {
			r.live[f] = v
		} else {
			delete(r.live, f)
		}
	}
	if len(live) > 0 {
		r.log.Info("applied a change of the configuration ConfigMap", "settings", live)
		r.event(cm, corev1.EventTypeNormal, reasonConfigApplied, "Applied: --"+strings.Join(live, ", --"))
	}
	if len(restart) == 0 {
		configRestartRequired.Set(0)
		return
	}
	configRestartRequired.Set(1)
	r.log.Info("the configuration ConfigMap changes settings that take effect at the next start of the operator's pods", "settings", restart)
	r.event(cm, corev1.EventTypeNormal, reasonConfigRestartRequired,
		"Take effect at the next start of the operator's pods (kubectl rollout restart the Deployment): --"+strings.Join(restart, ", --"))
}

// event records an event on cm, when there is one to record it on.
func (r *configReloader) event(cm *corev1.ConfigMap, eventType, reason, note string) {
	if cm == nil {
		return
	}
	const maxNote = 1000
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.recorder.Eventf(cm, nil, eventType, reason, actionConfigReload, "%s", note)
}

// changedFlags are the flags set in a or b, not both or to different values, sorted.
func changedFlags(a, b map[string]string) []string {
	var out []string
	for k, v := range b {
		if w, ok := a[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// logLevel is the level o sets, or the default zap's Options give (debug in
// development mode, info otherwise).
func logLevel(o zap.Options, development bool) zapcore.Level {
	if l, ok := o.Level.(uberzap.AtomicLevel); ok {
		return l.Level()
	}
	if development {
		return zapcore.DebugLevel
	}
	return zapcore.InfoLevel
}

// liveLogLevel gives o a level the reloader can change, starting at the one o sets.
func liveLogLevel(o *zap.Options) uberzap.AtomicLevel {
	lvl := uberzap.NewAtomicLevelAt(logLevel(*o, o.Development))
	o.Level = lvl
	return lvl
}

// newConfigReloader returns the reloader of cfg's ConfigMap, or nil when there is none.
func newConfigReloader(mgr manager.Manager, cfg config, restCfg *rest.Config, reconfigure func(config) error, log logr.Logger) (*configReloader, error) {
	if cfg.configMap == "" {
		return nil, nil
	}
	ns, cs, err := configMapClient(cfg, restCfg)
	if err != nil {
		return nil, err
	}
	level := cfg.logLevel
	if level == (uberzap.AtomicLevel{}) {
		// No logger follows it (a test's manager): the reloader still has one to set.
		level = liveLogLevel(&cfg.zap)
	}
	live := map[string]string{}
	for f := range liveFlags {
		if v, ok := cfg.fromConfigMap[f]; ok {
			live[f] = v
		}
	}
	source := configMapSource(ns, cfg.configMap)
	configReloadOK.Set(1)
	configHashMetric.Set(cfg.configHash)
	configRestartRequired.Set(0)
	return &configReloader{
		namespace: ns,
		name:      cfg.configMap,
		parse: func(data map[string]string) (config, error) {
			return parseConfig(cfg.args, &configMapData{source: source, data: data})
		},
		started:     maps.Clone(cfg.fromConfigMap),
		live:        live,
		unknown:     cfg.unknownConfigKeys,
		level:       level,
		development: cfg.zap.Development,
		reconfigure: reconfigure,
		client:      cs,
		recorder:    mgr.GetEventRecorder("phalanks-operator-config"),
		log:         log.WithName("config"),
	}, nil
}
