package imagebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
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
// for a target (those `go help environment` lists for Go 1.26: the target, cgo and the
// external linker, GOFLAGS, toolchain experiments, FIPS 140 mode, and the instruction
// set level of each architecture). An image runs on any node of its platform, whatever
// machine built it, so none of them is taken from the caller: a GOAMD64=v3 build
// machine must not make an image that crashes on older nodes.
var targetVariables = map[string]bool{
	"GOOS": true, "GOARCH": true, "CGO_ENABLED": true, "GO_EXTLINK_ENABLED": true, "GOFLAGS": true,
	"GOEXPERIMENT": true, "GOFIPS140": true,
	"GOAMD64": true, "GOARM": true, "GOARM64": true, "GO386": true, "GOPPC64": true, "GORISCV64": true,
	"GOMIPS": true, "GOMIPS64": true, "GOWASM": true,
}

// Env returns the environment `go build` runs with: the current one without the
// variables that change the produced code, then GOOS, GOARCH, GOARM and CGO_ENABLED
// for the target and the baseline instruction set levels. The go command also reads
// its variables from its configuration file (`go env -w`, at GOENV), where an empty or
// missing environment variable leaves them; the build runs with GOENV=off, and the
// file's other settings (a GOPROXY, GOPRIVATE, GOTOOLCHAIN, ...) are passed as
// variables instead.
func (b GoBuild) Env(ctx context.Context) ([]string, error) {
	configured, err := configuredSettings(ctx, b.Dir)
	if err != nil {
		return nil, err
	}
	cgo := "0"
	if b.CGO {
		cgo = "1"
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, fromFile := configured[name]; !targetVariables[name] && name != "GOENV" && !fromFile {
			env = append(env, kv)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(configured)) {
		env = append(env, name+"="+configured[name])
	}
	env = append(env, "GOENV=off", "GOOS="+b.Platform.OS, "GOARCH="+b.Platform.Architecture, "CGO_ENABLED="+cgo,
		"GOAMD64=v1", "GOARM64=v8.0")
	if b.Platform.Architecture == "arm" && b.Platform.Variant != "" {
		env = append(env, "GOARM="+strings.TrimPrefix(b.Platform.Variant, "v"))
	}
	return env, nil
}

// configuredSettings returns the settings the go command, run in dir, takes from its
// configuration file: those `go env -changed` reports (they differ from the defaults)
// that the environment does not set, except the ones that change the produced code.
// It runs without the caller's code-generation variables, which the build drops: one
// the go command rejects (an unknown GOEXPERIMENT) must not fail the build.
func configuredSettings(ctx context.Context, dir string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "-json", "-changed")
	cmd.Dir = dir
	cmd.Env = []string{} // not nil, which would pass the whole environment
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !targetVariables[name] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("read go env: %w\n%s", err, stderr.String())
	}
	var changed map[string]string
	if err := json.Unmarshal(out, &changed); err != nil {
		return nil, fmt.Errorf("read go env: %w", err)
	}
	configured := map[string]string{}
	for name, value := range changed {
		if !targetVariables[name] && name != "GOENV" && os.Getenv(name) == "" {
			configured[name] = value
		}
	}
	return configured, nil
}

// Run builds the binary. With -trimpath and no VCS stamp, the same sources and Go
// toolchain give the same bytes wherever the tree is checked out.
func (b GoBuild) Run(ctx context.Context) error {
	if b.Platform.OS == "" || b.Platform.Architecture == "" || b.Output == "" || b.Package == "" {
		return fmt.Errorf("go build %s: package, platform and output are required", b.Package)
	}
	cmd := exec.CommandContext(ctx, "go", b.Args()...)
	env, err := b.Env(ctx)
	if err != nil {
		return fmt.Errorf("go build %s for %s: %w", b.Package, b.Platform, err)
	}
	cmd.Dir = b.Dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", b.Package, b.Platform, err, out.String())
	}
	return nil
}
