// Package tools locates the binaries that hack/tools/build.sh builds (kube-apiserver,
// etcd, kwok, MinIO, …) for the test harnesses and the demo.
package tools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// EnvBinDir names the environment variable that overrides where tool binaries are found.
const EnvBinDir = "PHALANKS_TOOLS_BIN"

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

// Path returns the path of the named tool binary, or an error telling how to build it.
func Path(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found in %s: every make target builds the tools it needs "+
			"(`make tools` builds the default sets, `make build` the manager)", name, dir)
	}
	return p, nil
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
