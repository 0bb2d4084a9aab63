// Package tools locates the binaries that hack/tools/build.sh builds (kube-apiserver,
// etcd, kwok, MinIO, …) for the test harnesses and the demo.
package tools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// EnvBinDir names the environment variable that overrides where tool binaries are found.
const EnvBinDir = "PHALANKS_TOOLS_BIN"

// EnvKubeTools names the environment variable that selects the Kubernetes version the
// harnesses run: the name of a versioned kube tool set of hack/tools/build.sh, such as
// kube-1.29, which build.sh links into bin/<set>/. Unset, they run the default set's
// binaries in bin/, the newest Kubernetes the project supports
// (docs/kubernetes-versions.md).
const EnvKubeTools = "PHALANKS_KUBE_TOOLS"

// kubeBinaries are the binaries that come in one version of Kubernetes: with
// EnvKubeTools set they are found only in that set's directory, never mixed with the
// default version's (a kubelet newer than its API server is unsupported, and a suite
// that silently ran the default API server would prove nothing about the old one).
var kubeBinaries = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"kubectl", "kubelet", "kube-proxy",
}

var (
	rootOnce sync.Once
	root     string
	errRoot  error
)

// RepoRoot returns the directory of this repository's go.mod, found by walking up from
// the working directory (go test runs each package in its own directory).
func RepoRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			errRoot = err
			return
		}
		for {
			data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && isOurModule(data) {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				errRoot = fmt.Errorf("no phalanks-operator go.mod above the working directory")
				return
			}
			dir = parent
		}
	})
	return root, errRoot
}

func isOurModule(gomod []byte) bool {
	const want = "module github.com/phalanks/phalanks-operator\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}

// BinDir returns the directory holding the tool binaries.
func BinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return dir, nil
	}
	r, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(r, "bin"), nil
}

// IsKubeBinary reports whether name is one of the binaries that come in one version of
// Kubernetes, which EnvKubeTools selects.
func IsKubeBinary(name string) bool { return slices.Contains(kubeBinaries, name) }

// KubeToolSet returns the kube tool set EnvKubeTools names, or "" for the default one.
func KubeToolSet() (string, error) {
	set := os.Getenv(EnvKubeTools)
	if set == "" || set == "kube" {
		return "", nil
	}
	if !strings.HasPrefix(set, "kube-") || strings.ContainsAny(set, `/\`) {
		return "", fmt.Errorf("%s=%s: want the name of a versioned kube tool set such as kube-1.29 "+
			"(hack/tools/build.sh --list)", EnvKubeTools, set)
	}
	return set, nil
}

// KubeVersion returns the Kubernetes minor version ("1.29") of the tool set EnvKubeTools
// names, or "" for the default set, for suites that check which API server they run.
func KubeVersion() (string, error) {
	set, err := KubeToolSet()
	if err != nil || set == "" {
		return "", err
	}
	return strings.TrimPrefix(set, "kube-"), nil
}

// KubeWant returns the Kubernetes version ("v1.29.15") the selected kube tool set pins
// (the k8s.io/kubernetes requirement of hack/tools/<set>/go.mod), and the set's name.
func KubeWant() (version, set string, err error) {
	set, err = KubeToolSet()
	if err != nil {
		return "", "", err
	}
	if set == "" {
		set = "kube"
	}
	root, err := RepoRoot()
	if err != nil {
		return "", "", err
	}
	gomod := filepath.Join(root, "hack", "tools", set, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", "", fmt.Errorf("%s=%s: %w", EnvKubeTools, os.Getenv(EnvKubeTools), err)
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			return f[1], set, nil
		}
	}
	return "", "", fmt.Errorf("%s requires no k8s.io/kubernetes version", gomod)
}

// CheckKubeVersion returns an error unless a running API server's version (its /version
// gitVersion) is the one the selected tool set pins: a stale bin/ link, or a suite that
// ran another version than the one it was asked to, would otherwise pass unnoticed.
func CheckKubeVersion(server string) error {
	want, set, err := KubeWant()
	if err != nil {
		return err
	}
	if server != want {
		return fmt.Errorf("kube-apiserver reports %s, but tool set %s pins %s: rebuild it with "+
			"`hack/tools/build.sh %s` (or the make target you ran)", server, set, want, set)
	}
	return nil
}

// KubeBinDir returns the directory of the Kubernetes binaries (etcd, kube-apiserver,
// kubelet, …) of the selected version: bin/ by default, bin/<set>/ with EnvKubeTools.
func KubeBinDir() (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	set, err := KubeToolSet()
	if err != nil || set == "" {
		return dir, err
	}
	return filepath.Join(dir, set), nil
}

// Path returns the path of the named tool binary, or an error telling how to build it.
// Kubernetes binaries come from the version EnvKubeTools selects.
func Path(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	if IsKubeBinary(name) {
		set, err := KubeToolSet()
		if err != nil {
			return "", err
		}
		if set != "" {
			p := filepath.Join(dir, set, name)
			if _, err := os.Stat(p); err != nil {
				if waited, err := awaitBackground(filepath.Join(dir, set), name); waited {
					return p, err
				}
				return "", fmt.Errorf("%s not found in %s: %s=%s selects that Kubernetes version, whose tool set "+
					"provides only what its suites run (build it with `hack/tools/build.sh %s`; "+
					"hack/tools/build.sh --list names what each set provides)", name, filepath.Dir(p), EnvKubeTools, set, set)
			}
			return p, nil
		}
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		if waited, err := awaitBackground(dir, name); waited {
			return p, err
		}
		return "", fmt.Errorf("%s not found in %s: every make target builds the tools it needs "+
			"(`make tools` builds the default sets, `make build` the manager)", name, dir)
	}
	return p, nil
}

// awaitBackground waits for name when a background build of its set is under way (its
// marker dir/.building/name names the set: hack/tools/build.sh --background, which the
// make targets start for the sets their later suites need): it runs build.sh for that
// set, which waits for the background build, raising it to normal priority, and links
// the binaries. It reports whether there was such a build.
func awaitBackground(dir, name string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, ".building", name))
	if err != nil {
		return false, nil
	}
	set := strings.TrimSpace(string(data))
	if err := buildSet(set); err != nil {
		return true, fmt.Errorf("%s: waiting for the background build of tool set %s: %w", name, set, err)
	}
	if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
		return true, fmt.Errorf("%s: tool set %s was built, but: %w", name, set, err)
	}
	return true, nil
}

// buildSet runs hack/tools/build.sh for set, its output on standard error.
var buildSet = func(set string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "tools", "build.sh"), set)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// BuildManager builds the manager binary from this repository into dir and returns its
// path, for suites that run the manager as a process: they test the tree as it is, not
// whatever bin/manager an earlier make build left.
func BuildManager(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "manager")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the manager: %w\n%s", err, b)
	}
	return out, nil
}

// BuildCommand builds the command at pkg of this repository (such as
// ./cmd/kubectl-phalanks) into dir and returns its path, named after the package's
// directory, for suites that run it as its users do.
func BuildCommand(dir, pkg string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}
