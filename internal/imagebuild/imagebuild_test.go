package imagebuild_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/phalanks/phalanks-operator/internal/imagebuild"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
)

// header is what a test compares of a tar entry.
type header struct {
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
	Link     string
	Data     string
	ModTime  time.Time
}

func layerHeaders(t *testing.T, l v1.Layer) []header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	var out []header
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, header{hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Linkname, string(data), hdr.ModTime.UTC()})
	}
}

func TestLayerWritesEntriesInPathOrderWithParentsOwnersAndFixedTimes(t *testing.T) {
	host := filepath.Join(t.TempDir(), "manager")
	if err := os.WriteFile(host, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := imagebuild.Layer([]imagebuild.Entry{
		imagebuild.Symlink("/usr/bin/sh", "busybox"),
		imagebuild.File("/etc/passwd", []byte("app:x:10001:10001::/:/sbin/nologin\n"), 0o644),
		imagebuild.Dir("/tmp", 0o777|fs.ModeSticky),
		imagebuild.HostFile("/manager", host, 0o755),
		imagebuild.File("/usr/bin-x", []byte("x"), 0o644),
		imagebuild.Dir("/home/app", 0o700).Owner(10001, 10001),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []header{
		{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: "app:x:10001:10001::/:/sbin/nologin\n"},
		{Name: "home/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "home/app/", Type: tar.TypeDir, Mode: 0o700, UID: 10001, GID: 10001},
		{Name: "manager", Type: tar.TypeReg, Mode: 0o755, Data: "binary"},
		{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
		{Name: "usr/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/sh", Type: tar.TypeSymlink, Mode: 0o777, Link: "busybox"},
		{Name: "usr/bin-x", Type: tar.TypeReg, Mode: 0o644, Data: "x"},
	}
	for i := range want {
		want[i].ModTime = imagebuild.Epoch
	}
	if diff := cmp.Diff(want, layerHeaders(t, l)); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	mt, err := l.MediaType()
	if err != nil || mt != types.OCILayer {
		t.Errorf("media type %q, %v; want %q", mt, err, types.OCILayer)
	}
}

func TestLayerRejectsBadEntries(t *testing.T) {
	for name, entries := range map[string][]imagebuild.Entry{
		"a relative path":          {imagebuild.File("etc/passwd", nil, 0o644)},
		"the root directory":       {imagebuild.Dir("/", 0o755)},
		"a path listed twice":      {imagebuild.File("/a", nil, 0o644), imagebuild.Dir("/a/", 0o755)},
		"a path below a file":      {imagebuild.File("/a", nil, 0o644), imagebuild.File("/a/b", nil, 0o644)},
		"a symlink with no target": {imagebuild.Symlink("/a", "")},
		"a missing host file":      {imagebuild.HostFile("/a", filepath.Join(t.TempDir(), "missing"), 0o644)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := imagebuild.Layer(entries); err == nil {
				t.Error("Layer accepted it")
			}
		})
	}
}

func TestHostTreeOwnsEverythingByRootWithNormalisedModes(t *testing.T) {
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "manifests", "csv.yaml"), "kind: ClusterServiceVersion\n", 0o664)
	mustWrite(t, filepath.Join(src, "bin", "tool"), "#!/bin/sh\n", 0o700)
	if err := os.Symlink("tool", filepath.Join(src, "bin", "alias")); err != nil {
		t.Fatal(err)
	}
	entries, err := imagebuild.HostTree("/bundle", src)
	if err != nil {
		t.Fatal(err)
	}
	l, err := imagebuild.Layer(entries)
	if err != nil {
		t.Fatal(err)
	}
	want := []header{
		{Name: "bundle/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "bundle/bin/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "bundle/bin/alias", Type: tar.TypeSymlink, Mode: 0o777, Link: "tool"},
		{Name: "bundle/bin/tool", Type: tar.TypeReg, Mode: 0o755, Data: "#!/bin/sh\n"},
		{Name: "bundle/manifests/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "bundle/manifests/csv.yaml", Type: tar.TypeReg, Mode: 0o644, Data: "kind: ClusterServiceVersion\n"},
	}
	for i := range want {
		want[i].ModTime = imagebuild.Epoch
	}
	if diff := cmp.Diff(want, layerHeaders(t, l)); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}

	rootTree, err := imagebuild.HostTree("/", filepath.Join(src, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rootTree) != 1 || rootTree[0].Path != "/csv.yaml" {
		t.Errorf("HostTree(/) = %+v, want the file alone", rootTree)
	}
}

func mustWrite(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func sampleConfig(p v1.Platform) imagebuild.Config {
	return imagebuild.Config{
		Platform:     p,
		Entrypoint:   []string{"/app"},
		Cmd:          []string{"--flag"},
		User:         "10001:10001",
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir:   "/work",
		Labels:       map[string]string{"org.opencontainers.image.version": "1.2.3"},
		ExposedPorts: []string{"8080/tcp"},
	}
}

func sampleImage(t *testing.T, p v1.Platform) v1.Image {
	t.Helper()
	img, err := imagebuild.Image(sampleConfig(p),
		[]imagebuild.Entry{imagebuild.File("/etc/passwd", []byte("app:x:10001:10001::/:/sbin/nologin\n"), 0o644)},
		[]imagebuild.Entry{imagebuild.File("/app", []byte("app for "+p.Architecture), 0o755)},
	)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digest(t *testing.T, a imagebuild.Artifact) v1.Hash {
	t.Helper()
	d, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestImageCarriesItsConfigAndIsReproducible(t *testing.T) {
	img := sampleImage(t, arm64)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := sampleConfig(arm64)
	got := imagebuild.Config{
		Platform:   *cf.Platform(),
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, User: cf.Config.User,
		Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, Labels: cf.Config.Labels,
	}
	for p := range cf.Config.ExposedPorts {
		got.ExposedPorts = append(got.ExposedPorts, p)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if !cf.Created.Equal(imagebuild.Epoch) || len(cf.History) != 2 || len(cf.RootFS.DiffIDs) != 2 {
		t.Errorf("created %v, %d history entries, %d diff IDs; want the epoch, 2 and 2", cf.Created, len(cf.History), len(cf.RootFS.DiffIDs))
	}
	for _, check := range []struct {
		name string
		mt   func() (types.MediaType, error)
		want types.MediaType
	}{
		{"manifest", img.MediaType, types.OCIManifestSchema1},
		{"config", func() (types.MediaType, error) { m, err := img.Manifest(); return m.Config.MediaType, err }, types.OCIConfigJSON},
	} {
		if mt, err := check.mt(); err != nil || mt != check.want {
			t.Errorf("%s media type %q, %v; want %q", check.name, mt, err, check.want)
		}
	}

	if a, b := digest(t, img), digest(t, sampleImage(t, arm64)); a != b {
		t.Errorf("two builds of the same image: %s and %s", a, b)
	}
	if a, b := digest(t, img), digest(t, sampleImage(t, amd64)); a == b {
		t.Error("images for two platforms have the same digest")
	}
	if _, err := imagebuild.Image(imagebuild.Config{}); err == nil {
		t.Error("an image without a platform was built")
	}
}

func TestIndexDescribesEachPlatform(t *testing.T) {
	idx, err := imagebuild.Index(sampleImage(t, amd64), sampleImage(t, arm64))
	if err != nil {
		t.Fatal(err)
	}
	platforms, err := imagebuild.Platforms(idx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.Platform{amd64, arm64}, platforms); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %q", mt)
	}
	again, err := imagebuild.Index(sampleImage(t, amd64), sampleImage(t, arm64))
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, idx) != digest(t, again) {
		t.Error("two builds of the same index differ")
	}
	if _, err := imagebuild.Index(sampleImage(t, amd64), sampleImage(t, amd64)); err == nil {
		t.Error("an index with two images for one platform was built")
	}
}

func startRegistry(t *testing.T, o imagebuild.RegistryOptions) *imagebuild.Registry {
	t.Helper()
	reg, err := imagebuild.StartRegistry("127.0.0.1:0", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Errorf("stop registry: %v", err)
		}
	})
	return reg
}

func TestPushAndPullThroughALoopbackRegistry(t *testing.T) {
	ctx := context.Background()
	for name, o := range map[string]imagebuild.RegistryOptions{
		"blobs in memory": {},
		"blobs on disk":   {BlobDir: filepath.Join(t.TempDir(), "blobs")},
	} {
		t.Run(name, func(t *testing.T) {
			reg := startRegistry(t, o)
			idx, err := imagebuild.Index(sampleImage(t, amd64), sampleImage(t, arm64))
			if err != nil {
				t.Fatal(err)
			}
			byDigest, err := imagebuild.Push(ctx, reg.Ref("team/app:v1"), idx, imagebuild.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if want := reg.Ref("team/app@" + digest(t, idx).String()); byDigest != want {
				t.Errorf("Push returned %s, want %s", byDigest, want)
			}
			if d, err := imagebuild.Resolve(ctx, reg.Ref("team/app:v1"), imagebuild.Options{Insecure: true}); err != nil || d != digest(t, idx) {
				t.Errorf("Resolve = %s, %v; want %s", d, err, digest(t, idx))
			}

			pulled, err := imagebuild.Pull(ctx, byDigest, imagebuild.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if digest(t, pulled) != digest(t, idx) {
				t.Errorf("pulled %s, pushed %s", digest(t, pulled), digest(t, idx))
			}
			img, err := imagebuild.ImageFor(pulled, arm64)
			if err != nil {
				t.Fatal(err)
			}
			files, err := imagebuild.Contents(img)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(files["/app"].Data); got != "app for arm64" || files["/app"].Mode != 0o755 {
				t.Errorf("/app in the arm64 image: %q mode %v", got, files["/app"].Mode)
			}

			single := sampleImage(t, amd64)
			if _, err := imagebuild.Push(ctx, reg.Ref("single:v1"), single, imagebuild.Options{}); err != nil {
				t.Fatal(err)
			}
			back, err := imagebuild.Pull(ctx, reg.Ref("single:v1"), imagebuild.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := back.(v1.Image); !ok || digest(t, back) != digest(t, single) {
				t.Errorf("pulled %T %s, want the image %s", back, digest(t, back), digest(t, single))
			}
			if _, err := imagebuild.ImageFor(back, arm64); err == nil {
				t.Error("ImageFor returned an amd64 image for arm64")
			}
		})
	}
}

func TestPullFailsClearlyWhenTheRegistryHasNoSuchImage(t *testing.T) {
	reg := startRegistry(t, imagebuild.RegistryOptions{})
	_, err := imagebuild.Pull(context.Background(), reg.Ref("missing:v1"), imagebuild.Options{})
	if err == nil || !strings.Contains(err.Error(), "missing:v1") {
		t.Errorf("Pull of a missing image: %v", err)
	}
}

func TestLayoutKeepsEveryNameAndReplacesARepeatedOne(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	idx, err := imagebuild.Index(sampleImage(t, amd64), sampleImage(t, arm64))
	if err != nil {
		t.Fatal(err)
	}
	if err := imagebuild.WriteLayout(dir, "example.com/app:v1", idx); err != nil {
		t.Fatal(err)
	}
	if err := imagebuild.WriteLayout(dir, "example.com/single:v1", sampleImage(t, amd64)); err != nil {
		t.Fatal(err)
	}
	if err := imagebuild.WriteLayout(dir, "example.com/single:v1", sampleImage(t, arm64)); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]v1.Hash{
		"example.com/app:v1":    digest(t, idx),
		"example.com/single:v1": digest(t, sampleImage(t, arm64)),
	} {
		got, err := imagebuild.ReadLayout(dir, ref)
		if err != nil {
			t.Fatal(err)
		}
		if digest(t, got) != want {
			t.Errorf("%s in the layout is %s, want %s", ref, digest(t, got), want)
		}
	}
	index, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(index), `"digest"`); n != 2 {
		t.Errorf("index.json lists %d manifests, want 2:\n%s", n, index)
	}
	if _, err := imagebuild.ReadLayout(dir, "example.com/none:v1"); err == nil {
		t.Error("ReadLayout found an image never written")
	}
}

func TestTarballLoadsBackAsTheSameImage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.tar")
	img := sampleImage(t, amd64)
	if err := imagebuild.WriteTarball(path, "localhost/app:1", img); err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := loaded.ConfigName(); err != nil || got != want {
		t.Errorf("tarball config %s, %v; want %s", got, err, want)
	}
}

func TestGoBuildCrossCompilesAStaticReproducibleBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the standard library for another architecture")
	}
	mod := t.TempDir()
	mustWrite(t, filepath.Join(mod, "go.mod"), "module example.com/hello\n\ngo 1.26\n", 0o644)
	mustWrite(t, filepath.Join(mod, "main.go"), "package main\n\nfunc main() { println(\"hello\") }\n", 0o644)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	build := func(out string) []byte {
		b := imagebuild.GoBuild{
			Dir: mod, Package: ".", Output: filepath.Join(t.TempDir(), out),
			Platform: v1.Platform{OS: "linux", Architecture: other},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := b.Run(ctx); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(b.Output)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first, second := build("hello"), build("hello-again")
	exe, err := imagebuild.InspectELF(first)
	if err != nil {
		t.Fatal(err)
	}
	if exe.Architecture != other || !exe.Static {
		t.Errorf("built %+v, want a static %s binary", exe, other)
	}
	if !bytes.Equal(first, second) {
		t.Error("two builds of the same package differ")
	}
	if _, err := imagebuild.InspectELF([]byte("#!/bin/sh\n")); err == nil {
		t.Error("InspectELF accepted a shell script")
	}
	err = imagebuild.GoBuild{Dir: mod, Package: "./missing", Output: filepath.Join(t.TempDir(), "x"), Platform: amd64}.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("building a missing package: %v", err)
	}
}

// An image runs on every node of its platform, so the build machine's own settings of
// the produced code never reach the go command: neither from the environment nor from
// the go command's configuration file (`go env -w`), whose other settings still apply.
func TestGoBuildIgnoresTheCallersCodeGenerationSettings(t *testing.T) {
	goenv := filepath.Join(t.TempDir(), "env")
	mustWrite(t, goenv, "GOAMD64=v3\nGOFLAGS=-tags=fromgoenv\nGOFIPS140=latest\nGOPRIVATE=example.com/private\n", 0o644)
	t.Setenv("GOENV", goenv)
	t.Setenv("GOAMD64", "v3")
	t.Setenv("GOARM64", "v9.0")
	t.Setenv("GOFLAGS", "-race")
	t.Setenv("GOEXPERIMENT", "nosuchexperiment")
	t.Setenv("GOFIPS140", "latest")
	t.Setenv("GO386", "softfloat")
	t.Setenv("GOPROXY", "https://proxy.example")

	mod := t.TempDir()
	mustWrite(t, filepath.Join(mod, "go.mod"), "module example.com/hello\n\ngo 1.26\n", 0o644)
	mustWrite(t, filepath.Join(mod, "main.go"), "package main\n\nfunc main() { println(\"hello\") }\n", 0o644)
	b := imagebuild.GoBuild{Dir: mod, Package: ".", Output: filepath.Join(t.TempDir(), "hello"), Platform: amd64}

	vars, err := b.Env(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	env := map[string][]string{}
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		env[name] = append(env[name], value)
	}
	for name, want := range map[string]string{"GOAMD64": "v1", "GOARM64": "v8.0", "GOOS": "linux", "GOARCH": "amd64",
		"CGO_ENABLED": "0", "GOENV": "off", "GOPROXY": "https://proxy.example", "GOPRIVATE": "example.com/private"} {
		if got := env[name]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want exactly %q", name, got, want)
		}
	}
	for _, name := range []string{"GOFLAGS", "GOEXPERIMENT", "GOFIPS140", "GO386"} {
		if got, ok := env[name]; ok {
			t.Errorf("%s = %q reaches the build", name, got)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	if err := b.Run(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(b.Output)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["GOAMD64"] != "v1" {
		t.Errorf("built with GOAMD64=%q, want v1", settings["GOAMD64"])
	}
	for _, key := range []string{"-tags", "GOEXPERIMENT", "GOFIPS140"} {
		if v, ok := settings[key]; ok {
			t.Errorf("built with %s=%q", key, v)
		}
	}
}

// A layer's blob is gzip and decompresses to the stream whose digest is its diff ID.
func TestLayerBlobIsGzipOfItsDiff(t *testing.T) {
	l, err := imagebuild.Layer([]imagebuild.Entry{imagebuild.File("/a", []byte("a"), 0o644)})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := v1.SHA256(zr)
	if err != nil {
		t.Fatal(err)
	}
	if diffID, err := l.DiffID(); err != nil || diffID != h {
		t.Errorf("diff ID %s, %v; the decompressed blob hashes to %s", diffID, err, h)
	}
}
