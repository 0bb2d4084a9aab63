package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
)

// The shard ring's timing flags are checked at start: a renew period of 0 would make
// the ring's ticker panic, and one that is not well below the lease duration would
// make ownership lapse between renewals.
func TestShardTimingFlagsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // "" for no error
	}{
		{"the defaults", nil, ""},
		{"a renew period of 0", []string{"--storagebucket-shard-renew-period=0"}, "must be positive"},
		{"a negative lease", []string{"--storagebucket-shard-lease-duration=-1s"}, "must be positive"},
		{"a renew period as long as the lease", []string{"--storagebucket-shard-lease-duration=5s", "--storagebucket-shard-renew-period=5s"}, "at most a third"},
		{"a renew period of half the lease", []string{"--storagebucket-shard-lease-duration=10s", "--storagebucket-shard-renew-period=5s"}, "at most a third"},
		{"a third of the lease", []string{"--storagebucket-shard-lease-duration=15s", "--storagebucket-shard-renew-period=5s"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(append([]string{"--leader-elect"}, tc.args...))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("parseFlags: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("parseFlags = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// A pod is told by the environment the kubelet gives every container, not by a mounted
// service account file (automountServiceAccountToken: false, or a projected token
// elsewhere): in a pod a missing webhook certificate stays an error instead of being
// replaced by a self-signed one.
func TestInAPodTheMissingCertificateIsNotReplaced(t *testing.T) {
	missing := t.TempDir() + "/no-certs"
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	cfg := config{webhookCertDir: missing}
	if _, err := outOfClusterDefaults(&cfg, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	if cfg.webhookCertDir != missing {
		t.Errorf("in a pod the webhook certificate directory became %s", cfg.webhookCertDir)
	}

	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg = config{webhookCertDir: missing}
	remove, err := outOfClusterDefaults(&cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cfg.webhookCertDir) })
	if cfg.webhookCertDir == missing || !hasServingCert(cfg.webhookCertDir) {
		t.Fatal("outside a pod no self-signed certificate was made")
	}
	// The manager removes the directory when it ends: each local run used to leave one
	// behind in the temporary directory.
	remove()
	if _, err := os.Stat(cfg.webhookCertDir); !os.IsNotExist(err) {
		t.Errorf("the self-signed certificate's directory %s is left behind: %v", cfg.webhookCertDir, err)
	}
}

// In a pod the Leases go to the pod's namespace even when no service account token (and
// with it no namespace file) is mounted: POD_NAMESPACE, which config/manager sets from
// the pod's metadata, decides it for both the leader election and the StorageBucket ring;
// --leader-elect-namespace overrides it.
func TestInAPodTheLeasesGoToPODNAMESPACE(t *testing.T) {
	mounted := serviceAccountNamespace
	serviceAccountNamespace = filepath.Join(t.TempDir(), "namespace")
	t.Cleanup(func() { serviceAccountNamespace = mounted })
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	for _, tc := range []struct {
		name, podNamespace string
		args               []string
		want               string // "" for an error
	}{
		{"POD_NAMESPACE without the namespace file", "team-ops", nil, "team-ops"},
		{"--leader-elect-namespace over POD_NAMESPACE", "team-ops", []string{"--leader-elect-namespace=leases"}, "leases"},
		{"--leader-elect-namespace alone", "", []string{"--leader-elect-namespace=leases"}, "leases"},
		{"neither, nor the namespace file", "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.podNamespace)
			cfg, err := parseFlags(append([]string{"--leader-elect", "--storagebucket-server-side-sharding=false"}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			err = leaseNamespace(&cfg, logr.Discard())
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "--leader-elect-namespace") {
					t.Errorf("leaseNamespace = %v, want an error naming POD_NAMESPACE and --leader-elect-namespace", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := setupShard(&cfg, &rest.Config{Host: "https://10.96.0.1"}, logr.Discard()); err != nil {
				t.Fatalf("setupShard: %v", err)
			}
			if got := cfg.storageBucket.Shard.Namespace; got != tc.want {
				t.Errorf("the ring's Leases go to %q, want %q", got, tc.want)
			}
			if got := managerOptions(cfg, nil).LeaderElectionNamespace; got != tc.want {
				t.Errorf("the leader election Lease goes to %q, want %q", got, tc.want)
			}
		})
	}
}

// A memory-limit ratio outside [0, 1] stops the manager at start, naming the flag; the
// variable that mirrors it is read the same way.
func TestTheMemoryLimitRatioAndTheReplicasAreValidated(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--memory-limit-ratio=0"}, ""},
		{[]string{"--memory-limit-ratio=1"}, ""},
		{[]string{"--memory-limit-ratio=1.1"}, "--memory-limit-ratio: 1.1 is not between 0 and 1"},
		{[]string{"--memory-limit-ratio=-0.5"}, "--memory-limit-ratio: -0.5 is not between 0 and 1"},
		{[]string{"--memory-limit-ratio=NaN"}, "--memory-limit-ratio: NaN is not between 0 and 1"},
		{[]string{"--operator-replicas=0"}, ""},
		{[]string{"--operator-replicas=64"}, ""},
		{[]string{"--operator-replicas=65"}, "--operator-replicas: 65 is not between 0 and 64"},
		{[]string{"--operator-replicas=-1"}, "--operator-replicas: -1 is not between 0 and 64"},
	} {
		_, err := parseFlags(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("parseFlags(%v): %v", tc.args, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("parseFlags(%v) = %v, want %q", tc.args, err, tc.want)
		}
	}
	t.Setenv("PHALANKS_MEMORY_LIMIT_RATIO", "2")
	if _, err := parseFlags(nil); err == nil || !strings.Contains(err.Error(), "--memory-limit-ratio") {
		t.Errorf("PHALANKS_MEMORY_LIMIT_RATIO=2: %v, want an error naming --memory-limit-ratio", err)
	}
}
