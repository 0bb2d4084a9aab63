// Package images defines and builds the images users install — the operator, its OLM
// bundle, the catalog and the custom scorecard tests — without a container runtime
// (internal/imagebuild, go-containerregistry). Each image is a Spec: the files it holds
// and where they come from (the repository, a Go binary compiled for the image's
// platform, opm's serve cache), and its config. The Dockerfiles describe the same images
// for users with a container runtime; test/dockerfiles builds each with a real builder
// (buildah) and fails when its image and the daemonless build's differ.
package images

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
)

// Platforms are the platforms of the operator, scorecard-test and catalog images; the
// bundle's CSV declares them as operatorframework.io/arch.* and os.* labels.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// BundlePlatform is the bundle image's platform. The bundle holds manifests only and
// nothing runs from it on its own platform (OLM copies its files out with a binary it
// mounts), so one platform is enough, as `docker build` of bundle.Dockerfile makes it.
var BundlePlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

const (
	// Source is the repository, the images' org.opencontainers.image.source.
	Source = "https://github.com/phalanks/phalanks-operator"
	// License is the images' org.opencontainers.image.licenses (SPDX).
	License = "Apache-2.0"
	// DefaultPath is the environment a Dockerfile build (BuildKit) gives an image built
	// FROM scratch; the daemonless builds set the same.
	DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// DefaultWorkingDir is the working directory BuildKit gives an image built FROM
	// scratch.
	DefaultWorkingDir = "/"
	// Rootfs holds the files every runnable image starts from: /etc/passwd and
	// /etc/group naming the numeric users the images run as, and /etc/nsswitch.conf.
	Rootfs = "hack/olm/images/rootfs"

	// NonRootUser runs the operator and the scorecard tests: the numeric user (and
	// group) of passwd's nonroot entry, so Kubernetes can verify runAsNonRoot.
	NonRootUser = "65532:65532"
	// CatalogUser runs opm: the user OLM's catalog operator gives registry pods under
	// restricted Pod Security (its --set-workload-user-id default), with group 0.
	CatalogUser = "1001"
	catalogUID  = 1001
	// CatalogPort is where opm serves gRPC, the port OLM's registry pods and probes use.
	CatalogPort = "50051"
	// CatalogConfigs is where the catalog image keeps catalog/.
	CatalogConfigs = "/configs"
	// CatalogCache is where the catalog image keeps opm's pre-built serve cache.
	CatalogCache = "/tmp/cache"
	// ConfigsLabel tells opm and OLM where the catalog image keeps its catalog.
	ConfigsLabel = "operators.operatorframework.io.index.configs.v1"
)

// Params are a build's release values.
type Params struct {
	// Root is the repository root.
	Root string
	// Version is the operator version (org.opencontainers.image.version).
	Version string
	// Revision is the commit built (org.opencontainers.image.revision).
	Revision string
}

// Spec is one image: its files, their sources, and its config.
type Spec struct {
	// Name names the image in messages and make targets ("operator").
	Name string
	// Dockerfile is the Dockerfile that describes the same image, relative to the root.
	Dockerfile string
	// Platforms the image is built for; more than one makes an index.
	Platforms []v1.Platform
	// Files in layer order: each becomes one layer.
	Files []File

	Entrypoint   []string
	Cmd          []string
	User         string
	Env          []string
	WorkingDir   string
	ExposedPorts []string
	Labels       map[string]string
}

// File is one COPY of a Dockerfile: a path in the image and its source. Exactly one of
// Context, Go and ServeCache is set.
type File struct {
	// Path is where the source lands: a directory's contents go into the directory Path,
	// a file becomes the file Path.
	Path string
	// Context is a file or directory of the repository, relative to the root.
	Context string
	// Go is a binary compiled for the image's platform.
	Go *GoBinary
	// ServeCache is opm's serve cache for the catalog directory it names (relative to
	// the root).
	ServeCache string
	// UID and GID own every entry (COPY --chown); root when zero.
	UID, GID int
}

// GoBinary is a main package built static for the image's platform.
type GoBinary struct {
	// Module is the directory of the module that provides Package, relative to the root.
	Module  string
	Package string
	Tags    []string
}

func ociLabels(title string, p Params) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.licenses": License,
		"org.opencontainers.image.version":  p.Version,
		"org.opencontainers.image.revision": p.Revision,
	}
}

// Operator is the manager image.
func Operator(p Params) Spec {
	return Spec{
		Name:       "operator",
		Dockerfile: "Dockerfile",
		Platforms:  Platforms,
		Files: []File{
			{Path: "/", Context: Rootfs},
			{Path: "/manager", Go: &GoBinary{Module: ".", Package: "."}},
		},
		Entrypoint: []string{"/manager"},
		User:       NonRootUser,
		Env:        []string{DefaultPath},
		WorkingDir: DefaultWorkingDir,
		Labels:     ociLabels("phalanks-operator", p),
	}
}

// ScorecardTests is the custom scorecard test image.
func ScorecardTests(p Params) Spec {
	return Spec{
		Name:       "scorecard-tests",
		Dockerfile: "hack/olm/cmd/phalanks-scorecard-tests/Dockerfile",
		Platforms:  Platforms,
		Files: []File{
			{Path: "/", Context: Rootfs},
			{Path: "/usr/local/bin/phalanks-scorecard-tests", Go: &GoBinary{Module: "hack/olm", Package: "./cmd/phalanks-scorecard-tests"}},
		},
		Entrypoint: []string{"/usr/local/bin/phalanks-scorecard-tests"},
		User:       NonRootUser,
		Env:        []string{DefaultPath},
		WorkingDir: DefaultWorkingDir,
		Labels:     ociLabels("phalanks-operator-scorecard-tests", p),
	}
}

// Bundle is the bundle image of the bundle directory dir (relative to the root: bundle/,
// or a released bundle under hack/olm/releases): its manifests, metadata and scorecard
// configuration, labelled with the annotations of its metadata/annotations.yaml, as
// bundle.Dockerfile says for bundle/.
func Bundle(p Params, dir string) (Spec, error) {
	labels, err := bundleAnnotations(filepath.Join(p.Root, dir))
	if err != nil {
		return Spec{}, err
	}
	files := []File{
		{Path: "/manifests", Context: filepath.Join(dir, "manifests")},
		{Path: "/metadata", Context: filepath.Join(dir, "metadata")},
	}
	// Released bundles recorded before the scorecard tests shipped have none.
	if _, err := os.Stat(filepath.Join(p.Root, dir, "tests", "scorecard")); err == nil {
		files = append(files, File{Path: "/tests/scorecard", Context: filepath.Join(dir, "tests", "scorecard")})
	}
	return Spec{
		Name:       "bundle",
		Dockerfile: bundle.Dockerfile,
		Platforms:  []v1.Platform{BundlePlatform},
		Files:      files,
		Env:        []string{DefaultPath},
		WorkingDir: DefaultWorkingDir,
		Labels:     labels,
	}, nil
}

func bundleAnnotations(dir string) (map[string]string, error) {
	path := filepath.Join(dir, "metadata", "annotations.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var a struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(a.Annotations) == 0 {
		return nil, fmt.Errorf("%s has no annotations", path)
	}
	return a.Annotations, nil
}

// Catalog is the catalog image: opm and grpc_health_probe, catalog/ and its serve cache.
func Catalog() Spec {
	opmBinary := opm
	return Spec{
		Name:       "catalog",
		Dockerfile: "catalog.Dockerfile",
		Platforms:  Platforms,
		Files: []File{
			{Path: "/", Context: Rootfs},
			{Path: "/bin/opm", Go: &opmBinary},
			{Path: "/bin/grpc_health_probe", Go: &GoBinary{Module: "hack/tools/healthprobe", Package: "github.com/grpc-ecosystem/grpc-health-probe"}},
			{Path: CatalogConfigs, Context: "catalog"},
			{Path: CatalogCache, ServeCache: "catalog", UID: catalogUID},
		},
		Entrypoint:   []string{"/bin/opm"},
		Cmd:          []string{"serve", CatalogConfigs, "--cache-dir=" + CatalogCache},
		User:         CatalogUser,
		Env:          []string{DefaultPath},
		WorkingDir:   DefaultWorkingDir,
		ExposedPorts: []string{CatalogPort + "/tcp"},
		Labels:       map[string]string{ConfigsLabel: CatalogConfigs},
	}
}

// config is the imagebuild config of s for platform.
func (s Spec) config(platform v1.Platform) imagebuild.Config {
	return imagebuild.Config{
		Platform:     platform,
		Entrypoint:   s.Entrypoint,
		Cmd:          s.Cmd,
		User:         s.User,
		Env:          s.Env,
		WorkingDir:   s.WorkingDir,
		Labels:       s.Labels,
		ExposedPorts: s.ExposedPorts,
	}
}
