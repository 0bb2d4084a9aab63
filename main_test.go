package main

import (
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"
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
	if err := outOfClusterDefaults(&cfg, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	if cfg.webhookCertDir != missing {
		t.Errorf("in a pod the webhook certificate directory became %s", cfg.webhookCertDir)
	}

	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg = config{webhookCertDir: missing}
	if err := outOfClusterDefaults(&cfg, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	if cfg.webhookCertDir == missing {
		t.Error("outside a pod no self-signed certificate was made")
	}
	_ = os.RemoveAll(cfg.webhookCertDir)
}
