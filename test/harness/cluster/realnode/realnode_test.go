package realnode_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
)

func TestMain(m *testing.M) {
	if err := sandbox.Enter(); err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// hostPaths are where containerd, the kubelet and the CNI plugins write when left alone.
var hostPaths = []string{
	"/run/containerd", "/run/mount", "/run/nri", "/run/xtables.lock",
	"/var/log/containers", "/var/log/pods",
	"/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni",
	"/opt/containerd",
}

// state is what a node could leave behind.
type state struct {
	Processes []string
	Mounts    []string
	Links     []string
	Cgroups   []string
	Rules     []string
	HostPaths []string
}

// snapshot reads the state, leaving out the processes named and their descendants (and
// this test and the sandbox's init).
func snapshot(t *testing.T, ignore ...int) state {
	t.Helper()
	var s state
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if pid == 1 || pid == os.Getpid() || descends(pid, ignore) {
			continue
		}
		// A process that has exited holds nothing: gone, or a zombie its parent (often
		// the sandbox's init, once a node's process is reparented) has not reaped yet.
		if st, _, ok := procStat(pid); !ok || st == 'Z' || st == 'X' {
			continue
		}
		cmd, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s.Processes = append(s.Processes, filepath.Base(filepath.Dir(p))+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mountinfo)) {
		s.Mounts = append(s.Mounts, strings.Fields(line)[4])
	}
	links, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		s.Links = append(s.Links, l.Name)
	}
	s.Cgroups, _ = filepath.Glob(filepath.Join("/sys/fs/cgroup/*", sandbox.CgroupName()))
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Fatal(err)
	}
	// Rules and user-defined chains; the tables and their built-in chains stay once
	// loaded.
	builtin := map[string]bool{"INPUT": true, "OUTPUT": true, "FORWARD": true, "PREROUTING": true, "POSTROUTING": true}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 && (strings.HasPrefix(f[0], "-") || (strings.HasPrefix(f[0], ":") && !builtin[f[0][1:]])) {
			s.Rules = append(s.Rules, strings.TrimSpace(line))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.HostPaths = append(s.HostPaths, p)
		}
	}
	slices.Sort(s.Mounts)
	return s
}

// descends reports whether pid is one of ancestors or their descendant.
func descends(pid int, ancestors []int) bool {
	for pid > 1 {
		if slices.Contains(ancestors, pid) {
			return true
		}
		var ok bool
		if _, pid, ok = procStat(pid); !ok {
			return false
		}
	}
	return false
}

// procStat reads a process's state letter and parent from /proc; ok is false once the
// process is gone.
func procStat(pid int) (state byte, ppid int, ok bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields[0][0], ppid, err == nil
}

// The leak check counts a process that runs and not one that has exited but is not reaped
// yet.
func TestSnapshotCountsRunningProcessesOnly(t *testing.T) {
	running := exec.Command("sleep", "60")
	exited := exec.Command("true")
	for _, c := range []*exec.Cmd{running, exited} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		_ = running.Process.Kill()
		_ = running.Wait()
		_ = exited.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for st, _, _ := procStat(exited.Process.Pid); st != 'Z'; st, _, _ = procStat(exited.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("true never became a zombie (state %q)", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	procs := snapshot(t).Processes
	if want := fmt.Sprintf("%d sleep 60 ", running.Process.Pid); !slices.Contains(procs, want) {
		t.Errorf("the running process %q is missing from %q", want, procs)
	}
	for _, p := range procs {
		if strings.HasPrefix(p, strconv.Itoa(exited.Process.Pid)+" ") {
			t.Errorf("the zombie is counted: %q", p)
		}
	}
}
