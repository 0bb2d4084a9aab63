package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// parseWithConfigMap parses args with environ replaced by env and data as the
// ConfigMap's.
func parseWithConfigMap(t *testing.T, args []string, data map[string]string, env ...string) (config, error) {
	t.Helper()
	withEnviron(t, env)
	return parseConfig(args, &configMapData{source: "ConfigMap ns/phalanks-operator-config", data: data})
}

// The ConfigMap sets what neither the command line nor the environment sets: a flag
// wins over its variable, the variable over the ConfigMap's key, the key over the
// default.
func TestTheConfigMapSetsWhatFlagsAndVariablesLeave(t *testing.T) {
	c, err := parseWithConfigMap(t, []string{"--kube-api-burst=7"}, map[string]string{
		"kube-api-burst":       "99",
		"kube-api-qps":         "99",
		"scaling-concurrency":  "3",
		"default-uptime":       "Mon-Fri 08:00-19:00 Europe/Berlin",
		"scaling-grace-period": "5m",
		"zap-loglevel":         "debug",
	}, "PHALANKS_KUBE_API_QPS=50")
	if err != nil {
		t.Fatal(err)
	}
	if c.kubeAPIBurst != 7 {
		t.Errorf("--kube-api-burst is %d, want the command line's 7 over the ConfigMap's", c.kubeAPIBurst)
	}
	if c.kubeAPIQPS != 50 {
		t.Errorf("--kube-api-qps is %v, want PHALANKS_KUBE_API_QPS's 50 over the ConfigMap's", c.kubeAPIQPS)
	}
	if c.scaling.Concurrency != 3 || c.scaling.DefaultUptime != "Mon-Fri 08:00-19:00 Europe/Berlin" || c.scaling.GracePeriod != 5*time.Minute {
		t.Errorf("from the ConfigMap: concurrency %d, default uptime %q, grace period %v", c.scaling.Concurrency, c.scaling.DefaultUptime, c.scaling.GracePeriod)
	}
	if c.memoryLimitRatio != 0.9 {
		t.Errorf("--memory-limit-ratio is %v, want its default", c.memoryLimitRatio)
	}
	want := map[string]string{"scaling-concurrency": "3", "default-uptime": "Mon-Fri 08:00-19:00 Europe/Berlin", "scaling-grace-period": "5m"}
	if fmt.Sprint(c.fromConfigMap) != fmt.Sprint(want) {
		t.Errorf("set from the ConfigMap: %v, want %v", c.fromConfigMap, want)
	}
	if !slices.Equal(c.unknownConfigKeys, []string{"zap-loglevel"}) {
		t.Errorf("keys naming no flag: %v, want [zap-loglevel]", c.unknownConfigKeys)
	}
}

// A key's value is checked as its flag's is, and so are the checks after parsing; the
// error names the ConfigMap, the key and the value. The keys that find the ConfigMap
// cannot be in it.
func TestABadValueInTheConfigMapIsRefused(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		want       []string
	}{
		{"scaling-grace-period", "soon", []string{"ConfigMap ns/phalanks-operator-config", `key scaling-grace-period="soon"`}},
		{"metrics-secure", "maybe", []string{`key metrics-secure="maybe"`}},
		{"zap-log-level", "loud", []string{`key zap-log-level="loud"`}},
		{"memory-limit-ratio", "2", []string{"--memory-limit-ratio", "not between 0 and 1"}},
		{"config-map", "other", []string{"key config-map", "cannot be set in it", "PHALANKS_CONFIG_MAP"}},
		{"leader-elect-namespace", "kube-system", []string{"key leader-elect-namespace", "cannot be set in it"}},
		{"kubeconfig", "/etc/passwd", []string{"key kubeconfig", "cannot be set in it"}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := parseWithConfigMap(t, nil, map[string]string{tc.key: tc.value})
			if err == nil {
				t.Fatalf("%s=%q was accepted", tc.key, tc.value)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %s", err, w)
				}
			}
		})
	}
}

// The hash changes with any key or value, not with their order, and does not run a
// key into its value.
func TestConfigHash(t *testing.T) {
	a := configHash(map[string]string{"ab": "c", "x": "1"})
	if a == 0 || a != configHash(map[string]string{"x": "1", "ab": "c"}) {
		t.Errorf("hash %v is zero or depends on order", a)
	}
	for _, other := range []map[string]string{{"a": "bc", "x": "1"}, {"ab": "c", "x": "2"}, {"ab": "c"}} {
		if configHash(other) == a {
			t.Errorf("%v has the hash of {ab: c, x: 1}", other)
		}
	}
	if configHash(nil) != 0 || configHash(map[string]string{}) != 0 {
		t.Error("no data hashes to non-zero")
	}
	if a >= 1<<52 || a != float64(int64(a)) {
		t.Errorf("hash %v is not a whole number below 2^52, exact as a float64", a)
	}
}

// Against a real API server: the configuration read at start, then every change of the
// ConfigMap while the process runs: a live setting applied, a bad value refused with the
// last good configuration kept, a restart-only setting reported, a decoy of the same name
// in another namespace ignored, the ConfigMap deleted.
func TestTheConfigMapIsReadAtStartAndFollowed(t *testing.T) {
	env := startAPIServer(t)
	ctx := t.Context()
	for _, ns := range []string{"operator", "decoy"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "operator", Name: defaultConfigMap},
		Data:       map[string]string{"zap-log-level": "error", "scaling-concurrency": "5", "scaling-grace-period": "soon"},
	}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	args := []string{"--leader-elect-namespace=operator"}
	start, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}

	// At start a bad value stops the process, naming the ConfigMap, the key and the value.
	_, err = withConfigMap(ctx, start, env.Config)
	if err == nil || !strings.Contains(err.Error(), `ConfigMap operator/phalanks-operator-config key scaling-grace-period="soon"`) {
		t.Fatalf("a bad value at start: %v, want the ConfigMap, key and value named", err)
	}
	delete(cm.Data, "scaling-grace-period")
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	cfg, err := withConfigMap(ctx, start, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.scaling.Concurrency != 5 || logLevel(cfg.zap, false) != zapcore.ErrorLevel {
		t.Fatalf("at start: --scaling-concurrency %d and log level %v, want the ConfigMap's 5 and error", cfg.scaling.Concurrency, logLevel(cfg.zap, false))
	}
	cfg.logLevel = liveLogLevel(&cfg.zap)

	mgr, err := env.NewManager()
	if err != nil {
		t.Fatal(err)
	}
	// The controllers' side of a reconfiguration is their own tests'; here, what they
	// are given.
	var (
		mu      sync.Mutex
		applied []config
	)
	reconfigure := func(c config) error {
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, c)
		return nil
	}
	lastApplied := func() (config, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(applied) == 0 {
			return config{}, 0
		}
		return applied[len(applied)-1], len(applied)
	}
	r, err := newConfigReloader(mgr, cfg, env.Config, reconfigure, ctrl.Log)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(r); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	update := func(data map[string]string) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatal(err)
		}
		cm.Data = data
		if err := env.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	// eventually waits for cond, which says what it saw.
	eventually := func(what string, cond func() (bool, string)) {
		t.Helper()
		var saw string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var ok bool
			if ok, saw = cond(); ok {
				return
			}
		}
		t.Fatalf("after 30s, %s: not so; %s", what, saw)
	}
	level := func(want zapcore.Level) func() (bool, string) {
		return func() (bool, string) {
			return cfg.logLevel.Level() == want, "the level is " + cfg.logLevel.Level().String()
		}
	}
	event := func(reason string, says ...string) func() (bool, string) {
		return func() (bool, string) {
			list := &eventsv1.EventList{}
			if err := env.Client.List(ctx, list, client.InNamespace("operator")); err != nil {
				return false, err.Error()
			}
			var notes []string
			for _, e := range list.Items {
				if e.Regarding.Kind != "ConfigMap" || e.Regarding.Name != defaultConfigMap || e.Reason != reason {
					continue
				}
				notes = append(notes, e.Note)
				if all(e.Note, says) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%s events: %q", reason, notes)
		}
	}

	// A live setting: applied at once, and said so.
	update(map[string]string{"zap-log-level": "debug", "scaling-concurrency": "5"})
	eventually("the log level is debug", level(zapcore.DebugLevel))
	eventually("an event says it was applied", event(reasonConfigApplied, "--zap-log-level"))
	if got := testutil.ToFloat64(configReloadOK); got != 1 {
		t.Errorf("phalanks_config_last_reload_successful = %v after a good change", got)
	}
	if got, want := testutil.ToFloat64(configHashMetric), configHash(map[string]string{"zap-log-level": "debug", "scaling-concurrency": "5"}); got != want {
		t.Errorf("phalanks_config_hash = %v, want the new data's %v", got, want)
	}
	if got := testutil.ToFloat64(configRestartRequired); got != 0 {
		t.Errorf("phalanks_config_restart_required = %v with only a live change", got)
	}

	// The controllers' live settings: handed to them at once, with what the command
	// line and the environment set.
	update(map[string]string{"zap-log-level": "debug", "scaling-concurrency": "5",
		"scaling-grace-period": "1m", "storagebucket-status-heartbeat": "2m", "default-uptime": "Mon-Fri 08:00-18:00 UTC",
		"storagebucket-concurrency": "3", "foo-concurrency": "4"})
	eventually("an event says the controllers' settings were applied",
		event(reasonConfigApplied, "--default-uptime", "--scaling-grace-period", "--storagebucket-status-heartbeat",
			"--storagebucket-concurrency", "--foo-concurrency"))
	got, calls := lastApplied()
	if got.scaling.GracePeriod != time.Minute || got.storageBucket.StatusHeartbeat != 2*time.Minute ||
		got.scaling.DefaultUptime != "Mon-Fri 08:00-18:00 UTC" || got.leaderElectNamespace != "operator" {
		t.Errorf("the controllers were given grace %v, heartbeat %v, default uptime %q, namespace %q; want the ConfigMap's and the command line's",
			got.scaling.GracePeriod, got.storageBucket.StatusHeartbeat, got.scaling.DefaultUptime, got.leaderElectNamespace)
	}
	if got.scaling.Concurrency != 5 || got.storageBucket.Concurrency != 3 || got.foo.Concurrency != 4 {
		t.Errorf("the controllers were given the concurrencies scaling %d, storagebucket %d, foo %d; want 5, 3, 4",
			got.scaling.Concurrency, got.storageBucket.Concurrency, got.foo.Concurrency)
	}
	if got := testutil.ToFloat64(configRestartRequired); got != 0 {
		t.Errorf("phalanks_config_restart_required = %v after a change of live settings only", got)
	}
	// A value the controller refuses although it parses: refused as a whole, nothing
	// handed on.
	update(map[string]string{"zap-log-level": "error", "scaling-concurrency": "5", "default-uptime": "Mon-Fri 08:00-18:00 Mars/Olympus"})
	eventually("a Warning names the refused setting", event(reasonConfigInvalid, "--default-uptime", "Mars/Olympus"))
	if _, n := lastApplied(); n != calls {
		t.Errorf("a refused configuration was handed to the controllers")
	}
	if got := cfg.logLevel.Level(); got != zapcore.DebugLevel {
		t.Errorf("after a refused change the level is %v, want the last good debug", got)
	}

	// A bad value: refused with a Warning, the last good configuration kept.
	update(map[string]string{"zap-log-level": "loud", "scaling-concurrency": "5"})
	eventually("a Warning names the key and value", event(reasonConfigInvalid, `key zap-log-level="loud"`, "last good configuration"))
	eventually("the reload metric says it failed", func() (bool, string) {
		v := testutil.ToFloat64(configReloadOK)
		return v == 0, fmt.Sprint("phalanks_config_last_reload_successful = ", v)
	})
	if got := cfg.logLevel.Level(); got != zapcore.DebugLevel {
		t.Errorf("after a refused change the level is %v, want the last good debug", got)
	}

	// A setting read only at start: reported, not applied; the live one still is.
	update(map[string]string{"zap-log-level": "info", "scaling-concurrency": "5", "storagebucket-tick": "2s"})
	eventually("an event says which setting waits for a restart", event(reasonConfigRestartRequired, "--storagebucket-tick", "rollout restart"))
	eventually("the log level is info", level(zapcore.InfoLevel))
	if got := testutil.ToFloat64(configRestartRequired); got != 1 {
		t.Errorf("phalanks_config_restart_required = %v, want 1", got)
	}
	if got := testutil.ToFloat64(configReloadOK); got != 1 {
		t.Errorf("phalanks_config_last_reload_successful = %v after a good change", got)
	}

	// Decoys, one of the same name in another namespace and one of another name in
	// the operator's, are not the operator's: nothing reacts to them (a reloader that
	// did would apply their level and say so on them). The change seen after them, a
	// key naming no setting, shows the reloader had its chance.
	for _, decoy := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "decoy", Name: defaultConfigMap}, Data: map[string]string{"zap-log-level": "panic"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "operator", Name: defaultConfigMap + "-old"}, Data: map[string]string{"zap-log-level": "panic"}},
	} {
		if err := env.Client.Create(ctx, decoy); err != nil {
			t.Fatal(err)
		}
	}
	update(map[string]string{"zap-log-level": "info", "scaling-concurrency": "7", "scaling-concurency": "8"})
	eventually("a Warning names the unknown key", event(reasonConfigUnknownKeys, "scaling-concurency"))
	for _, ns := range []string{"decoy", "operator"} {
		list := &eventsv1.EventList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Regarding.Name != defaultConfigMap || e.Regarding.Namespace != "operator" {
				t.Errorf("an event on a decoy: %s/%s %s: %s", e.Regarding.Namespace, e.Regarding.Name, e.Reason, e.Note)
			}
		}
	}
	if got := cfg.logLevel.Level(); got != zapcore.InfoLevel {
		t.Errorf("after a decoy ConfigMap in another namespace the level is %v, want info", got)
	}

	// Deleted: the live settings return to their defaults.
	update(map[string]string{"zap-log-level": "error"})
	eventually("the log level is error", level(zapcore.ErrorLevel))
	if err := env.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually("the log level is back to the default info", level(zapcore.InfoLevel))
	if got := testutil.ToFloat64(configHashMetric); got != 0 {
		t.Errorf("phalanks_config_hash = %v with no ConfigMap, want 0", got)
	}
}

func all(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
