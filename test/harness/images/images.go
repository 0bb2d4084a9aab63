// Package images builds the small images the local cluster's real node and the tests
// run, with the project's image library (internal/imagebuild): pause, the process of every
// pod sandbox, and testapp, the web server that stands in for users' applications. Both
// are static Go programs from this directory on an empty base, for the machine's own
// platform.
package images

import (
	"context"
	"os"
	"path/filepath"
	"runtime"

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
