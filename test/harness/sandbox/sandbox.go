// Package sandbox runs the rest of a test binary (or the demo) in Linux namespaces of its
// own, the way a container runtime runs a kind node: a network namespace that has only
// loopback, a mount namespace whose mounts disappear with it, and a PID namespace whose
// init is killed with the program, so every process the program starts — containerd's
// shims and the pods' processes included, which leave their parents — is killed when it
// ends, however it ends.
//
// The local cluster's real node needs all three: kubelet, kube-proxy, OLM and opm listen
// on every interface and on fixed ports; containerd and the kubelet write to fixed paths
// under /run and /var/log and set kernel parameters (see test/harness/cluster); and a
// crashed test must not leave containers running on a shared machine. Two sandboxes share
// nothing but the kernel, the cgroup tree (each gets its own cgroup, CgroupName) and the
// filesystem outside the paths the cluster overlays.
package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	// envPIDFile names the file where the copy outside records the host PID of the
	// sandbox's init, for EnterCommand.
	envPIDFile = "PHALANKS_SANDBOX_PID_FILE"
	// envName holds the sandbox's name, unique on the machine, which names its cgroup.
	envName = "PHALANKS_SANDBOX"
	// cgroupRoot is where the v1 and v2 cgroup hierarchies are mounted.
	cgroupRoot = "/sys/fs/cgroup"
)

// Inside reports whether the process is the program a sandbox runs (see Enter).
func Inside() bool { return os.Getenv(envName) != "" && os.Getenv(envRole) == roleProgram }

// CgroupName is the name of the sandbox's own cgroup, to be created under the root of
// each hierarchy (the kubelet's cgroupRoot): "phalanks-sandbox-<random>". Enter removes
// it, with everything below it, when the sandbox ends. Empty outside a sandbox.
func CgroupName() string {
	if !Inside() {
		return ""
	}
	return os.Getenv(envName)
}

// EnterCommand returns the command that runs a program on the host inside this sandbox's
// network and mount namespaces (as root), for a person to look around: kubectl against
// the cluster, ctr against the node's containerd.
func EnterCommand() (string, error) {
	if !Inside() {
		return "", errors.New("not inside a sandbox")
	}
	data, err := os.ReadFile(os.Getenv(envPIDFile)) //nolint:gosec // G703: the file the copy outside created and named
	if err != nil || len(data) == 0 {
		return "", fmt.Errorf("the sandbox's PID on the host is unknown: %w", err)
	}
	return "nsenter --target " + strings.TrimSpace(string(data)) + " --net --mount", nil
}

// Environ returns the process's environment without the sandbox's variables: a program
// started inside a sandbox with it gets a sandbox of its own from Enter, nested in this
// one.
func Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envName+"=") && !strings.HasPrefix(kv, envRole+"=") && !strings.HasPrefix(kv, envPIDFile+"=") {
			env = append(env, kv)
		}
	}
	return env
}

func newName() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "phalanks-sandbox-" + hex.EncodeToString(b), nil
}

// The program runs three times: on the host, where Enter creates the namespaces; as the
// sandbox's PID 1, a small init that sets the namespaces up, runs the program once more
// and reaps every orphan (containerd's shims are re-parented to PID 1, and a test
// program reaping them itself would steal the exit status of the commands it runs); and
// as that program, PID 2, for which Enter returns.
const (
	envRole     = "PHALANKS_SANDBOX_ROLE"
	roleInit    = "init"
	roleProgram = "program"
)

// Enter runs the program again inside a new sandbox, with the same arguments, standard
// streams and environment, and exits with its exit status; in that copy it returns nil.
// Call it first thing in TestMain or main. It needs root and the ip command (iproute2);
// without them it returns an error saying so. A program started inside a sandbox without
// the sandbox's environment variables gets a sandbox of its own, nested in it.
func Enter() error {
	switch os.Getenv(envRole) {
	case roleProgram:
		if os.Getenv(envName) == "" {
			return fmt.Errorf("%s is set without %s", envRole, envName)
		}
		return nil
	case roleInit:
		if os.Getpid() != 1 {
			return fmt.Errorf("%s=%s but this process is not PID 1 of a sandbox", envRole, roleInit)
		}
		os.Exit(runInit())
	}
	if err := checkPrivileges(); err != nil {
		return err
	}
	name, err := newName()
	if err != nil {
		return err
	}
	pidFile, err := os.CreateTemp("", name+"-*.pid")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(pidFile.Name()) }()
	cmd, err := again(envName+"="+name, envRole+"="+roleInit, envPIDFile+"="+pidFile.Name())
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the sandbox: %w", err)
	}
	_, _ = fmt.Fprint(pidFile, cmd.Process.Pid)
	_ = pidFile.Close()
	stop := forwardSignals(cmd.Process)
	err = cmd.Wait()
	stop()
	// The kernel has killed every process of the sandbox when its PID 1 ended; what is
	// left is the cgroup directories, now empty.
	if rmErr := removeCgroups(name); rmErr != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", rmErr)
	}
	_ = os.Remove(pidFile.Name())
	if err != nil && !isExit(err) {
		return fmt.Errorf("run the sandbox: %w", err)
	}
	os.Exit(exitStatus(cmd.ProcessState))
	return nil
}

// again prepares this program with the same arguments and streams, and env added.
func again(env ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the program to run in the sandbox: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...) //nolint:gosec // G204: this program, again, with its own arguments
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd, nil
}

// forwardSignals passes interrupts on to p until the returned function is called. A
// terminal's ^C reaches every process of the foreground group; a signal sent to one
// process reaches the program this way (Ginkgo, for one, stops the suite and cleans up).
func forwardSignals(p *os.Process) func() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range signals {
			_ = p.Signal(s)
		}
	}()
	return func() { signal.Stop(signals); close(signals) }
}

// runInit is PID 1: it sets the sandbox up, runs the program and reaps every process
// that ends in the sandbox until the program has, and returns the program's exit status.
// Returning ends the sandbox: the kernel kills whatever still runs in it.
func runInit() int {
	if err := setUp(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 2
	}
	cmd, err := again(envRole + "=" + roleProgram)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 2
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox: start the program:", err)
		return 2
	}
	stop := forwardSignals(cmd.Process)
	defer stop()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sandbox: wait:", err)
			return 2
		}
		if pid == cmd.Process.Pid {
			return waitStatus(ws)
		}
	}
}

func isExit(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit)
}

func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return waitStatus(ws)
	}
	return ps.ExitCode()
}

// waitStatus is the shell's exit status of a process: its code, or 128 + the signal that
// killed it.
func waitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		fmt.Fprintf(os.Stderr, "sandbox: the program was killed by %s\n", ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
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
