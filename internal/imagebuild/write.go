package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Artifact is what Push and WriteLayout write: a v1.Image or a v1.ImageIndex.
type Artifact interface {
	Digest() (v1.Hash, error)
	MediaType() (types.MediaType, error)
	RawManifest() ([]byte, error)
}

// Options say how to reach a registry.
type Options struct {
	// Insecure talks plain HTTP to the registry. Without it, loopback ("localhost:5000",
	// "127.0.0.1:5000") and RFC 1918 addresses already get plain HTTP and every other
	// registry HTTPS with verified certificates.
	Insecure bool
}

func (o Options) nameOptions() []name.Option {
	opts := []name.Option{name.StrictValidation}
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	return opts
}

// remoteOptions authenticate with the user's container credentials (the Docker config
// file and credential helpers), as docker and crane do; anonymous when there are none.
func remoteOptions(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
}

// Push writes a to ref (a tag, "127.0.0.1:5000/pause:1", or a digest reference) with every
// blob it needs, and returns the reference by digest it can be pulled by
// ("127.0.0.1:5000/pause@sha256:…").
func Push(ctx context.Context, ref string, a Artifact, o Options) (string, error) {
	r, err := name.ParseReference(ref, o.nameOptions()...)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", ref, err)
	}
	switch x := a.(type) {
	case v1.ImageIndex:
		err = remote.WriteIndex(r, x, remoteOptions(ctx)...)
	case v1.Image:
		err = remote.Write(r, x, remoteOptions(ctx)...)
	default:
		return "", fmt.Errorf("push %s: %T is neither an image nor an index", ref, a)
	}
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := a.Digest()
	if err != nil {
		return "", err
	}
	return r.Context().Digest(d.String()).String(), nil
}

// Pull fetches what ref names: an image or an index.
func Pull(ctx context.Context, ref string, o Options) (Artifact, error) {
	r, err := name.ParseReference(ref, o.nameOptions()...)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", ref, err)
	}
	desc, err := remote.Get(r, remoteOptions(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	if desc.MediaType.IsIndex() {
		return desc.ImageIndex()
	}
	return desc.Image()
}

// Resolve returns the digest ref names in its registry, without pulling anything else.
func Resolve(ctx context.Context, ref string, o Options) (v1.Hash, error) {
	r, err := name.ParseReference(ref, o.nameOptions()...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("parse %q: %w", ref, err)
	}
	desc, err := remote.Head(r, remoteOptions(ctx)...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("resolve %s: %w", ref, err)
	}
	return desc.Digest, nil
}

// RefNameAnnotation names a manifest in an OCI image layout's index.json
// (org.opencontainers.image.ref.name); containerd's import also reads
// io.containerd.image.name.
const (
	RefNameAnnotation             = "org.opencontainers.image.ref.name"
	containerdImageNameAnnotation = "io.containerd.image.name"
)

// WriteLayout adds a to the OCI image layout in dir (created when missing), named ref:
// a manifest already named ref is replaced, others are kept.
func WriteLayout(dir, ref string, a Artifact) error {
	p, err := layout.FromPath(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		p, err = layout.Write(dir, empty.Index)
	}
	if err != nil {
		return fmt.Errorf("open layout %s: %w", dir, err)
	}
	opt := layout.WithAnnotations(map[string]string{RefNameAnnotation: ref, containerdImageNameAnnotation: ref})
	named := match.Annotation(RefNameAnnotation, ref)
	switch x := a.(type) {
	case v1.ImageIndex:
		err = p.ReplaceIndex(x, named, opt)
	case v1.Image:
		err = p.ReplaceImage(x, named, opt)
	default:
		return fmt.Errorf("write %s: %T is neither an image nor an index", ref, a)
	}
	if err != nil {
		return fmt.Errorf("write %s to layout %s: %w", ref, dir, err)
	}
	return nil
}

// ReadLayout returns the manifest named ref in the OCI image layout in dir.
func ReadLayout(dir, ref string) (Artifact, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Annotations[RefNameAnnotation] != ref {
			continue
		}
		if d.MediaType.IsIndex() {
			return idx.ImageIndex(d.Digest)
		}
		return idx.Image(d.Digest)
	}
	return nil, fmt.Errorf("layout %s has no manifest named %s", dir, ref)
}

// WriteTarball writes img as a docker-archive tarball named ref, the format
// `ctr images import` and `docker load` read.
func WriteTarball(path, ref string, img v1.Image) error {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("parse %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, r, img); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ImageFor returns the image of a for platform: a itself when it is an image for that
// platform, or the index's manifest for it.
func ImageFor(a Artifact, platform v1.Platform) (v1.Image, error) {
	switch x := a.(type) {
	case v1.ImageIndex:
		imgs, err := partialImages(x, platform)
		if err != nil {
			return nil, err
		}
		if len(imgs) != 1 {
			return nil, fmt.Errorf("index has %d images for %s", len(imgs), platform)
		}
		return imgs[0], nil
	case v1.Image:
		cf, err := x.ConfigFile()
		if err != nil {
			return nil, err
		}
		if p := cf.Platform(); p == nil || !p.Satisfies(platform) {
			return nil, fmt.Errorf("image is for %v, not %s", p, platform)
		}
		return x, nil
	}
	return nil, fmt.Errorf("%T is neither an image nor an index", a)
}

func partialImages(idx v1.ImageIndex, platform v1.Platform) ([]v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []v1.Image
	for _, d := range m.Manifests {
		if d.Platform == nil || !d.Platform.Satisfies(platform) {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}
