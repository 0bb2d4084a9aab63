package imagebuild

import (
	"errors"
	"fmt"
	"maps"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is what an image's config says about how to run it and what it is.
type Config struct {
	// Platform is the operating system and architecture (and variant) the image runs on:
	// {OS: "linux", Architecture: "arm64"}. Required.
	Platform v1.Platform
	// Entrypoint and Cmd as in a Dockerfile's exec form.
	Entrypoint []string
	Cmd        []string
	// User is "uid" or "uid:gid"; keep it numeric so Kubernetes can verify runAsNonRoot.
	User string
	// Env holds "NAME=value" pairs.
	Env []string
	// WorkingDir is the process's working directory ("" is "/").
	WorkingDir string
	// Labels are the config's labels (Dockerfile LABEL), e.g. the
	// org.opencontainers.image.* keys.
	Labels map[string]string
	// ExposedPorts are "port/protocol" pairs ("50051/tcp"), as EXPOSE documents them.
	ExposedPorts []string
	// StopSignal is the signal that stops the container ("" for the runtime's default).
	StopSignal string
	// Created is the image's creation time; zero means Epoch.
	Created time.Time
}

// Image builds a single-platform OCI image: one layer per entry list, in order, on an
// empty base, with cfg as its config. The same entries and config give the same digest.
func Image(cfg Config, layers ...[]Entry) (v1.Image, error) {
	if cfg.Platform.OS == "" || cfg.Platform.Architecture == "" {
		return nil, errors.New("image platform needs an OS and an architecture")
	}
	created := cfg.Created
	if created.IsZero() {
		created = Epoch
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for i, entries := range layers {
		layer, err := Layer(entries)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History: v1.History{
				Created:   v1.Time{Time: created},
				CreatedBy: fmt.Sprintf("imagebuild: layer %d of %d", i+1, len(layers)),
			},
		})
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	base, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf := base.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS = cfg.Platform.OS
	cf.Architecture = cfg.Platform.Architecture
	cf.Variant = cfg.Platform.Variant
	cf.OSVersion = cfg.Platform.OSVersion
	cf.Config = v1.Config{
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		User:       cfg.User,
		Env:        cfg.Env,
		WorkingDir: cfg.WorkingDir,
		Labels:     maps.Clone(cfg.Labels),
		StopSignal: cfg.StopSignal,
	}
	if len(cfg.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range cfg.ExposedPorts {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	return mutate.ConfigFile(img, cf)
}

// Index builds an OCI image index over images, one manifest per image, each described by
// the platform in its config. Two images for the same platform are an error.
func Index(images ...v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	adds := make([]mutate.IndexAddendum, 0, len(images))
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		p := cf.Platform()
		if p == nil || p.OS == "" || p.Architecture == "" {
			return nil, errors.New("an image of the index has no platform in its config")
		}
		if seen[p.String()] {
			return nil, fmt.Errorf("two images for platform %s", p)
		}
		seen[p.String()] = true
		mt, err := img.MediaType()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: mt, Platform: p},
		})
	}
	return mutate.AppendManifests(idx, adds...), nil
}

// Platforms lists the platforms of an index's manifests, in index order.
func Platforms(idx v1.ImageIndex) ([]v1.Platform, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []v1.Platform
	for _, d := range m.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("manifest %s has no platform", d.Digest)
		}
		out = append(out, *d.Platform)
	}
	return out, nil
}
