// Package sandbox runs the rest of a test binary (or the demo) in Linux namespaces of its
// own, the way a container runtime runs a kind node: a network namespace that has only
// loopback, a mount namespace whose mounts disappear with it, and a PID namespace in which
// the program is PID 1, so every process it starts — containerd's shims and the pods'
// processes included, which leave their parents — is killed when it ends, however it
// ends.
//
// The local cluster's real node needs all three: kubelet, kube-proxy, OLM and opm listen
// on every interface and on fixed ports; containerd and the kubelet write to fixed paths
// under /run and /var/log and set kernel parameters (see test/harness/cluster); and a
// crashed test must not leave containers running on a shared machine. Two sandboxes share
// nothing but the kernel, the cgroup tree (each gets its own cgroup, CgroupName) and the
// filesystem outside the paths the cluster overlays.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	// envHostPID marks the copy of the program that runs inside the sandbox and holds the
	// PID of the copy outside, which names the sandbox's cgroup.
	envHostPID = "PHALANKS_SANDBOX_HOST_PID"
	// cgroupRoot is where the v1 and v2 cgroup hierarchies are mounted.
	cgroupRoot = "/sys/fs/cgroup"
)

// Inside reports whether the process runs inside a sandbox that Enter made.
func Inside() bool { return os.Getenv(envHostPID) != "" && os.Getpid() == 1 }

// CgroupName is the name of the sandbox's own cgroup, to be created under the root of
// each hierarchy (the kubelet's cgroupRoot): "phalanks-sandbox-<PID outside>". Enter
// removes it, with everything below it, when the sandbox ends. Empty outside a sandbox.
func CgroupName() string {
	if !Inside() {
		return ""
	}
	return cgroupName(os.Getenv(envHostPID))
}

func cgroupName(hostPID string) string { return "phalanks-sandbox-" + hostPID }

// Enter runs the program again inside a new sandbox, with the same arguments, standard
// streams and environment, and exits with its exit status; in that copy it sets the
// sandbox up and returns. Call it first thing in TestMain or main. It needs root and the
// ip command (iproute2); without them it returns an error saying so.
func Enter() error {
	if os.Getenv(envHostPID) != "" {
		if os.Getpid() != 1 {
			return fmt.Errorf("%s is set but this process is not PID 1 of a sandbox", envHostPID)
		}
		return setUp()
	}
	if err := checkPrivileges(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the program to run in the sandbox: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...) //nolint:gosec // G204: this program, again, with its own arguments
	cmd.Env = append(os.Environ(), envHostPID+"="+strconv.Itoa(os.Getpid()))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	// The copy inside handles interrupts (Ginkgo stops the suite and runs its cleanup);
	// this one waits for it. A terminal's ^C reaches both; a signal sent to this process
	// alone is passed on.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the sandbox: %w", err)
	}
	go func() {
		for s := range signals {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(signals)
	// The kernel has killed every process of the sandbox when its PID 1 ended; what is
	// left is the cgroup directories, now empty.
	if rmErr := removeCgroups(cgroupName(strconv.Itoa(os.Getpid()))); rmErr != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", rmErr)
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				fmt.Fprintf(os.Stderr, "sandbox: the program inside was killed by %s\n", ws.Signal())
				os.Exit(128 + int(ws.Signal()))
			}
			os.Exit(exit.ExitCode())
		}
		return fmt.Errorf("run the sandbox: %w", err)
	}
	os.Exit(0)
	return nil
}

func checkPrivileges() error {
	if os.Geteuid() != 0 {
		return errors.New("the real node needs root: it runs containerd, the kubelet and kube-proxy in network, mount and " +
			"PID namespaces of their own and manages cgroups; run it as root, e.g. `sudo make test` (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the real node needs the ip command (iproute2) to configure its network namespace: apt-get install iproute2")
	}
	return nil
}

// setUp runs inside the new namespaces: mounts made here must not reach the host, /proc
// must show this PID namespace, and loopback must be up.
func setUp() error {
	// Receive the host's mounts but send none back (on hosts where / is shared).
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc for the sandbox's PID namespace: %w", err)
	}
	return IP("link", "set", "lo", "up")
}

// IP runs the ip command (iproute2) with args.
func IP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeCgroups removes the named cgroup, children first, from every hierarchy.
func removeCgroups(name string) error {
	dirs, err := filepath.Glob(filepath.Join(cgroupRoot, "*", name))
	if err != nil {
		return err
	}
	if top := filepath.Join(cgroupRoot, name); isDir(top) {
		dirs = append(dirs, top)
	}
	var errs []error
	for _, d := range dirs {
		errs = append(errs, RemoveCgroupTree(d))
	}
	return errors.Join(errs...)
}

// RemoveCgroupTree removes a cgroup directory and every cgroup below it, deepest first. A
// cgroup that still has processes cannot be removed; the error names it.
func RemoveCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, RemoveCgroupTree(filepath.Join(dir, e.Name())))
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
