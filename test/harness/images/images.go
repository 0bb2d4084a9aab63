// Package images builds the small images the local cluster's real node and the tests
// run, with the project's image library (internal/imagebuild), for the machine's own
// platform: pause, the process of every pod sandbox, and testapp, the web server that
// stands in for users' applications (static Go programs from this directory on an empty
// base); busybox, Debian's static busybox, for the shell tools images that pods run in
// the project's place (operator-sdk scorecard's untar step); OLM's util image, which
// OLM's bundle unpack Jobs copy their bundle-copying tool from; and an opm index image for
// `operator-sdk run bundle`.
package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Platform is the machine's own platform, the one the node runs.
func Platform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// TestAppPort is the port testapp serves on.
const TestAppPort = 8080

// Pause builds the pause image: /pause as an unprivileged user. dir holds the build.
func Pause(ctx context.Context, dir string) (v1.Image, error) {
	bin, err := build(ctx, dir, "pause")
	if err != nil {
		return nil, err
	}
	return imagebuild.Image(imagebuild.Config{
		Platform:   Platform(),
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
	}, []imagebuild.Entry{imagebuild.HostFile("/pause", bin, 0o755)})
}

// TestApp builds the testapp image: /testapp serving on TestAppPort as an unprivileged
// user, which restricted Pod Security admits. dir holds the build.
func TestApp(ctx context.Context, dir string) (v1.Image, error) {
	bin, err := build(ctx, dir, "testapp")
	if err != nil {
		return nil, err
	}
	return imagebuild.Image(imagebuild.Config{
		Platform:     Platform(),
		Entrypoint:   []string{"/testapp"},
		User:         "65532:65532",
		ExposedPorts: []string{"8080/tcp"},
	}, []imagebuild.Entry{imagebuild.HostFile("/testapp", bin, 0o755)})
}

// Busybox builds a busybox image from the host's static busybox (Debian's busybox-static),
// with a symlink in /bin for each applet, running as an unprivileged user.
func Busybox(ctx context.Context) (v1.Image, error) {
	layer, err := busyboxLayer(ctx)
	if err != nil {
		return nil, err
	}
	return imagebuild.Image(imagebuild.Config{
		Platform: Platform(),
		Cmd:      []string{"/bin/sh"},
		User:     "65534:65534",
		Env:      []string{"PATH=/bin"},
	}, layer)
}

// busyboxLayer is /bin/busybox, a symlink to it for every applet, and a writable /tmp.
func busyboxLayer(ctx context.Context) ([]imagebuild.Entry, error) {
	bin, err := exec.LookPath("busybox")
	if err != nil {
		return nil, errors.New("busybox not found: install Debian's busybox-static (make test-olm does)")
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	exe, err := imagebuild.InspectELF(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	if !exe.Static {
		return nil, fmt.Errorf("%s is linked dynamically and cannot run on an empty base: install Debian's busybox-static", bin)
	}
	out, err := exec.CommandContext(ctx, bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	entries := []imagebuild.Entry{
		imagebuild.File("/bin/busybox", data, 0o755),
		imagebuild.Dir("/tmp", 0o777|fs.ModeSticky),
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			entries = append(entries, imagebuild.Symlink("/bin/"+applet, "busybox"))
		}
	}
	return entries, nil
}

// OLMUtil builds the image OLM's catalog operator names with --util-image, as OLM's own
// image serves it: /bin/cp (busybox) and /bin/cpb, OLM's bundle-copying tool, at the
// version the olm tool set pins. A bundle unpack Job's first container copies cpb out of
// it for the bundle image's container to run. dir holds the build.
func OLMUtil(ctx context.Context, dir string) (v1.Image, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	layer, err := busyboxLayer(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	cpb := filepath.Join(dir, "cpb")
	b := imagebuild.GoBuild{
		Dir:      filepath.Join(root, "hack", "tools", "olm"),
		Package:  "github.com/operator-framework/operator-lifecycle-manager/util/cpb",
		Platform: Platform(),
		Output:   cpb,
	}
	if err := b.Run(ctx); err != nil {
		return nil, err
	}
	return imagebuild.Image(imagebuild.Config{
		Platform: Platform(),
		User:     "65534:65534",
		Env:      []string{"PATH=/bin"},
	}, layer, []imagebuild.Entry{imagebuild.HostFile("/bin/cpb", cpb, 0o755)})
}

// IndexConfigsLabel marks an image as a file-based catalog and names its directory.
const IndexConfigsLabel = "operators.operatorframework.io.index.configs.v1"

// OPM builds an index image for `operator-sdk run bundle --index-image`, in the place of
// quay.io/operator-framework/opm: opm, at the version the opm tool set pins, built
// without cgo, with the shell, cat and gzip (busybox) that the registry pod's command runs
// on, and an empty file-based catalog at /configs for run bundle to add its bundle to.
// dir holds the build.
func OPM(ctx context.Context, dir string) (v1.Image, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	layer, err := busyboxLayer(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	opm := filepath.Join(dir, "opm")
	b := imagebuild.GoBuild{
		Dir:      filepath.Join(root, "hack", "tools", "opm"),
		Package:  "github.com/operator-framework/operator-registry/cmd/opm",
		Platform: Platform(),
		Tags:     []string{"containers_image_openpgp"},
		Output:   opm,
	}
	if err := b.Run(ctx); err != nil {
		return nil, err
	}
	return imagebuild.Image(imagebuild.Config{
		Platform:   Platform(),
		Entrypoint: []string{"/bin/opm"},
		User:       "1001",
		Env:        []string{"PATH=/bin"},
		Labels:     map[string]string{IndexConfigsLabel: "/configs"},
	}, layer, []imagebuild.Entry{imagebuild.HostFile("/bin/opm", opm, 0o755), imagebuild.Dir("/configs", 0o755)})
}

// build compiles the named program of this directory, statically, into dir.
func build(ctx context.Context, dir, name string) (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	b := imagebuild.GoBuild{Dir: root, Package: "./test/harness/images/" + name, Platform: Platform(), Output: out}
	return out, b.Run(ctx)
}
