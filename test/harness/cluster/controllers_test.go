package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Abridged from kube-controller-manager --help: 1.29 still has the cloud controllers,
// 1.37 has none of them, and naming one it lacks makes it exit.
const (
	help129 = `      --controllers strings                      A list of controllers to enable.
                                                 All controllers: bootstrap-signer-controller, certificatesigningrequest-signing-controller, cloud-node-lifecycle-controller, deployment-controller, node-ipam-controller, node-lifecycle-controller, node-route-controller, service-lb-controller, ttl-controller
                                                 Disabled-by-default controllers: bootstrap-signer-controller, token-cleaner-controller (default [*])
`
	help137 = `      --controllers strings                                A list of controllers to enable.
                                                           All controllers: bootstrap-signer-controller, certificatesigningrequest-signing-controller, deployment-controller, node-ipam-controller, node-lifecycle-controller, storage-version-migrator-controller,
                                                           Disabled-by-default controllers: bootstrap-signer-controller, selinux-warning-controller, token-cleaner-controller (default [*])
`
)

func fakeHelp(t *testing.T, help string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "help"), []byte(help), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kube-controller-manager")
	script := "#!/bin/sh\ncat " + filepath.Join(dir, "help") + " >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil { //nolint:gosec // G306: an executable
		t.Fatal(err)
	}
	return bin
}

func TestControllersFlagNamesOnlyControllersTheVersionHas(t *testing.T) {
	off := slices.Concat(offControllers, []string{"node-lifecycle-controller"})
	for _, tc := range []struct{ name, help, want string }{
		{"1.29", help129, "*,-node-ipam-controller,-cloud-node-lifecycle-controller,-service-lb-controller," +
			"-node-route-controller,-certificatesigningrequest-signing-controller,-node-lifecycle-controller"},
		{"1.37", help137, "*,-node-ipam-controller,-certificatesigningrequest-signing-controller,-node-lifecycle-controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := controllersFlag(fakeHelp(t, tc.help), off)
			if err != nil || got != tc.want {
				t.Fatalf("controllersFlag = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := controllersFlag(fakeHelp(t, "usage: nothing here\n"), off); err == nil {
		t.Fatal("help without a controller list: want an error")
	}
}
