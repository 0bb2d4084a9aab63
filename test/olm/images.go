package olm

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	hackimages "github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/images"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// mirrored is the registry the releases publish to and the node mirrors from its local
// registry: an image pushed there as "phalanks/x:v1" runs as "quay.io/phalanks/x:v1".
const mirrored = "quay.io/"

// Mirrors are the registries the node pulls from its local registry instead: ours and
// operator-sdk's (quay.io), and the one of the image operator-sdk run bundle-upgrade
// always decompresses its catalog with (registry.access.redhat.com).
var Mirrors = []string{"quay.io", "registry.access.redhat.com"}

// Images builds the project's images with the release process's own definitions
// (hack/olm/images), for the node's platform only, and pushes them to the node's registry
// under the names the releases publish them as.
type Images struct {
	c       *cluster.Cluster
	root    string
	builder *hackimages.Builder
	dir     string
}

// NewImages returns a builder that works in dir and logs to log.
func NewImages(c *cluster.Cluster, dir string, log io.Writer) (*Images, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	return &Images{c: c, root: root, dir: dir, builder: &hackimages.Builder{Root: root, WorkDir: filepath.Join(dir, "work"), Log: log}}, nil
}

// hostOnly restricts a spec to the node's platform: building the others would cost
// minutes and run nowhere here.
func hostOnly(s hackimages.Spec) hackimages.Spec {
	s.Platforms = []v1.Platform{hackimages.HostPlatform()}
	return s
}

// push builds spec and pushes it as ref, a reference under the mirrored registry.
func (im *Images) push(ctx context.Context, spec hackimages.Spec, ref string) (string, error) {
	a, err := im.builder.Build(ctx, hostOnly(spec))
	if err != nil {
		return "", err
	}
	return im.pushArtifact(ctx, a, ref)
}

func (im *Images) pushArtifact(ctx context.Context, a imagebuild.Artifact, ref string) (string, error) {
	for _, m := range Mirrors {
		if path, ok := strings.CutPrefix(ref, m+"/"); ok {
			return im.c.Push(ctx, path, a)
		}
	}
	return "", fmt.Errorf("%s is not an image the node mirrors (%v)", ref, Mirrors)
}

// PushRelease builds and pushes the images a release's bundle names: the operator and
// the scorecard tests (from this tree, tagged with the release's version) and the bundle
// image of the release's bundle directory, and sets r.Bundle to the catalog entry that
// references the bundle image by digest, rendered from the registry as `opm render` does.
func (im *Images) PushRelease(ctx context.Context, r *Release) error {
	p := hackimages.Params{Root: im.root, Version: r.Version, Revision: "e2e"}
	if _, err := im.push(ctx, hackimages.Operator(p), r.Image); err != nil {
		return err
	}
	if _, err := im.push(ctx, hackimages.ScorecardTests(p), r.ScorecardImage); err != nil {
		return err
	}
	rel, err := filepath.Rel(im.root, filepath.Dir(r.BundleDir))
	if err != nil {
		return err
	}
	rel = filepath.Join(rel, filepath.Base(r.BundleDir))
	spec, err := hackimages.Bundle(p, rel)
	if err != nil {
		return err
	}
	if _, err := im.push(ctx, spec, r.BundleImage); err != nil {
		return err
	}
	local := cluster.RegistryHost + "/" + strings.TrimPrefix(r.BundleImage, mirrored)
	r.Bundle, err = catalog.BundleFromImage(ctx, im.builder, im.root, rel, r.BundleImage, local, true)
	if err != nil {
		return fmt.Errorf("render the bundle image of %s: %w", r.Version, err)
	}
	return nil
}

// PushCatalog builds the catalog image of the file-based catalog root dir, as the
// catalog image of a release is built from catalog/, and pushes it as ref.
func (im *Images) PushCatalog(ctx context.Context, dir, ref string) error {
	rel, err := filepath.Rel(im.root, dir)
	if err != nil {
		return err
	}
	spec := hackimages.Catalog()
	for i := range spec.Files {
		if spec.Files[i].Context == catalog.Dir {
			spec.Files[i].Context = rel
		}
		if spec.Files[i].ServeCache == catalog.Dir {
			spec.Files[i].ServeCache = rel
		}
	}
	_, err = im.push(ctx, spec, ref)
	return err
}

// PushOLMImages pushes the images OLM's catalog operator runs for bundle unpack Jobs,
// which OLM's releases publish as quay.io/operator-framework/olm (--util-image: cp and
// cpb) and quay.io/operator-framework/opm (--opmImage: opm). The opm image here is the
// catalog image at ref, which holds opm as OLM's does.
func (im *Images) PushOLMImages(ctx context.Context, catalogRef string) (util, opm string, err error) {
	img, err := images.OLMUtil(ctx, filepath.Join(im.dir, "olm-util"))
	if err != nil {
		return "", "", err
	}
	util = mirrored + "phalanks-e2e/olm-util:v0.33.0"
	if _, err := im.pushArtifact(ctx, img, util); err != nil {
		return "", "", err
	}
	return util, catalogRef, nil
}

// PushScorecardTest pushes the image operator-sdk's built-in scorecard tests run in (the
// scorecard-test binary of the sdk tool set, laid out as operator-sdk publishes it) as
// ref, the name the bundle's scorecard configuration gives it.
func (im *Images) PushScorecardTest(ctx context.Context, ref string) error {
	bin, err := tools.Path("scorecard-test")
	if err != nil {
		return err
	}
	// As operator-sdk publishes it: the binary at /usr/local/bin, run as user 1001 with
	// its home as working directory. A test pod's command is `scorecard-test <test>`.
	img, err := imagebuild.Image(imagebuild.Config{
		Platform:   images.Platform(),
		Entrypoint: []string{"/usr/local/bin/scorecard-test"},
		User:       "1001",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/opt/scorecard-test"},
		WorkingDir: "/opt/scorecard-test",
	}, []imagebuild.Entry{
		imagebuild.HostFile("/usr/local/bin/scorecard-test", bin, 0o755),
		imagebuild.Dir("/opt/scorecard-test", 0o755).Owner(1001, 0),
	})
	if err != nil {
		return err
	}
	_, err = im.pushArtifact(ctx, img, ref)
	return err
}

// PushIndexImage pushes the opm image `operator-sdk run bundle --index-image` names
// (images.OPM) to the node's registry as repository ("path/name:tag") and returns the
// reference the node and the operator-sdk command both pull it by, over TLS.
func (im *Images) PushIndexImage(ctx context.Context, repository string) (string, error) {
	img, err := images.OPM(ctx, filepath.Join(im.dir, "opm"))
	if err != nil {
		return "", err
	}
	if _, err := im.c.Push(ctx, repository, img); err != nil {
		return "", err
	}
	return cluster.RegistryTLSHost + "/" + repository, nil
}

// PrivateRegistry is the reference of an image pushed under the mirrored registry as the
// local registry's TLS listener serves it, as from a private registry with its own CA:
// what operator-sdk run bundle pulls (it speaks only HTTPS to an index image's registry),
// and the node too.
func PrivateRegistry(ref string) string {
	return cluster.RegistryTLSHost + "/" + strings.TrimPrefix(ref, mirrored)
}

// PushBusybox pushes the busybox image (Debian's static busybox) as each of refs: what
// operator-sdk scorecard's untar step runs, and the registry pods of operator-sdk run
// bundle decompress their catalog with (sh, cat and gzip).
func (im *Images) PushBusybox(ctx context.Context, refs ...string) error {
	img, err := images.Busybox(ctx)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if _, err := im.pushArtifact(ctx, img, ref); err != nil {
			return err
		}
	}
	return nil
}

// PushTestApp pushes testapp, the web server users' workloads run in the suite (Foo's
// default, nginx, cannot be pulled here), as ref.
func (im *Images) PushTestApp(ctx context.Context, ref string) error {
	img, err := images.TestApp(ctx, filepath.Join(im.dir, "testapp"))
	if err != nil {
		return err
	}
	_, err = im.pushArtifact(ctx, img, ref)
	return err
}
