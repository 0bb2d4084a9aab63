package olm

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/blang/semver/v4"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// imageRegistry is the Makefile's IMAGE_REGISTRY. Nothing pulls the images here (kwok
// fakes the operator's pod), but the bundle names them as a release would.
const imageRegistry = "quay.io/phalanks"

// Release is the tree packaged as one version.
type Release struct {
	Version string
	// BundleDir is the generated bundle directory (manifests/, metadata/, tests/).
	BundleDir string
	// CSV is the bundle's ClusterServiceVersion.
	CSV *operatorsv1alpha1.ClusterServiceVersion
}

// CSVName is the release's ClusterServiceVersion name, phalanks-operator.v<version>.
func (r *Release) CSVName() string { return r.CSV.Name }

// ReleasedVersion returns the version of the committed bundle, the release the tree is
// packaged as.
func ReleasedVersion() (semver.Version, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return semver.Version{}, err
	}
	b, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		return semver.Version{}, fmt.Errorf("load the committed bundle: %w", err)
	}
	return b.CSV.Spec.Version.Version, nil
}

// PackageRelease generates the bundle of the tree as version with the project's
// generator (what `make bundle VERSION=...` runs) into dir.
func PackageRelease(ctx context.Context, version semver.Version, dir string) (*Release, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		return nil, err
	}
	files, err := bundle.Generate(ctx, root, kustomize, bundle.Params{
		Version:        version.String(),
		Image:          fmt.Sprintf("%s/phalanks-operator:v%s", imageRegistry, version),
		ScorecardImage: fmt.Sprintf("%s/phalanks-operator-scorecard-tests:v%s", imageRegistry, version),
	})
	if err != nil {
		return nil, fmt.Errorf("generate the bundle of %s: %w", version, err)
	}
	if err := bundle.Write(dir, files); err != nil {
		return nil, err
	}
	r := &Release{Version: version.String(), BundleDir: filepath.Join(dir, bundle.Dir)}
	b, err := apimanifests.GetBundleFromDir(r.BundleDir)
	if err != nil {
		return nil, fmt.Errorf("load the bundle of %s: %w", version, err)
	}
	r.CSV = b.CSV
	return r, nil
}

// WriteCatalog writes a file-based catalog root at dir whose stable channel holds the
// releases in order, each added as the new head the way `make catalog` does (replaces
// the previous head, skipRange over the older ones). The bundles are rendered from their
// directories with an empty image, so they embed every manifest and OLM installs them
// without an unpack Job. The catalog is validated as `opm validate` does. It returns the
// channel's entries.
func WriteCatalog(ctx context.Context, dir string, releases ...*Release) ([]declcfg.ChannelEntry, error) {
	cfg := &declcfg.DeclarativeConfig{}
	for _, r := range releases {
		b, err := catalog.RenderBundle(ctx, r.BundleDir, "")
		if err != nil {
			return nil, err
		}
		var icon *declcfg.Icon
		if len(r.CSV.Spec.Icon) > 0 {
			data, err := base64.StdEncoding.DecodeString(r.CSV.Spec.Icon[0].Data)
			if err != nil {
				return nil, fmt.Errorf("icon of %s: %w", r.CSVName(), err)
			}
			icon = &declcfg.Icon{Data: data, MediaType: r.CSV.Spec.Icon[0].MediaType}
		}
		if err := catalog.AddHead(cfg, b, icon, r.CSV.GetAnnotations()["description"]); err != nil {
			return nil, err
		}
	}
	if err := catalog.Write(filepath.Join(dir, bundle.PackageName), cfg); err != nil {
		return nil, err
	}
	if err := catalog.Validate(ctx, dir); err != nil {
		return nil, fmt.Errorf("catalog %s does not validate: %w", dir, err)
	}
	if len(cfg.Channels) != 1 {
		return nil, fmt.Errorf("catalog %s has %d channels, want 1", dir, len(cfg.Channels))
	}
	return cfg.Channels[0].Entries, nil
}

// CatalogServer is `opm serve` over one catalog directory.
type CatalogServer struct {
	// Address is host:port of its gRPC registry API, for a CatalogSource's spec.address.
	Address string
	proc    *process.Process
}

// ServeCatalog starts opm serve on a free loopback port (it listens on every interface of
// the private namespace). It caches in dir and logs to logDir.
func ServeCatalog(catalogDir, dir, logDir, name string) (*CatalogServer, error) {
	opm, err := tools.Path("opm")
	if err != nil {
		return nil, err
	}
	port, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &CatalogServer{Address: process.HostPort(port)}
	s.proc = &process.Process{
		Name: name,
		Path: opm,
		Args: []string{"serve", catalogDir, "--port", fmt.Sprint(port),
			// The defaults would bind a fixed profiling port and write to /dev; a fresh cache
			// directory has nothing to check the integrity of.
			"--pprof-addr=", "--cache-dir=" + filepath.Join(dir, "cache"), "--cache-enforce-integrity=false",
			"--termination-log=" + filepath.Join(dir, "termination.log")},
		LogPath: filepath.Join(logDir, name+".log"),
	}
	if err := s.proc.Start(); err != nil {
		return nil, err
	}
	if err := process.WaitFor(s.proc, time.Minute, func() error { return dial(s.Address) }); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop ends the server.
func (s *CatalogServer) Stop() error { return s.proc.Stop(10 * time.Second) }
