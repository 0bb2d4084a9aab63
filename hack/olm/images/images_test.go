package images_test

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/pkg/api"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func init() { logrus.SetLevel(logrus.WarnLevel) }

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var testParams = images.Params{Version: "1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567"}

// specs are the four images as the daemonless build makes them.
func specs(t *testing.T, p images.Params) []images.Spec {
	t.Helper()
	b, err := images.Bundle(p, bundle.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return []images.Spec{images.Operator(p), images.ScorecardTests(p), b, images.Catalog()}
}

// built is one image as pushed and pulled back.
type built struct {
	spec     images.Spec
	digest   v1.Hash
	byDigest string
	pulled   imagebuild.Artifact
}

// buildAll builds the four images with a fresh builder and returns their digests.
func buildAll(ctx context.Context, t *testing.T, p images.Params) (map[string]imagebuild.Artifact, *images.Builder) {
	t.Helper()
	b := &images.Builder{Root: p.Root, WorkDir: t.TempDir(), Log: testLog{t}}
	out := map[string]imagebuild.Artifact{}
	for _, s := range specs(t, p) {
		a, err := b.Build(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		out[s.Name] = a
	}
	return out, b
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestImagesBuildPushAndPullBack builds the operator, scorecard-test, bundle and catalog
// images without a container runtime, pushes them to a registry on loopback, pulls them
// back by digest and checks what a node and OLM will see: the platforms and the
// architecture of every binary, the entrypoint, command and user, the labels, the files;
// that the bundle image renders as bundle/ does; that the catalog image holds catalog/
// and serves it from its pre-built cache the way OLM's registry pod runs it; and that a
// second build gives the same digests.
func TestImagesBuildPushAndPullBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Minute)
	defer cancel()
	p := testParams
	p.Root = repoRoot(t)
	reg, err := imagebuild.StartRegistry("127.0.0.1:0", imagebuild.RegistryOptions{BlobDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Errorf("stop the registry: %v", err)
		}
	})

	first, _ := buildAll(ctx, t, p)
	all := map[string]*built{}
	for _, s := range specs(t, p) {
		a := first[s.Name]
		byDigest, err := imagebuild.Push(ctx, reg.Ref("phalanks/"+s.Name+":v"+p.Version), a, imagebuild.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := imagebuild.Pull(ctx, byDigest, imagebuild.Options{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := a.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := pulled.Digest(); err != nil || got != d {
			t.Fatalf("%s: pulled %s, pushed %s (%v)", s.Name, got, d, err)
		}
		all[s.Name] = &built{spec: s, digest: d, byDigest: byDigest, pulled: pulled}
	}

	for _, name := range []string{"operator", "scorecard-tests", "bundle", "catalog"} {
		b := all[name]
		t.Run(name, func(t *testing.T) {
			requirePlatforms(t, b)
			for _, platform := range b.spec.Platforms {
				img, err := imagebuild.ImageFor(b.pulled, platform)
				if err != nil {
					t.Fatal(err)
				}
				requireImage(t, p.Root, b.spec, platform, img)
			}
		})
	}
	t.Run("operator runs here", func(t *testing.T) { requireOperatorRuns(ctx, t, all["operator"]) })
	t.Run("bundle renders as bundle/", func(t *testing.T) { requireBundleRenders(ctx, t, p.Root, all["bundle"]) })
	t.Run("catalog serves as an OLM registry pod", func(t *testing.T) { requireCatalogServes(ctx, t, p.Root, all["catalog"]) })

	t.Run("bundle by digest passes the validators", func(t *testing.T) {
		requireDigestBundleValidates(ctx, t, p, reg.Ref("phalanks/operator:v"+p.Version), reg.Ref("phalanks/scorecard-tests:v"+p.Version), all)
	})

	t.Run("a bundle by digest of an image the registry lacks fails make bundle with operator-sdk's error", func(t *testing.T) {
		missing := reg.Ref("phalanks/operator:v0.0.0-never-pushed")
		_, err := bundle.Generate(ctx, p.Root, t.TempDir(), bundle.Params{
			Version: p.Version, Image: missing, ScorecardImage: reg.Ref("phalanks/scorecard-tests:v" + p.Version), UseImageDigests: true,
		}, nil)
		if err == nil {
			t.Fatalf("make bundle USE_IMAGE_DIGESTS=true pinned %s, which was never pushed", missing)
		}
		if !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") && !strings.Contains(err.Error(), "manifest unknown") {
			t.Errorf("make bundle failed without the registry's answer: %v", err)
		}
	})

	t.Run("a second build gives the same digests", func(t *testing.T) {
		second, _ := buildAll(ctx, t, p)
		for name, a := range second {
			d, err := a.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if d != all[name].digest {
				t.Errorf("%s: the first build is %s, the second %s", name, all[name].digest, d)
			}
		}
	})
}

// requireDigestBundleValidates runs `make bundle USE_IMAGE_DIGESTS=true` against the
// images in the registry, and requires operator-sdk to have pinned the manager image by
// the digest pushed wherever the CSV names it (the scorecard configuration keeps the
// custom tests' image by tag: operator-sdk pins the manifests only), validate.Pinned and
// the operatorframework suite and the multiarch rules (against the images in the
// registry) to report nothing, and validate.Pinned to reject a copy of that bundle with a
// related image by tag.
func requireDigestBundleValidates(ctx context.Context, t *testing.T, p images.Params, operatorTag, scorecardTag string, all map[string]*built) {
	dir, err := bundle.Generate(ctx, p.Root, t.TempDir(), bundle.Params{
		Version: p.Version, Image: operatorTag, ScorecardImage: scorecardTag, UseImageDigests: true,
	}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	csv := loaded.CSV
	pinned := all["operator"].byDigest
	var refs []string
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			refs = append(refs, c.Image)
		}
	}
	refs = append(refs, csv.Annotations["containerImage"])
	for _, image := range refs {
		if image != pinned {
			t.Errorf("the CSV names %s, want the operator image by digest %s", image, pinned)
		}
	}
	var related []string
	for _, ri := range csv.Spec.RelatedImages {
		related = append(related, ri.Image)
	}
	if !slices.Contains(related, pinned) {
		t.Errorf("relatedImages %v lack the operator image by digest %s", related, pinned)
	}
	scorecard, err := os.ReadFile(filepath.Join(dir, "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// operator-sdk pins the manifests only; the scorecard configuration keeps the tag.
	if !strings.Contains(string(scorecard), "image: "+scorecardTag) {
		t.Errorf("the scorecard configuration does not name the custom tests' image %s:\n%s", scorecardTag, scorecard)
	}

	t.Setenv("OPERATOR_BUNDLE_CATEGORIES", "")
	r, err := validate.Bundle(ctx, dir, map[string]string{"k8s-version": bundletest.NewestKubernetes(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := validate.MultiArch(dir, func(image string) ([]v1.Platform, error) {
		a, err := imagebuild.Pull(ctx, image, imagebuild.Options{})
		if err != nil {
			return nil, err
		}
		if idx, ok := a.(v1.ImageIndex); ok {
			return imagebuild.Platforms(idx)
		}
		cf, err := a.(v1.Image).ConfigFile()
		if err != nil {
			return nil, err
		}
		return []v1.Platform{*cf.Platform()}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pinnedReport, err := validate.Pinned(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.Errors, r.Warnings = slices.Concat(r.Errors, m.Errors, pinnedReport.Errors), slices.Concat(r.Warnings, m.Warnings, pinnedReport.Warnings)
	if !r.OK() {
		t.Errorf("validators on the bundle by digest:\nerrors: %v\nwarnings: %v", r.Errors, r.Warnings)
	}

	// The same bundle with one image by tag, here the custom scorecard tests' image added to
	// relatedImages as the scorecard configuration names it, fails validate.Pinned.
	tagged := filepath.Join(t.TempDir(), "bundle")
	if err := os.CopyFS(tagged, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	bundletest.EditCSV(t, tagged, func(c *operatorsv1alpha1.ClusterServiceVersion) {
		c.Spec.RelatedImages = append(c.Spec.RelatedImages, operatorsv1alpha1.RelatedImage{Name: "scorecard-tests", Image: scorecardTag})
	})
	unpinned, err := validate.Pinned(tagged)
	if err != nil {
		t.Fatal(err)
	}
	if len(unpinned.Errors) != 1 || !strings.Contains(unpinned.Errors[0], `relatedImages entry "scorecard-tests" names the image "`+scorecardTag+`"`) {
		t.Errorf("a bundle by digest with the related image %s by tag: want validate.Pinned's one error naming it, got\nerrors: %v\nwarnings: %v",
			scorecardTag, unpinned.Errors, unpinned.Warnings)
	}
}

func requirePlatforms(t *testing.T, b *built) {
	t.Helper()
	if len(b.spec.Platforms) == 1 {
		img, ok := b.pulled.(v1.Image)
		if !ok {
			t.Fatalf("%s is a %T, want a single image", b.spec.Name, b.pulled)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := *cf.Platform(); got.String() != b.spec.Platforms[0].String() {
			t.Errorf("platform %s, want %s", got, b.spec.Platforms[0])
		}
		return
	}
	idx, ok := b.pulled.(v1.ImageIndex)
	if !ok {
		t.Fatalf("%s is a %T, want an image index", b.spec.Name, b.pulled)
	}
	got, err := imagebuild.Platforms(idx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.spec.Platforms, got); diff != "" {
		t.Errorf("index platforms (-want +got):\n%s", diff)
	}
}

// requireImage checks one platform's image against its spec: config, every file with its
// content and owner, binaries for the platform, and a numeric non-root user that
// /etc/passwd names.
func requireImage(t *testing.T, root string, s images.Spec, platform v1.Platform, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	ports := []string{}
	for p := range cf.Config.ExposedPorts {
		ports = append(ports, p)
	}
	want := map[string]any{
		"entrypoint": s.Entrypoint, "cmd": s.Cmd, "user": s.User, "env": s.Env,
		"workdir": s.WorkingDir, "labels": s.Labels, "ports": append([]string{}, s.ExposedPorts...),
		"os": platform.OS, "architecture": platform.Architecture,
	}
	got := map[string]any{
		"entrypoint": cf.Config.Entrypoint, "cmd": cf.Config.Cmd, "user": cf.Config.User, "env": cf.Config.Env,
		"workdir": cf.Config.WorkingDir, "labels": cf.Config.Labels, "ports": ports,
		"os": cf.OS, "architecture": cf.Architecture,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s for %s: config (-want +got):\n%s", s.Name, platform, diff)
	}
	files, err := imagebuild.Contents(img)
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, f := range s.Files {
		for _, p := range requireFile(t, root, f, platform, files) {
			covered[p] = true
		}
	}
	for p, e := range files {
		if !covered[p] && e.Kind != imagebuild.KindDir {
			t.Errorf("%s for %s holds %s, which no spec file put there", s.Name, platform, p)
		}
	}
	if s.User != "" {
		requireNonRootUser(t, s.User, files)
	}
	if len(s.Entrypoint) > 0 {
		if e, ok := files[s.Entrypoint[0]]; !ok || e.Kind != imagebuild.KindFile || e.Mode&0o111 == 0 {
			t.Errorf("the entrypoint %s is not an executable file of the image", s.Entrypoint[0])
		}
	}
}

// requireFile checks one spec file in the image and returns the paths it accounts for.
func requireFile(t *testing.T, root string, f images.File, platform v1.Platform, files map[string]imagebuild.Entry) []string {
	t.Helper()
	var paths []string
	owned := func(e imagebuild.Entry) {
		if e.UID != f.UID || e.GID != f.GID {
			t.Errorf("%s is owned by %d:%d, want %d:%d", e.Path, e.UID, e.GID, f.UID, f.GID)
		}
	}
	switch {
	case f.Context != "":
		src := filepath.Join(root, f.Context)
		info, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		var entries []imagebuild.Entry
		if info.IsDir() {
			if entries, err = imagebuild.HostTree(f.Path, src); err != nil {
				t.Fatal(err)
			}
		} else {
			entries = []imagebuild.Entry{imagebuild.HostFile(f.Path, src, 0)}
		}
		for _, want := range entries {
			got, ok := files[want.Path]
			if !ok {
				t.Errorf("%s (from %s) is missing", want.Path, f.Context)
				continue
			}
			paths = append(paths, want.Path)
			owned(got)
			if want.Kind == imagebuild.KindFile {
				data, err := os.ReadFile(want.Source)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(data, got.Data) {
					t.Errorf("%s differs from %s", want.Path, want.Source)
				}
			}
		}
	case f.Go != nil:
		e, ok := files[f.Path]
		if !ok {
			t.Fatalf("the binary %s is missing", f.Path)
		}
		paths = append(paths, f.Path)
		owned(e)
		exe, err := imagebuild.InspectELF(e.Data)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		if exe.Architecture != platform.Architecture || !exe.Static || e.Mode != 0o755 {
			t.Errorf("%s is a %+v binary with mode %v; want a static %s one, 0755", f.Path, exe, e.Mode, platform.Architecture)
		}
	case f.ServeCache != "":
		for p, e := range files {
			if p == f.Path || strings.HasPrefix(p, f.Path+"/") {
				paths = append(paths, p)
				owned(e)
			}
		}
		if _, ok := files[path.Join(f.Path, "digest")]; !ok {
			t.Errorf("the serve cache %s has no digest", f.Path)
		}
	}
	return paths
}

// requireNonRootUser: the image's user is numeric and not root, as restricted Pod
// Security needs to verify runAsNonRoot, and /etc/passwd names it.
func requireNonRootUser(t *testing.T, user string, files map[string]imagebuild.Entry) {
	t.Helper()
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.Atoi(uid)
	if err != nil || n == 0 {
		t.Fatalf("user %q is not a numeric non-root user", user)
	}
	passwd := files["/etc/passwd"]
	for _, line := range strings.Split(string(passwd.Data), "\n") {
		if fields := strings.Split(line, ":"); len(fields) > 2 && fields[2] == uid {
			return
		}
	}
	t.Errorf("/etc/passwd has no entry for uid %s", uid)
}

// extract writes an image's files for this machine's platform under dir, with their
// modes, and returns the files.
func extract(t *testing.T, a imagebuild.Artifact, dir string) map[string]imagebuild.Entry {
	t.Helper()
	img, err := imagebuild.ImageFor(a, images.HostPlatform())
	if err != nil {
		t.Fatal(err)
	}
	files, err := imagebuild.Contents(img)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		e := files[p]
		host := filepath.Join(dir, filepath.FromSlash(p))
		switch e.Kind {
		case imagebuild.KindDir:
			if err := os.MkdirAll(host, 0o700); err != nil {
				t.Fatal(err)
			}
		case imagebuild.KindFile:
			if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(host, e.Data, 0o600); err != nil {
				t.Fatal(err)
			}
		case imagebuild.KindSymlink:
			if err := os.Symlink(e.Target, host); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Chmod(host, e.Mode); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// requireOperatorRuns runs the manager binary of this machine's platform from the image,
// and checks that it carries CA roots of its own, as the image has none.
func requireOperatorRuns(ctx context.Context, t *testing.T, b *built) {
	dir := t.TempDir()
	files := extract(t, b.pulled, dir)
	manager := filepath.Join(dir, "manager")
	// It runs when it prints its flags (and exits non-zero, as for any flag error);
	// a binary for another platform fails to start at all.
	out, err := exec.CommandContext(ctx, manager, "--help").CombinedOutput()
	var exit *exec.ExitError
	if (err != nil && !errors.As(err, &exit)) || !strings.Contains(string(out), "-leader-elect") {
		t.Errorf("/manager --help: %v\n%s", err, out)
	}
	info, err := buildinfo.Read(bytes.NewReader(files["/manager"].Data))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(info.Deps, func(m *debug.Module) bool { return m.Path == "golang.org/x/crypto/x509roots/fallback" }) {
		t.Error("the manager links no fallback CA roots, and the image has no CA certificates")
	}
	if _, ok := files["/etc/ssl/certs/ca-certificates.crt"]; ok {
		t.Error("the image carries a CA bundle; the manager's compiled-in roots are the one source")
	}
}

// requireBundleRenders: `opm render` of the pushed bundle image (operator-registry's own
// client pulling from the registry) equals the rendering of bundle/ under that name.
func requireBundleRenders(ctx context.Context, t *testing.T, root string, b *built) {
	fromImage, err := catalog.RenderBundleImage(ctx, b.byDigest, true)
	if err != nil {
		t.Fatal(err)
	}
	fromDir, err := catalog.RenderBundleDirAsImage(ctx, filepath.Join(root, bundle.Dir), b.byDigest)
	if err != nil {
		t.Fatal(err)
	}
	if catalog.EmbedsObjects(fromImage) {
		t.Error("the rendering embeds olm.bundle.object")
	}
	if diff := cmp.Diff(bundleJSON(t, *fromDir), bundleJSON(t, *fromImage)); diff != "" {
		t.Errorf("opm render of the bundle image differs from bundle/ (-dir +image):\n%s", diff)
	}
}

func bundleJSON(t *testing.T, b declcfg.Bundle) any {
	t.Helper()
	var buf bytes.Buffer
	if err := declcfg.WriteJSON(declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{b}}, &buf); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// requireCatalogServes runs the catalog image's entrypoint and command on the files
// pulled back (paths under a temporary root, a free port), as OLM's registry pod runs
// them, and requires: the pre-built cache is found and passes opm's integrity check (a
// stale cache is fatal with --cache-dir), the health probe OLM runs reports SERVING, the
// registry API lists the package with the catalog's head, and nothing was written.
func requireCatalogServes(ctx context.Context, t *testing.T, root string, b *built) {
	dir := t.TempDir()
	files := extract(t, b.pulled, dir)
	img, err := imagebuild.ImageFor(b.pulled, images.HostPlatform())
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// The image holds catalog/ as it is.
	for _, f := range b.spec.Files {
		if f.Context == catalog.Dir {
			requireFile(t, root, f, images.HostPlatform(), files)
		}
	}

	port := freePort(t)
	argv := slices.Concat(cf.Config.Entrypoint, cf.Config.Cmd)
	for i, a := range argv {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "/") {
			argv[i] = k + "=" + filepath.Join(dir, v)
		} else if strings.HasPrefix(a, "/") {
			argv[i] = filepath.Join(dir, a)
		}
	}
	argv = append(argv, "-p", port, "--pprof-addr=", "--termination-log="+filepath.Join(t.TempDir(), "termination-log"))
	var log syncBuffer
	opm := exec.Command(argv[0], argv[1:]...)
	opm.Stdout, opm.Stderr = &log, &log
	if err := opm.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- opm.Wait() }()
	t.Cleanup(func() {
		_ = opm.Process.Kill()
		t.Logf("opm stopped: %v", <-exited)
	})

	// OLM probes registry pods with `grpc_health_probe -addr=:50051` through PATH.
	probe := filepath.Join(dir, "bin", "grpc_health_probe")
	if !slices.Contains(cf.Config.Env, images.DefaultPath) || files["/bin/grpc_health_probe"].Kind != imagebuild.KindFile {
		t.Fatal("grpc_health_probe is not on the image's PATH")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := exec.CommandContext(ctx, probe, "-addr=127.0.0.1:"+port, "-connect-timeout=2s", "-rpc-timeout=2s").CombinedOutput()
		if err == nil && strings.Contains(string(out), "SERVING") {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("opm exited (%v):\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("opm never reported SERVING (last probe: %v %s):\n%s", err, out, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(log.String(), "found existing cache contents") || strings.Contains(log.String(), "building cache") {
		t.Errorf("opm did not serve from the pre-built cache:\n%s", log.String())
	}

	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := api.NewRegistryClient(conn)
	pkg, err := client.GetPackage(ctx, &api.GetPackageRequest{Name: bundle.PackageName})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := catalog.Load(ctx, catalog.PackageDir(root))
	if err != nil {
		t.Fatal(err)
	}
	if pkg.DefaultChannelName != bundle.Channel || len(pkg.Channels) != 1 || pkg.Channels[0].CsvName != catalog.Head(cfg) {
		t.Errorf("the registry serves %+v; want channel %s headed by %s", pkg, bundle.Channel, catalog.Head(cfg))
	}
	served, err := client.GetBundle(ctx, &api.GetBundleRequest{PkgName: bundle.PackageName, ChannelName: bundle.Channel, CsvName: catalog.Head(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range cfg.Bundles {
		if b.Name == catalog.Head(cfg) && served.BundlePath != b.Image {
			t.Errorf("the registry points OLM at %q for the head, the catalog at %q", served.BundlePath, b.Image)
		}
	}

	if err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
		if _, ok := files[rel]; !ok && p != dir {
			return fmt.Errorf("opm wrote %s", rel)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
