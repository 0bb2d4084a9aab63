package olm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// inNamespaceEnv marks the copy of the test binary that runs inside the private network
// namespace.
const inNamespaceEnv = "PHALANKS_OLM_E2E_NETNS"

// EnterPrivateNetwork makes the rest of the test run in a network namespace of its own
// that has only a loopback interface. OLM's operators and opm serve listen on every
// interface with no flag to narrow it, and Service ClusterIPs must be reachable: inside
// the namespace both are harmless and possible. Called first in TestMain, it starts a copy
// of the test binary in a new namespace and exits with that copy's status; in the copy it
// brings loopback up and returns. It needs root (CAP_SYS_ADMIN) and iproute2's ip.
func EnterPrivateNetwork() error {
	if os.Getenv(inNamespaceEnv) == "1" {
		return setUpLoopback()
	}
	if os.Geteuid() != 0 {
		return errors.New("the OLM end-to-end test needs root: it runs the cluster, OLM and the operator " +
			"in a private network namespace (CLONE_NEWNET); run it as root, e.g. `sudo make test-olm` (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the OLM end-to-end test needs the ip command (iproute2) to configure its network namespace: apt-get install iproute2")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the test binary: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...) //nolint:gosec // G702: this test binary, again, with its own arguments
	cmd.Env = append(os.Environ(), inNamespaceEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		return fmt.Errorf("start the test in a private network namespace: %w", err)
	}
	os.Exit(0)
	return nil
}

// setUpLoopback brings lo up and checks that it is the only interface.
func setUpLoopback() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("the private network namespace has interface %s besides loopback", i.Name)
		}
	}
	return ip("link", "set", "lo", "up")
}

// AddLoopbackAddress adds address/32 to lo, so that a Service ClusterIP reaches the
// process that listens on it. An address lo already has is left as it is.
func AddLoopbackAddress(address string) error {
	want := net.ParseIP(address).To4()
	if want == nil {
		return fmt.Errorf("%q is not an IPv4 address", address)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	addrs, err := lo.Addrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(want) {
			return nil
		}
	}
	return ip("addr", "add", address+"/32", "dev", "lo")
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
