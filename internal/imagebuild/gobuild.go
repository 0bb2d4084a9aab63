package imagebuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// GoBuild cross-compiles one Go package into a binary for an image.
type GoBuild struct {
	// Dir is where `go build` runs: a directory of the module that provides Package
	// (the main module, or a tools module that pins a third-party command).
	Dir string
	// Package is the main package: "." , "./cmd/x", or an import path.
	Package string
	// Platform is the target: {OS: "linux", Architecture: "arm64"}. An arm variant
	// ("v7") becomes GOARM.
	Platform v1.Platform
	// CGO links C code; off (the default), the binary is static and runs on an empty
	// base image.
	CGO bool
	// Tags are build tags; LDFlags are added after "-s -w".
	Tags    []string
	LDFlags string
	// Output is the binary's path.
	Output string
}

// Args returns the go command line, without the environment.
func (b GoBuild) Args() []string {
	ldflags := "-s -w"
	if b.LDFlags != "" {
		ldflags += " " + b.LDFlags
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + ldflags}
	if len(b.Tags) > 0 {
		args = append(args, "-tags="+strings.Join(b.Tags, ","))
	}
	return append(args, "-o", b.Output, b.Package)
}

// targetVariables are the go command's variables that change the code it produces
// for a target. An image runs on any node of its platform, whatever machine built it,
// so none of them is taken from the caller: a GOAMD64=v3 build machine must not make
// an image that crashes on older nodes.
var targetVariables = map[string]bool{
	"GOOS": true, "GOARCH": true, "CGO_ENABLED": true, "GOFLAGS": true, "GOEXPERIMENT": true,
	"GOAMD64": true, "GOARM": true, "GOARM64": true, "GO386": true, "GOPPC64": true, "GORISCV64": true,
	"GOMIPS": true, "GOMIPS64": true, "GOWASM": true,
}

// Env returns the environment `go build` runs with: the current one without the
// variables that change the produced code, then GOOS, GOARCH, GOARM and CGO_ENABLED
// for the target and the baseline instruction set levels (which also override a
// `go env -w` setting of them).
func (b GoBuild) Env() []string {
	cgo := "0"
	if b.CGO {
		cgo = "1"
	}
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !targetVariables[name] {
			env = append(env, kv)
		}
	}
	env = append(env, "GOOS="+b.Platform.OS, "GOARCH="+b.Platform.Architecture, "CGO_ENABLED="+cgo,
		"GOAMD64=v1", "GOARM64=v8.0")
	if b.Platform.Architecture == "arm" && b.Platform.Variant != "" {
		env = append(env, "GOARM="+strings.TrimPrefix(b.Platform.Variant, "v"))
	}
	return env
}

// Run builds the binary. With -trimpath and no VCS stamp, the same sources and Go
// toolchain give the same bytes wherever the tree is checked out.
func (b GoBuild) Run(ctx context.Context) error {
	if b.Platform.OS == "" || b.Platform.Architecture == "" || b.Output == "" || b.Package == "" {
		return fmt.Errorf("go build %s: package, platform and output are required", b.Package)
	}
	cmd := exec.CommandContext(ctx, "go", b.Args()...)
	cmd.Dir = b.Dir
	cmd.Env = b.Env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", b.Package, b.Platform, err, out.String())
	}
	return nil
}
