// Package catalog maintains the operator's file-based catalog (catalog/phalanks-operator):
// an olm.package, the stable olm.channel whose entries chain releases with replaces and
// skipRange, and one olm.bundle per release rendered from its bundle directory, with every
// manifest embedded as an olm.bundle.object property so OLM installs without unpacking an
// image.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"text/template"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/lib/config"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/offline"
)

const (
	// Dir is the catalog root (what the catalog image serves), relative to the repository
	// root; the package lives in Dir/PackageName.
	Dir = "catalog"
	// File is the package's catalog file.
	File = "catalog.yaml"
)

// PackageDir returns the package's directory in the catalog under root.
func PackageDir(root string) string { return filepath.Join(root, Dir, bundle.PackageName) }

// RenderBundle renders a bundle directory into an olm.bundle, as `opm render` does, with
// image as its image reference; an empty image leaves the reference empty (OLM then
// installs from the embedded objects alone).
func RenderBundle(ctx context.Context, dir, image string) (*declcfg.Bundle, error) {
	r := action.Render{
		Refs:           []string{dir},
		AllowedRefMask: action.RefBundleDir,
		Registry:       offline.Registry{},
	}
	if image != "" {
		// The template has no actions: the reference is the image itself.
		tmpl, err := template.New("image").Parse(image)
		if err != nil {
			return nil, fmt.Errorf("bundle image %q: %w", image, err)
		}
		r.ImageRefTemplate = tmpl
	}
	cfg, err := r.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}
	if len(cfg.Bundles) != 1 {
		return nil, fmt.Errorf("render %s: got %d bundles, want 1", dir, len(cfg.Bundles))
	}
	return &cfg.Bundles[0], nil
}

// Load reads a catalog directory; a missing directory is an empty catalog.
func Load(ctx context.Context, dir string) (*declcfg.DeclarativeConfig, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return &declcfg.DeclarativeConfig{}, nil
	}
	return declcfg.LoadFS(ctx, os.DirFS(dir))
}

// AddHead adds b as the new head of the channel: it replaces the current head (the entry no
// other entry replaces) and skips every older version. Adding a bundle that is already the
// head replaces it in place, so regenerating a release before it ships is idempotent; an
// older or released version is refused.
func AddHead(cfg *declcfg.DeclarativeConfig, b *declcfg.Bundle, icon *declcfg.Icon, description string) error {
	newVersion, err := bundleVersion(b)
	if err != nil {
		return err
	}
	ch := channel(cfg)
	versions := map[string]semver.Version{}
	for _, existing := range cfg.Bundles {
		v, err := bundleVersion(&existing)
		if err != nil {
			return err
		}
		versions[existing.Name] = v
	}
	head := headOf(ch)
	if head == b.Name {
		dropEntry(ch, head)
		dropBundle(cfg, head)
		head = headOf(ch)
	} else if _, released := versions[b.Name]; released {
		return fmt.Errorf("%s is already in the catalog and is not the head: bump the version", b.Name)
	}
	entry := declcfg.ChannelEntry{Name: b.Name}
	if head != "" {
		if !newVersion.GT(versions[head]) {
			return fmt.Errorf("%s (%s) is not newer than the channel head %s (%s)", b.Name, newVersion, head, versions[head])
		}
		oldest := newVersion
		for _, e := range ch.Entries {
			if v := versions[e.Name]; v.LT(oldest) {
				oldest = v
			}
		}
		entry.Replaces = head
		entry.SkipRange = fmt.Sprintf(">=%s <%s", oldest, newVersion)
	}
	ch.Entries = append(ch.Entries, entry)
	versions[b.Name] = newVersion
	sort.SliceStable(ch.Entries, func(i, j int) bool {
		return versions[ch.Entries[i].Name].LT(versions[ch.Entries[j].Name])
	})
	cfg.Bundles = append(cfg.Bundles, *b)
	cfg.Packages = []declcfg.Package{{
		Schema:         declcfg.SchemaPackage,
		Name:           bundle.PackageName,
		DefaultChannel: bundle.Channel,
		Icon:           icon,
		Description:    description,
	}}
	return nil
}

// channel returns the package's channel, creating it in cfg when missing.
func channel(cfg *declcfg.DeclarativeConfig) *declcfg.Channel {
	if ch := findChannel(cfg); ch != nil {
		return ch
	}
	cfg.Channels = append(cfg.Channels, declcfg.Channel{Schema: declcfg.SchemaChannel, Name: bundle.Channel, Package: bundle.PackageName, Entries: []declcfg.ChannelEntry{}})
	return &cfg.Channels[len(cfg.Channels)-1]
}

// findChannel returns the package's channel, or nil when the catalog has none.
func findChannel(cfg *declcfg.DeclarativeConfig) *declcfg.Channel {
	for i := range cfg.Channels {
		if cfg.Channels[i].Name == bundle.Channel {
			return &cfg.Channels[i]
		}
	}
	return nil
}

// headOf returns the entry that no other entry replaces or skips, or "" for an empty
// channel.
func headOf(ch *declcfg.Channel) string {
	replaced := map[string]bool{}
	for _, e := range ch.Entries {
		replaced[e.Replaces] = true
		for _, s := range e.Skips {
			replaced[s] = true
		}
	}
	for _, e := range ch.Entries {
		if !replaced[e.Name] {
			return e.Name
		}
	}
	return ""
}

// Head returns the channel head of a catalog, or "" when it has no channel.
func Head(cfg *declcfg.DeclarativeConfig) string {
	ch := findChannel(cfg)
	if ch == nil {
		return ""
	}
	return headOf(ch)
}

// Replaced returns the name of the bundle the named entry replaces, or "".
func Replaced(cfg *declcfg.DeclarativeConfig, name string) string {
	ch := findChannel(cfg)
	if ch == nil {
		return ""
	}
	for _, e := range ch.Entries {
		if e.Name == name {
			return e.Replaces
		}
	}
	return ""
}

func dropEntry(ch *declcfg.Channel, name string) {
	out := ch.Entries[:0]
	for _, e := range ch.Entries {
		if e.Name != name {
			out = append(out, e)
		}
	}
	ch.Entries = out
}

func dropBundle(cfg *declcfg.DeclarativeConfig, name string) {
	out := cfg.Bundles[:0]
	for _, b := range cfg.Bundles {
		if b.Name != name {
			out = append(out, b)
		}
	}
	cfg.Bundles = out
}

func bundleVersion(b *declcfg.Bundle) (semver.Version, error) {
	for _, p := range b.Properties {
		if p.Type != property.TypePackage {
			continue
		}
		var pkg property.Package
		if err := json.Unmarshal(p.Value, &pkg); err != nil {
			return semver.Version{}, fmt.Errorf("bundle %s: %w", b.Name, err)
		}
		return semver.Parse(pkg.Version)
	}
	return semver.Version{}, fmt.Errorf("bundle %s has no olm.package property", b.Name)
}

// Write writes cfg as the package's single catalog file under dir.
func Write(dir string, cfg *declcfg.DeclarativeConfig) error {
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(*cfg, &buf); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, File), buf.Bytes(), 0o644) //nolint:gosec // a committed, world-readable source
}

// Validate runs what `opm validate` runs on a catalog root: every file parses against its
// schema, and the model builds (one head per channel, no stranded bundles, unique
// versions, replaces chains that resolve).
func Validate(ctx context.Context, root string) error {
	return config.Validate(ctx, os.DirFS(root))
}

// Objects decodes a catalog bundle's embedded manifests.
func Objects(b *declcfg.Bundle) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, o := range b.Objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(o)); err != nil {
			return nil, fmt.Errorf("bundle %s: %w", b.Name, err)
		}
		out = append(out, u)
	}
	return out, nil
}
