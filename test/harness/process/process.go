// Package process runs the servers the harnesses need (etcd, kube-apiserver, MinIO, …) as
// child processes that log to files and are always stopped by PID, also when the test
// process dies first.
package process

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one child process. Fill the exported fields, then Start it.
type Process struct {
	Name string
	Path string
	Args []string
	// Env is added to the parent's environment; an entry "KEY=" with an empty value
	// removes KEY.
	Env     []string
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Start launches the process. The child receives SIGKILL if the test process dies.
func (p *Process) Start() error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = mergeEnv(os.Environ(), p.Env)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd = cmd
	p.exited = make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return nil
}

// PID returns the process ID, or 0 before Start.
func (p *Process) PID() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process was started and has not ended.
func (p *Process) Running() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Pause stops the process group with SIGSTOP, as a debugger, a frozen cgroup or a
// descheduled VM would: nothing in it runs until Resume, while the clocks go on.
func (p *Process) Pause() error {
	if !p.Running() {
		return fmt.Errorf("pause %s: not running", p.Name)
	}
	return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP)
}

// Resume continues a paused process group (SIGCONT).
func (p *Process) Resume() error {
	if !p.Running() {
		return fmt.Errorf("resume %s: not running", p.Name)
	}
	return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
}

// Stop sends SIGTERM to the process group, waits up to grace, then kills it. A paused
// process is continued, so that it can act on the SIGTERM.
func (p *Process) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	p.Kill()
	return nil
}

// Kill sends SIGKILL to the process group and waits for the process to end.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// FailedEarly returns an error if the process has already ended, quoting its log.
func (p *Process) FailedEarly() error {
	if p.exited == nil || p.Running() {
		return nil
	}
	cause := p.err
	if cause == nil {
		cause = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited: %w; log %s:\n%s", p.Name, cause, p.LogPath, Tail(p.LogPath, 40))
}

// Tail returns the last n lines of a file, for error messages.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	end := len(data)
	for i := len(data) - 1; i >= 0 && n >= 0; i-- {
		if data[i] == '\n' {
			n--
			if n < 0 {
				return string(data[i+1 : end])
			}
		}
	}
	return string(data)
}

func mergeEnv(base, extra []string) []string {
	drop := map[string]bool{}
	for _, kv := range extra {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				drop[kv[:i]] = true
				break
			}
		}
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		name := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				name = kv[:i]
				break
			}
		}
		if !drop[name] {
			out = append(out, kv)
		}
	}
	for _, kv := range extra {
		if kv[len(kv)-1] != '=' {
			out = append(out, kv)
		}
	}
	return out
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// HostPort joins 127.0.0.1 and a port.
func HostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// WaitFor polls check every interval until it returns nil, the process exits, or timeout
// passes.
func WaitFor(p *Process, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if err := p.FailedEarly(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%s not ready after %s", p.Name, timeout), last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// HTTPOK sends GET url, with token as a bearer token unless it is empty, and returns nil
// when the answer is 200 OK: a readiness check for WaitFor. A nil client means one with a
// five-second timeout.
func HTTPOK(hc *http.Client, url, token string) error {
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequest(http.MethodGet, url, nil) //nolint:noctx // bounded by the client's timeout
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// SocketOwner returns which of pids holds the TCP socket whose local address is local
// and whose peer is remote (as seen from that socket), or 0 when none does: a server a
// test runs learns which child process a connection came from by its peer address.
// It reads /proc/net/tcp{,6} for the socket's inode and /proc/<pid>/fd for its holder.
func SocketOwner(local, remote netip.AddrPort, pids []int) (int, error) {
	inode, err := socketInode(local, remote)
	if err != nil || inode == "" {
		return 0, err
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // ended meanwhile
		}
		for _, fd := range fds {
			if target, err := os.Readlink(dir + "/" + fd.Name()); err == nil && target == want {
				return pid, nil
			}
		}
	}
	return 0, nil
}

// socketInode finds the inode of the TCP socket local→remote in /proc/net.
func socketInode(local, remote netip.AddrPort) (string, error) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			l, lerr := parseProcAddr(f[1])
			r, rerr := parseProcAddr(f[2])
			if lerr == nil && rerr == nil && l == local && r == remote {
				return f[9], nil
			}
		}
	}
	return "", nil
}

// parseProcAddr reads "0100007F:1F90" (IPv4, or 32 hex digits for IPv6, each 32-bit
// word in host byte order) as written in /proc/net/tcp{,6}; IPv4-mapped IPv6
// addresses come back as IPv4.
func parseProcAddr(s string) (netip.AddrPort, error) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no port in %q", s)
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", s)
	}
	for i := 0; i+4 <= len(raw); i += 4 {
		v := binary.NativeEndian.Uint32(raw[i:])
		binary.BigEndian.PutUint32(raw[i:], v)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// Children lists the calling process's child processes, each as its PID and command
// line: what a suite that stops every process it started by PID must find empty at its
// end.
func Children() []string {
	var out []string
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, pid := range strings.Fields(string(data)) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline")) //nolint:gosec // G703: a PID the kernel listed
			out = append(out, pid+" "+strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
		}
	}
	return out
}
