package makefile_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// fakeGo answers what hack/tools/build.sh asks the go command, and builds by writing
// the -o file, or fails as the module proxy does when FAKE_GO_BUILD=refuse.
const fakeGo = `#!/usr/bin/env bash
case "$1" in
env) for v in "${@:2}"; do case $v in GOVERSION) echo go1.26.0;; GOOS) echo linux;; GOARCH) echo amd64;; *) echo /tmp;; esac; done ;;
list) echo v1.36.3 ;;
build)
	if [[ ${FAKE_GO_BUILD:-} == refuse ]]; then
		echo "go: downloading k8s.io/sample-controller v0.36.5"
		echo "k8s.io/sample-controller@v0.36.5: reading https://proxy.golang.org/k8s.io/sample-controller/@v/v0.36.5.zip: 403 Forbidden" >&2
		exit 1
	fi
	sleep "${FAKE_GO_SLEEP:-0}"
	out= pkgs=()
	shift
	while [[ $# -gt 0 ]]; do
		case $1 in -o) out=$2; shift ;; -tags | -ldflags) shift ;; -*) ;; *) pkgs+=("$1") ;; esac
		shift
	done
	for p in "${pkgs[@]}"; do
		echo "$p"
		n=${p##*/}
		[[ $n =~ ^v[0-9]+$ ]] && { p=${p%/*}; n=${p##*/}; }
		if [[ $out == */ ]]; then echo built >"$out$n"; else echo built >"$out"; fi
	done ;;
esac
`

// buildScript copies build.sh and the tool modules into a scratch tree (so the tools it
// links land in that tree's bin/), with a fake go command first on PATH. run builds the
// peers set; a first argument starting with "--" is passed to build.sh before it.
func buildScript(t *testing.T) (run func(env ...string) (string, error), root, cache string) {
	t.Helper()
	repo, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	root, cache = t.TempDir(), t.TempDir()
	for _, rel := range []string{"hack/tools/build.sh", "hack/tools/peers/go.mod", "hack/tools/peers/go.sum"} {
		data, err := os.ReadFile(filepath.Join(repo, rel))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil { //nolint:gosec // G306: the script must be executable
			t.Fatal(err)
		}
	}
	fakeBin := t.TempDir()
	if err := os.WriteFile(filepath.Join(fakeBin, "go"), []byte(fakeGo), 0o755); err != nil { //nolint:gosec // G306: an executable
		t.Fatal(err)
	}
	run = func(env ...string) (string, error) {
		args := []string{"peers"}
		if len(env) > 0 && strings.HasPrefix(env[0], "--") {
			args, env = append([]string{env[0]}, args...), env[1:]
		}
		// PATH_PREFIX= puts a directory before the fake go.
		path := fakeBin + ":" + os.Getenv("PATH")
		var rest []string
		for _, e := range env {
			if dir, ok := strings.CutPrefix(e, "PATH_PREFIX="); ok {
				path = dir + ":" + path
			} else {
				rest = append(rest, e)
			}
		}
		cmd := exec.Command(filepath.Join(root, "hack/tools/build.sh"), args...)
		cmd.Env = append(os.Environ(), append(rest, "PATH="+path, "PHALANKS_TOOLS_CACHE="+cache)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	return run, root, cache
}

func TestToolBuildFailureSaysWhatFailedAndCachesNothing(t *testing.T) {
	run, root, cache := buildScript(t)
	out, err := run("FAKE_GO_BUILD=refuse")
	if err == nil {
		t.Fatalf("a refused module did not fail the build:\n%s", out)
	}
	for _, want := range []string{
		"FAILED building set peers (package k8s.io/sample-controller)",
		"the module proxy refused k8s.io/sample-controller@v0.36.5",
		"hack/tools/peers/go.mod",
		"retry with: hack/tools/build.sh peers",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	entries, _ := filepath.Glob(filepath.Join(cache, "peers-*"))
	if len(entries) != 0 {
		t.Errorf("a failed build left cache entries %v", entries)
	}
	if _, err := os.Lstat(filepath.Join(root, "bin", "sample-controller")); err == nil {
		t.Error("a failed build linked a binary into bin/")
	}

	// The retry then builds, announcing the plan first and the time last, and a third run
	// takes the entry as it is.
	out, err = run()
	if err != nil {
		t.Fatalf("retry: %v\n%s", err, out)
	}
	plan, built := strings.Index(out, "about  1 min on 2 cores  sample-controller"), strings.Index(out, "peers built in")
	if plan < 0 || built < plan {
		t.Errorf("want the plan, then the finished set:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "sample-controller")); err != nil {
		t.Errorf("the built tool is not linked into bin/: %v", err)
	}
	if out, err = run("FAKE_GO_BUILD=refuse"); err != nil || strings.Contains(out, "building") {
		t.Errorf("a cached set was built again (err %v):\n%s", err, out)
	}
}

// A failed build tells the reader to retry with `make tools-<set>`, and docs/development.md
// gives that command for every set: each set build.sh knows needs a make target that
// builds it (tools-olm and tools-node build their set together with its companions).
func TestEveryToolSetHasAMakeTarget(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sets, _, err := toolSets(root)
	if err != nil {
		t.Fatal(err)
	}
	for set := range sets {
		t.Run(set, func(t *testing.T) {
			lines, err := dryRun(root, "", "tools-"+set)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range lines {
				for _, words := range commands(line) {
					words = program(words)
					if len(words) > 0 && strings.HasSuffix(words[0], "hack/tools/build.sh") && contains(words[1:], set) {
						return
					}
				}
			}
			t.Errorf("make tools-%s does not run hack/tools/build.sh with set %s; it runs:\n%s", set, set, strings.Join(lines, "\n"))
		})
	}
}

// A background build returns at once, leaves a marker for each binary until it is done,
// and a command that then needs the set waits for it (raising it to normal priority),
// links it and says once that it was built in the background.
func TestABackgroundBuildIsWaitedForByWhatNeedsIt(t *testing.T) {
	run, root, cache := buildScript(t)
	out, err := run("--background", "FAKE_GO_SLEEP=3")
	if err != nil {
		t.Fatalf("--background: %v\n%s", err, out)
	}
	if !strings.Contains(out, "building peers in the background") {
		t.Errorf("--background did not say what it builds:\n%s", out)
	}
	if data, err := os.ReadFile(filepath.Join(root, "bin", ".building", "sample-controller")); err != nil || strings.TrimSpace(string(data)) != "peers" {
		t.Errorf("no marker naming the set for the binary under way: %q, %v", data, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "bin", "sample-controller")); err == nil {
		t.Fatal("--background waited for the build")
	}
	// The background build holds the set once it has started building it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(filepath.Join(cache, ".background-peers")); err == nil && strings.TrimSpace(string(data)) != "" {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(cache, "background.log"))
			t.Fatalf("the background build never started building peers:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// It runs at the lowest priority: its processes at nice 19 and, where the kernel
	// groups sessions (autogroup), its session's group too, without which a session of
	// its own shares the CPU with the foreground as an equal.
	data, err := os.ReadFile(filepath.Join(cache, ".background-peers"))
	if err != nil {
		t.Fatal(err)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("the background build's process group %q: %v", data, err)
	}
	if ni, err := exec.Command("ps", "-o", "ni=", "-p", strconv.Itoa(pgid)).Output(); err != nil || strings.TrimSpace(string(ni)) != "19" {
		t.Errorf("the background build runs at nice %q (%v), want 19", ni, err)
	}
	if _, err := os.Stat("/proc/self/autogroup"); err == nil {
		group, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pgid))
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(group)), "nice 19") {
			t.Errorf("the background build's session group is %q (%v), want nice 19", group, err)
		}
	}

	out, err = run()
	if err != nil {
		t.Fatalf("the foreground build: %v\n%s", err, out)
	}
	for _, want := range []string{"waiting for peers, which a background build is making", "tools: [background] peers built in"} {
		if !strings.Contains(out, want) {
			t.Errorf("the foreground build's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tools:   sample-controller") {
		t.Errorf("the foreground built the set again:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "sample-controller")); err != nil {
		t.Errorf("the set is not linked after the wait: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", ".building", "sample-controller")); err == nil {
		t.Error("the marker outlived the build")
	}
	if out, _ = run(); strings.Contains(out, "[background]") {
		t.Errorf("the background build was reported twice:\n%s", out)
	}
	log, _ := os.ReadFile(filepath.Join(cache, "background.log"))
	if !strings.Contains(string(log), "peers built in") {
		t.Errorf("background.log lacks the build:\n%s", log)
	}
}

// A suite's harness runs build.sh from a process that go test (or go run) started, and
// those put the Go release the module's go.mod names (its toolchain line) first on PATH
// and in GOROOT. The set's key holds the Go it builds with: build.sh must find the same
// Go as make does, or a set make built, or is building in the background, is built a
// second time under another key (seen: minio twice in a cold make demo).
func TestASetMakeBuiltIsFoundFromInsideGoTest(t *testing.T) {
	run, _, cache := buildScript(t)
	if out, err := run(); err != nil || !strings.Contains(out, "peers built in") {
		t.Fatalf("the first build (err %v):\n%s", err, out)
	}
	// The toolchain go switched to, as the module cache holds it.
	goroot := filepath.Join(t.TempDir(), "pkg", "mod", "golang.org", "toolchain@v0.0.1-go1.26.11.linux-amd64")
	if err := os.MkdirAll(filepath.Join(goroot, "bin"), 0o750); err != nil {
		t.Fatal(err)
	}
	switched := strings.Replace(fakeGo, "GOVERSION) echo go1.26.0", "GOVERSION) echo go1.26.11", 1)
	if err := os.WriteFile(filepath.Join(goroot, "bin", "go"), []byte(switched), 0o755); err != nil { //nolint:gosec // G306: an executable
		t.Fatal(err)
	}
	out, err := run("GOROOT="+goroot, "PATH_PREFIX="+filepath.Join(goroot, "bin"))
	if err != nil {
		t.Fatalf("from inside go test: %v\n%s", err, out)
	}
	if strings.Contains(out, "building") {
		t.Errorf("from inside go test the set was built again:\n%s", out)
	}
	if entries, _ := filepath.Glob(filepath.Join(cache, "peers-*")); len(entries) != 1 {
		t.Errorf("cache entries of the set: %v, want one", entries)
	}
}
