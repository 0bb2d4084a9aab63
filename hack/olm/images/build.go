package images

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/phalanks/phalanks-operator/internal/imagebuild"
)

// opm is the catalog image's opm: static (no cgo), from the operator-registry release
// hack/tools/opm pins, which is the release hack/olm renders and validates catalogs with.
// containers/image builds without the gpgme C library only with the openpgp tag.
var opm = GoBinary{
	Module:  "hack/tools/opm",
	Package: "github.com/operator-framework/operator-registry/cmd/opm",
	Tags:    []string{"containers_image_openpgp"},
}

// servecache builds the catalog image's serve cache with the operator-registry release
// opm comes from, in its JSON format (hack/tools/opm/servecache says why).
var servecache = GoBinary{Module: "hack/tools/opm", Package: "./servecache"}

// Builder builds Specs into images. It compiles each Go binary once per platform into
// WorkDir and reuses it for every image that holds it.
type Builder struct {
	// Root is the repository root; Spec paths are relative to it.
	Root string
	// WorkDir holds compiled binaries and generated serve caches.
	WorkDir string
	// Log receives a line per step; nil discards them.
	Log io.Writer

	mu       sync.Mutex
	binaries map[string]string
	caches   map[string]string
}

func (b *Builder) logf(format string, args ...any) {
	if b.Log != nil {
		_, _ = fmt.Fprintf(b.Log, format+"\n", args...)
	}
}

// Build builds s: an image index over s.Platforms, or a single image when it has one.
func (b *Builder) Build(ctx context.Context, s Spec) (imagebuild.Artifact, error) {
	imgs := make([]v1.Image, 0, len(s.Platforms))
	for _, p := range s.Platforms {
		img, err := b.image(ctx, s, p)
		if err != nil {
			return nil, fmt.Errorf("%s image for %s: %w", s.Name, p, err)
		}
		imgs = append(imgs, img)
	}
	switch len(imgs) {
	case 0:
		return nil, fmt.Errorf("%s image: no platform", s.Name)
	case 1:
		return imgs[0], nil
	}
	return imagebuild.Index(imgs...)
}

func (b *Builder) image(ctx context.Context, s Spec, p v1.Platform) (v1.Image, error) {
	layers := make([][]imagebuild.Entry, 0, len(s.Files))
	for _, f := range s.Files {
		entries, err := b.entries(ctx, f, p)
		if err != nil {
			return nil, err
		}
		layers = append(layers, entries)
	}
	return imagebuild.Image(s.config(p), layers...)
}

// entries lists what one File puts in the image for platform p.
func (b *Builder) entries(ctx context.Context, f File, p v1.Platform) ([]imagebuild.Entry, error) {
	var entries []imagebuild.Entry
	switch {
	case f.Context != "":
		src := filepath.Join(b.Root, f.Context)
		info, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		if info.IsDir() {
			if entries, err = imagebuild.HostTree(f.Path, src); err != nil {
				return nil, err
			}
		} else {
			mode := fs.FileMode(0o644)
			if info.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			entries = []imagebuild.Entry{imagebuild.HostFile(f.Path, src, mode)}
		}
	case f.Go != nil:
		bin, err := b.binary(ctx, *f.Go, path.Base(f.Path), p)
		if err != nil {
			return nil, err
		}
		entries = []imagebuild.Entry{imagebuild.HostFile(f.Path, bin, 0o755)}
	case f.ServeCache != "":
		dir, err := b.serveCache(ctx, f.ServeCache)
		if err != nil {
			return nil, err
		}
		if entries, err = cacheEntries(f.Path, dir); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%s has no source", f.Path)
	}
	for i := range entries {
		entries[i] = entries[i].Owner(f.UID, f.GID)
	}
	return entries, nil
}

// binary compiles g for p once, as WorkDir/bin/<name>-<os>-<arch>, and returns the
// binary's path.
func (b *Builder) binary(ctx context.Context, g GoBinary, name string, p v1.Platform) (string, error) {
	key := fmt.Sprintf("%s %s %s %s", g.Module, g.Package, strings.Join(g.Tags, ","), p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if out, ok := b.binaries[key]; ok {
		return out, nil
	}
	if b.binaries == nil {
		b.binaries = map[string]string{}
	}
	out := filepath.Join(b.WorkDir, "bin", fmt.Sprintf("%s-%s-%s", name, p.OS, p.Architecture))
	for other, built := range b.binaries {
		if built == out {
			return "", fmt.Errorf("%s and %s would both be built as %s", key, other, out)
		}
	}
	build := g.build(b.Root, p, out)
	b.logf("images: go %s (in %s)", strings.Join(build.Args(), " "), g.Module)
	if err := build.Run(ctx); err != nil {
		return "", err
	}
	b.binaries[key] = out
	return out, nil
}

var binaryNames = strings.NewReplacer("/", "_", ".", "_")

// build is the go build of g for p: static, trimmed paths, no VCS stamp, "-s -w".
func (g GoBinary) build(root string, p v1.Platform, out string) imagebuild.GoBuild {
	return imagebuild.GoBuild{
		Dir:      filepath.Join(root, g.Module),
		Package:  g.Package,
		Platform: p,
		Tags:     g.Tags,
		Output:   out,
	}
}

// HostPlatform is the platform binaries built for this machine run on.
func HostPlatform() v1.Platform {
	return v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
}

// serveCache builds the serve cache of the catalog directory configs (relative to the
// root), once, and returns the cache directory. The cache's digest covers the catalog's
// file modes, so it is built from a copy of the catalog with the modes the image gives
// it (HostTree's), not from the checkout, whose modes follow the umask.
func (b *Builder) serveCache(ctx context.Context, configs string) (string, error) {
	tool, err := b.binary(ctx, servecache, "servecache", HostPlatform())
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if dir, ok := b.caches[configs]; ok {
		return dir, nil
	}
	if b.caches == nil {
		b.caches = map[string]string{}
	}
	work := filepath.Join(b.WorkDir, "serve-cache", binaryNames.Replace(configs))
	if err := os.RemoveAll(work); err != nil {
		return "", err
	}
	staged := filepath.Join(work, "configs")
	entries, err := imagebuild.HostTree("/", filepath.Join(b.Root, configs))
	if err != nil {
		return "", err
	}
	if err := writeTree(staged, entries); err != nil {
		return "", err
	}
	dir := filepath.Join(work, "cache")
	b.logf("images: servecache %s %s", configs, dir)
	if out, err := exec.CommandContext(ctx, tool, staged, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("servecache %s: %w\n%s", configs, err, out)
	}
	b.caches[configs] = dir
	return dir, nil
}

// writeTree writes entries (from HostTree) under dir with their modes.
func writeTree(dir string, entries []imagebuild.Entry) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // the mode the image gives the directory
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.Path))
		switch e.Kind {
		case imagebuild.KindDir:
			if err := os.Mkdir(p, e.Mode); err != nil {
				return err
			}
		case imagebuild.KindFile:
			data, err := os.ReadFile(e.Source)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, data, e.Mode); err != nil { //nolint:gosec // G703: a path under the builder's work directory
				return err
			}
		default:
			return fmt.Errorf("%s: a %s in a catalog", e.Path, e.Kind)
		}
		if err := os.Chmod(p, e.Mode); err != nil { // past the umask
			return err
		}
	}
	return nil
}

// cacheEntries lists a serve cache as entries under imageDir, with the modes it was
// written with: its digest covers them.
func cacheEntries(imageDir, dir string) ([]imagebuild.Entry, error) {
	entries, err := imagebuild.HostTree(imageDir, dir)
	if err != nil {
		return nil, err
	}
	for i, e := range entries {
		if e.Kind == imagebuild.KindSymlink {
			return nil, fmt.Errorf("serve cache %s is a symlink", e.Path)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(e.Path, imageDir), "/")
		info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		entries[i].Mode = info.Mode().Perm()
	}
	return entries, nil
}
