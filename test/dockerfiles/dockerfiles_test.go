// Package dockerfiles builds the project's Dockerfiles with a real builder, Debian's
// buildah, as a user's `docker build` or `podman build` would, and checks the images
// against what users get.
//
// The registry is out of reach here, so the one base image the Dockerfiles pull,
// golang:1.26, is made locally from the Go toolchain that runs the test (and a static
// busybox for RUN's shell), and every build runs with --pull=never. The module and build
// caches of the machine are mounted into the builder stage, read-only and read-write, so
// that `go mod download` finds every module without a network (GOPROXY=off: a module
// the machine lacks fails the build) and the compiler reuses what the machine built.
package dockerfiles

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// builder runs buildah with its own storage under a test's temporary directory.
type builder struct {
	t       *testing.T
	storage []string
	root    string // the repository: the build context
	mounts  []string
}

func newBuilder(t *testing.T) *builder {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("buildah needs root here (make test runs as root)")
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		t.Fatal("buildah is missing: make test installs Debian's (make tools-for-test)")
	}
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b := &builder{
		t:       t,
		root:    root,
		storage: []string{"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", storageDriver(dir)},
	}
	t.Cleanup(func() { _, _ = b.run("rm", "--all") })
	modcache, gocache := goEnv(t, "GOMODCACHE"), goEnv(t, "GOCACHE")
	// The machine's module cache, modules extracted (make test-images downloads every
	// module the Dockerfiles build first), read-only: go mod download finds them there
	// instead of extracting each module into the build's layer, for every build of
	// every platform (most of the builder's time and disk before).
	b.mounts = []string{
		"-v", modcache + ":/root/go/pkg/mod:ro",
		"-v", gocache + ":/root/.cache/go-build",
	}
	return b
}

// storageDriver is the kernel's overlay where the directory allows it, vfs (a copy of
// every layer, about twice the CPU) on an overlay filesystem, where overlay cannot
// nest: a CI machine that is itself a container.
func storageDriver(dir string) string {
	const overlayfsMagic = 0x794c7630
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type == overlayfsMagic {
		return "vfs"
	}
	return "overlay"
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// run runs buildah with args and returns its standard output; the error carries the
// combined output's tail.
func (b *builder) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "buildah", append(slices.Clone(b.storage), args...)...)
	cmd.Dir = b.root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		out := stdout.String() + stderr.String()
		if len(out) > 4000 {
			out = "…" + out[len(out)-4000:]
		}
		return stdout.String(), fmt.Errorf("buildah %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return stdout.String(), nil
}

func (b *builder) must(args ...string) string {
	b.t.Helper()
	out, err := b.run(args...)
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// golangBase makes docker.io/library/golang:1.26 from the Go toolchain running the test:
// its GOROOT, a static busybox as /bin/sh and the usual commands, a /tmp, and the
// environment that points the module download at the mounted cache.
func (b *builder) golangBase() {
	b.t.Helper()
	goroot := goEnv(b.t, "GOROOT")
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		b.t.Fatal("busybox is missing: the real node's tools install Debian's busybox-static")
	}
	c := b.must("from", "scratch")
	b.must("copy", c, goroot, "/usr/local/go")
	b.must("copy", c, busybox, "/bin/busybox")
	b.must("run", "--isolation", "chroot", c, "--", "/bin/busybox", "--install", "-s", "/bin")
	b.must("run", "--isolation", "chroot", c, "--", "/bin/busybox", "mkdir", "-p", "-m", "1777", "/tmp")
	b.must("config",
		"--env", "PATH=/usr/local/go/bin:/bin",
		"--env", "HOME=/root",
		"--env", "GOTOOLCHAIN=local",
		"--env", "GOPROXY=off",
		"--env", "GOSUMDB=off",
		c)
	b.must("commit", "--rm", c, "docker.io/library/golang:1.26")
}

// build builds dockerfile for each platform into the manifest list name.
func (b *builder) build(dockerfile, ignorefile, name string, platforms []string, args ...string) error {
	for _, p := range platforms {
		cmd := []string{"build", "--pull=never", "--platform", p,
			"--build-arg", "BUILDPLATFORM=linux/" + runtime.GOARCH,
			"-f", dockerfile, "--manifest", name}
		if ignorefile != "" {
			cmd = append(cmd, "--ignorefile", ignorefile)
		}
		cmd = append(cmd, b.mounts...)
		cmd = append(cmd, args...)
		if _, err := b.run(append(cmd, ".")...); err != nil {
			return err
		}
	}
	return nil
}

// imageConfig is the part of an image's OCI configuration the checks read.
type imageConfig struct {
	OCIv1 struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			User       string            `json:"User"`
			Entrypoint []string          `json:"Entrypoint"`
			Cmd        []string          `json:"Cmd"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
	} `json:"OCIv1"`
}

// digest returns a reference by digest to the image in manifest list name for arch.
func (b *builder) digest(name, arch string) string {
	b.t.Helper()
	var list struct {
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal([]byte(b.must("manifest", "inspect", name)), &list); err != nil {
		b.t.Fatal(err)
	}
	for _, m := range list.Manifests {
		if m.Platform.Architecture == arch {
			return name + "@" + m.Digest
		}
	}
	b.t.Fatalf("manifest list %s has no %s image", name, arch)
	return ""
}

// inspect returns the configuration of the image in list name for arch.
func (b *builder) inspect(name, arch string) imageConfig {
	b.t.Helper()
	var cfg imageConfig
	if err := json.Unmarshal([]byte(b.must("inspect", "--type", "image", b.digest(name, arch))), &cfg); err != nil {
		b.t.Fatal(err)
	}
	return cfg
}

// files mounts the image of list name for arch and returns its root directory.
func (b *builder) files(name, arch string) string {
	b.t.Helper()
	c := b.must("from", "--pull=never", b.digest(name, arch))
	b.t.Cleanup(func() { _, _ = b.run("rm", c) })
	return b.must("mount", c)
}

var both = []string{"linux/amd64", "linux/arm64"}

// The release values both builds get.
const (
	testVersion  = "1.2.3"
	testRevision = "0123abc"
)

// daemonless builds the four images with the daemonless build the release and the OLM
// suites use (make images: hack/olm/images) into an OCI layout, each named
// localhost/<image>:daemonless, and returns the layout's directory.
func daemonless(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"-C", "hack/olm", "run", "-tags", "containers_image_openpgp", "./cmd/olm", "images", "build",
		"--layout", dir, "--bundle-dir", "bundle", "--version", testVersion, "--revision", testRevision,
		"--image", "localhost/operator:daemonless", "--scorecard-image", "localhost/scorecard-tests:daemonless",
		"--bundle-image", "localhost/bundle:daemonless", "--catalog-image", "localhost/catalog:daemonless"}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the daemonless build: %v\n%s", err, out)
	}
	return dir
}

// sameAsDaemonless requires the real builder's manifest list name to hold, for each
// platform, the image the daemonless build wrote into layout as ref: the same
// configuration and the same files, with the same modes, owners and contents.
func (b *builder) sameAsDaemonless(t *testing.T, name, layout, ref string, platforms []string) {
	t.Helper()
	dir := t.TempDir()
	b.must("manifest", "push", "--all", name, "oci:"+dir+":built")
	for _, p := range platforms {
		want, err := imageIn(layout, ref, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := imageIn(dir, "built", p)
		if err != nil {
			t.Fatal(err)
		}
		wv, err := viewOf(want)
		if err != nil {
			t.Fatal(err)
		}
		gv, err := viewOf(got)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range differences(wv, gv) {
			t.Errorf("%s, %s: %s", name, p, d)
		}
	}
}

// TestTheDockerfilesBuildWithARealBuilder builds the manager, bundle and catalog images
// from the Dockerfiles users build, and checks each against what the release ships.
func TestTheDockerfilesBuildWithARealBuilder(t *testing.T) {
	b := newBuilder(t)
	b.golangBase()
	built := daemonless(t, b.root)

	t.Run("the manager image, for amd64 and arm64", func(t *testing.T) {
		if err := b.build("Dockerfile", "", "localhost/manager:test", both,
			"--build-arg", "VERSION="+testVersion, "--build-arg", "REVISION="+testRevision); err != nil {
			t.Fatal(err)
		}
		for _, arch := range []string{"amd64", "arm64"} {
			cfg := b.inspect("localhost/manager:test", arch).OCIv1
			if cfg.OS != "linux" || cfg.Architecture != arch {
				t.Errorf("%s image is for %s/%s", arch, cfg.OS, cfg.Architecture)
			}
			if cfg.Config.User != "65532:65532" {
				t.Errorf("%s image runs as %q, want 65532:65532 (restricted Pod Security)", arch, cfg.Config.User)
			}
			if !slices.Equal(cfg.Config.Entrypoint, []string{"/manager"}) {
				t.Errorf("%s image's entrypoint is %v, want [/manager]", arch, cfg.Config.Entrypoint)
			}
			for k, v := range map[string]string{
				"org.opencontainers.image.title":    "phalanks-operator",
				"org.opencontainers.image.version":  testVersion,
				"org.opencontainers.image.revision": testRevision,
				"org.opencontainers.image.licenses": "Apache-2.0",
			} {
				if got := cfg.Config.Labels[k]; got != v {
					t.Errorf("%s image's label %s is %q, want %q", arch, k, got, v)
				}
			}
		}
		rootfs := b.files("localhost/manager:test", "amd64")
		for _, f := range []string{"manager", "etc/passwd", "etc/group"} {
			if _, err := os.Stat(filepath.Join(rootfs, f)); err != nil {
				t.Errorf("the manager image lacks /%s: %v", f, err)
			}
		}
		// The binary users run: it starts and lists its flags.
		out, _ := exec.Command(filepath.Join(rootfs, "manager"), "-h").CombinedOutput()
		if !bytes.Contains(out, []byte("-controllers")) || !bytes.Contains(out, []byte("-leader-elect")) {
			t.Errorf("the image's manager -h printed no flag list:\n%s", out)
		}
		b.sameAsDaemonless(t, "localhost/manager:test", built, "localhost/operator:daemonless", both)
	})

	t.Run("the scorecard-test image, for amd64 and arm64", func(t *testing.T) {
		const dockerfile = "hack/olm/cmd/phalanks-scorecard-tests/Dockerfile"
		if err := b.build(dockerfile, dockerfile+".dockerignore", "localhost/scorecard-tests:test", both,
			"--build-arg", "VERSION="+testVersion, "--build-arg", "REVISION="+testRevision); err != nil {
			t.Fatal(err)
		}
		b.sameAsDaemonless(t, "localhost/scorecard-tests:test", built, "localhost/scorecard-tests:daemonless", both)
	})

	t.Run("the bundle image", func(t *testing.T) {
		if err := b.build("bundle.Dockerfile", "bundle.Dockerfile.dockerignore", "localhost/bundle:test", []string{"linux/" + runtime.GOARCH}); err != nil {
			t.Fatal(err)
		}
		cfg := b.inspect("localhost/bundle:test", runtime.GOARCH).OCIv1
		for _, k := range []string{
			"operators.operatorframework.io.bundle.mediatype.v1",
			"operators.operatorframework.io.bundle.package.v1",
			"operators.operatorframework.io.test.config.v1",
		} {
			if cfg.Config.Labels[k] == "" {
				t.Errorf("the bundle image lacks the label %s", k)
			}
		}
		rootfs := b.files("localhost/bundle:test", runtime.GOARCH)
		for _, f := range []string{
			"manifests/phalanks-operator.clusterserviceversion.yaml",
			"metadata/annotations.yaml",
			"tests/scorecard/config.yaml",
		} {
			if _, err := os.Stat(filepath.Join(rootfs, f)); err != nil {
				t.Errorf("the bundle image lacks /%s: %v", f, err)
			}
		}
		b.sameAsDaemonless(t, "localhost/bundle:test", built, "localhost/bundle:daemonless", []string{"linux/" + runtime.GOARCH})
	})

	t.Run("the catalog image, for amd64 and arm64", func(t *testing.T) {
		if err := b.build("catalog.Dockerfile", "catalog.Dockerfile.dockerignore", "localhost/catalog:test", both); err != nil {
			t.Fatal(err)
		}
		for _, arch := range []string{"amd64", "arm64"} {
			cfg := b.inspect("localhost/catalog:test", arch).OCIv1
			if cfg.Config.User != "1001" || !slices.Equal(cfg.Config.Entrypoint, []string{"/bin/opm"}) {
				t.Errorf("%s catalog image: user %q, entrypoint %v; want 1001 and [/bin/opm]", arch, cfg.Config.User, cfg.Config.Entrypoint)
			}
			if cfg.Config.Labels["operators.operatorframework.io.index.configs.v1"] != "/configs" {
				t.Errorf("%s catalog image lacks the label operators.operatorframework.io.index.configs.v1=/configs", arch)
			}
		}
		rootfs := b.files("localhost/catalog:test", "amd64")
		for _, f := range []string{"bin/opm", "bin/grpc_health_probe", "configs/phalanks-operator/catalog.yaml", "tmp/cache"} {
			if _, err := os.Stat(filepath.Join(rootfs, f)); err != nil {
				t.Errorf("the catalog image lacks /%s: %v", f, err)
			}
		}
		b.sameAsDaemonless(t, "localhost/catalog:test", built, "localhost/catalog:daemonless", both)
	})

	// The failure of the last release: a Dockerfile that copies main.go alone, while
	// package main has more files, must not build.
	t.Run("a Dockerfile that leaves out a source file of package main fails", func(t *testing.T) {
		df, err := os.ReadFile(filepath.Join(b.root, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		broken := strings.Replace(string(df), "COPY *.go ./", "COPY main.go ./", 1)
		if broken == string(df) {
			t.Fatal("the Dockerfile no longer copies *.go: update this test")
		}
		path := filepath.Join(t.TempDir(), "Dockerfile.broken")
		if err := os.WriteFile(path, []byte(broken), 0o600); err != nil { //nolint:gosec // G703: a file in the test's own temporary directory
			t.Fatal(err)
		}
		err = b.build(path, filepath.Join(b.root, ".dockerignore"), "localhost/broken:test", []string{"linux/" + runtime.GOARCH})
		if err == nil || !strings.Contains(err.Error(), "undefined") {
			t.Errorf("the Dockerfile that copies main.go alone built, or failed for another reason: %v", err)
		}
	})
}
