package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

func TestControllersNamesKnownControllersOnly(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []string // nil for an error
	}{
		{"storagebucket,foo,scaling", []string{"foo", "scaling", "storagebucket"}},
		{"storagebucket", []string{"storagebucket"}},
		{" foo , scaling ,", []string{"foo", "scaling"}},
		{"storagebuckets", nil},
		{"foo,Scaling", nil},
		{"", nil},
		{",", nil},
	} {
		got, err := parseControllers(tc.value)
		if tc.want == nil {
			if err == nil {
				t.Errorf("parseControllers(%q) = %v, want an error", tc.value, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseControllers(%q): %v", tc.value, err)
			continue
		}
		var names []string
		for name := range got {
			names = append(names, name)
		}
		slices.Sort(names)
		if !slices.Equal(names, tc.want) {
			t.Errorf("parseControllers(%q) = %v, want %v", tc.value, names, tc.want)
		}
	}
	if _, err := parseFlags([]string{"--controllers=bucket"}); err == nil || !strings.Contains(err.Error(), "--controllers") {
		t.Errorf("parseFlags(--controllers=bucket) = %v, want an error naming the flag", err)
	}
}

// watches records the resources a client watches.
type watches struct {
	mu        sync.Mutex
	resources map[string]bool
}

func (w *watches) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.URL.Query().Get("watch") == "true" {
			parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			w.mu.Lock()
			w.resources[parts[len(parts)-1]] = true
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (w *watches) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for r := range w.resources {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// A controller left out of --controllers starts no watch of its kinds, and without the
// StorageBucket controller the replica joins no StorageBucket ring; the conversion
// webhook is served either way. Each run of the manager, against a real API server,
// watches what the other must not, so each is the other's proof that a watch is seen.
func TestAControllerLeftOutWatchesNothing(t *testing.T) {
	env := startAPIServer(t)
	port, certDir := env.WebhookServing()

	// Run in this order: a controller's name may be registered once per process.
	for _, tc := range []struct {
		controllers     string
		want, forbidden []string
		ring            bool
	}{
		{"storagebucket", []string{"storagebuckets"}, []string{"foos", "deployments", "statefulsets", "replicasets", "cronjobs", "pods"}, true},
		{"foo,scaling", []string{"foos", "deployments", "statefulsets"}, []string{"storagebuckets", "secrets"}, false},
	} {
		t.Run(tc.controllers, func(t *testing.T) {
			cfg, err := parseFlags([]string{
				"--controllers=" + tc.controllers,
				"--leader-elect", "--leader-elect-namespace=default",
				"--storagebucket-server-side-sharding=false",
				"--metrics-bind-address=0", "--health-probe-bind-address=0",
				"--webhook-port=" + strconv.Itoa(port), "--webhook-cert-dir=" + certDir, "--webhook-shutdown-delay=0",
			})
			if err != nil {
				t.Fatal(err)
			}
			seen := &watches{resources: map[string]bool{}}
			restCfg := rest.CopyConfig(env.Config)
			restCfg.Wrap(seen.wrap)
			ctx, cancel := context.WithCancel(context.Background())
			mgr, err := newManager(ctx, cfg, restCfg, logr.Discard())
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("manager: %v", err)
				}
			})

			// Leader-only controllers start once this manager holds the lease; then
			// the set of watches settles.
			deadline := time.Now().Add(time.Minute)
			var stable time.Time
			last := ""
			for {
				if time.Now().After(deadline) {
					t.Fatalf("after a minute the manager watches %v, want %v among them", seen.list(), tc.want)
				}
				now := strings.Join(seen.list(), ",")
				if now != last || !leading(ctx, env.Client, leaderElectionID) {
					last, stable = now, time.Now()
				}
				if time.Since(stable) > 3*time.Second && containsAll(seen.list(), tc.want) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("watches: %v", seen.list())
			for _, r := range tc.forbidden {
				if slices.Contains(seen.list(), r) {
					t.Errorf("with --controllers=%s the manager watches %s (all: %v)", tc.controllers, r, seen.list())
				}
			}
			leases := &coordinationv1.LeaseList{}
			if err := env.Client.List(ctx, leases, client.InNamespace("default"), client.HasLabels{"phalanks.io/shard-ring"}); err != nil {
				t.Fatal(err)
			}
			if joined := len(leases.Items) > 0; joined != tc.ring {
				t.Errorf("with --controllers=%s the replica joined the StorageBucket ring: %v, want %v", tc.controllers, joined, tc.ring)
			}
			for _, l := range leases.Items {
				if err := env.Client.Delete(ctx, &l); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// leading reports whether the leader election Lease id has a holder.
func leading(ctx context.Context, c client.Client, id string) bool {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: id}, l); err != nil {
		return false
	}
	return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// startAPIServer starts a real API server and etcd for t, with the manager's scheme and
// the logger silenced; it skips t under -short.
func startAPIServer(t *testing.T) *envtest.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an API server")
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	env, err := envtest.Start(envtest.Options{Scheme: newScheme()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}
