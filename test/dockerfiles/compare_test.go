package dockerfiles

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// view is what a user gets from an image: its platform, the configuration a runtime
// reads, and every file of its flattened filesystem with its type, mode, owner and
// content. Times are left out: the daemonless build writes time 0, a builder the build's.
type view struct {
	Platform     string
	Entrypoint   []string
	Cmd          []string
	User         string
	Env          []string
	WorkingDir   string
	ExposedPorts []string
	Labels       map[string]string
	Files        map[string]entry
}

// entry is one path of an image's filesystem.
type entry struct {
	Type   byte
	Mode   int64
	UID    int
	GID    int
	Link   string
	Digest string // of a regular file's content
}

// builderLabels are the labels a builder adds on its own (buildah names its version);
// they describe the build, not the image users run.
var builderLabels = []string{"io.buildah.version"}

// viewOf reads an image's configuration and flattened filesystem.
func viewOf(img v1.Image) (view, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return view{}, err
	}
	c := cf.Config
	v := view{
		Platform:   cf.OS + "/" + cf.Architecture,
		Entrypoint: c.Entrypoint, Cmd: c.Cmd, User: c.User, Env: c.Env, WorkingDir: c.WorkingDir,
		ExposedPorts: slices.Sorted(maps.Keys(c.ExposedPorts)),
		Labels:       maps.Clone(c.Labels),
		Files:        map[string]entry{},
	}
	for _, l := range builderLabels {
		delete(v.Labels, l)
	}
	// An image without a working directory runs in / (the OCI image specification
	// leaves it to the runtime, and every runtime uses /): buildah leaves it unset for
	// an image FROM scratch, BuildKit and the daemonless build write /.
	if v.WorkingDir == "" {
		v.WorkingDir = "/"
	}
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return view{}, err
		}
		name := path.Clean("/" + h.Name)
		e := entry{Type: h.Typeflag, Mode: h.Mode & 0o7777, UID: h.Uid, GID: h.Gid, Link: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			sum := sha256.New()
			if _, err := io.Copy(sum, tr); err != nil { //nolint:gosec // G110: the images this test built itself
				return view{}, err
			}
			e.Digest = hex.EncodeToString(sum.Sum(nil))
		}
		v.Files[name] = e
	}
	return v, nil
}

// differences lists where got (the real builder's image) differs from want (the
// daemonless build's). A directory that only one of them records is left out: a
// builder writes the parents of what it copies as entries of their own, the daemonless
// build only the directories it copies; a directory both record must agree.
func differences(want, got view) []string {
	var out []string
	field := func(name string, w, g any) {
		if fmt.Sprint(w) != fmt.Sprint(g) {
			out = append(out, fmt.Sprintf("%s: daemonless %v, real builder %v", name, w, g))
		}
	}
	field("platform", want.Platform, got.Platform)
	field("entrypoint", want.Entrypoint, got.Entrypoint)
	field("command", want.Cmd, got.Cmd)
	field("user", want.User, got.User)
	field("environment", want.Env, got.Env)
	field("working directory", want.WorkingDir, got.WorkingDir)
	field("exposed ports", want.ExposedPorts, got.ExposedPorts)
	for _, k := range slices.Sorted(maps.Keys(joinKeys(want.Labels, got.Labels))) {
		w, inW := want.Labels[k]
		g, inG := got.Labels[k]
		if inW != inG || w != g {
			out = append(out, fmt.Sprintf("label %s: daemonless %q (set %v), real builder %q (set %v)", k, w, inW, g, inG))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(joinKeys(want.Files, got.Files))) {
		w, inW := want.Files[p]
		g, inG := got.Files[p]
		switch {
		case inW && inG:
			if w != g && !builderDependent(p, w, g) {
				out = append(out, fmt.Sprintf("%s: daemonless %s, real builder %s", p, w, g))
			}
		case inW && w.Type != tar.TypeDir:
			out = append(out, fmt.Sprintf("%s: only in the daemonless build (%s)", p, w))
		case inG && g.Type != tar.TypeDir:
			out = append(out, fmt.Sprintf("%s: only in the real builder's image (%s)", p, g))
		}
	}
	return out
}

// builderDependent reports whether a difference at p is one the builders themselves
// disagree on, for a directory a COPY creates rather than copies; the catalog image
// (catalog.Dockerfile: COPY --from=builder --chown=1001:0 /out/cache /tmp/cache) has
// both:
//   - /tmp, the missing parent of that COPY's destination: buildah gives it the --chown
//     owner (openshift/imagebuilder#207), BuildKit leaves it to root
//     (moby/moby#42819), as the daemonless build does; its type and mode must agree.
//   - /tmp/cache, the destination of a directory's contents: buildah creates it 0755,
//     the daemonless build keeps the serve cache's 0750; opm serves from either (the
//     cache's digest covers the modes of what the directory holds, not its own), and
//     its type and owner must agree.
func builderDependent(p string, w, g entry) bool {
	switch p {
	case "/tmp":
		w.UID, w.GID, g.UID, g.GID = 0, 0, 0, 0
	case "/tmp/cache":
		w.Mode, g.Mode = 0, 0
	default:
		return false
	}
	return w == g && w.Type == tar.TypeDir
}

func joinKeys[V any](a, b map[string]V) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

func (e entry) String() string {
	s := fmt.Sprintf("type %q mode %#o owner %d:%d", e.Type, e.Mode, e.UID, e.GID)
	if e.Link != "" {
		s += " link " + e.Link
	}
	if e.Digest != "" {
		s += " sha256 " + e.Digest[:12]
	}
	return s
}

// imageIn returns the image of platform under the reference name ref in the OCI layout
// dir: the image itself, or the one for platform in the index ref names.
func imageIn(dir, ref, platform string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, d := range m.Manifests {
		name := d.Annotations["org.opencontainers.image.ref.name"]
		refs = append(refs, name)
		if name != ref {
			continue
		}
		if !d.MediaType.IsIndex() {
			return idx.Image(d.Digest)
		}
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, c := range cm.Manifests {
			if c.Platform != nil && c.Platform.OS+"/"+c.Platform.Architecture == platform {
				return child.Image(c.Digest)
			}
		}
		return nil, fmt.Errorf("%s in %s has no %s image", ref, dir, platform)
	}
	return nil, fmt.Errorf("%s holds no %s (it holds %s)", dir, ref, strings.Join(refs, ", "))
}

// TestDifferencesCatchDrift changes one thing at a time in an image as the daemonless
// build describes it and requires the comparison to report it: what a Dockerfile edit
// that the daemonless build does not follow (or the other way round) would change.
func TestDifferencesCatchDrift(t *testing.T) {
	base := func() view {
		return view{
			Platform: "linux/amd64", Entrypoint: []string{"/manager"}, User: "65532:65532",
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, WorkingDir: "/",
			Labels: map[string]string{"org.opencontainers.image.version": "1.2.3"},
			Files: map[string]entry{
				"/":           {Type: tar.TypeDir, Mode: 0o755},
				"/etc":        {Type: tar.TypeDir, Mode: 0o755},
				"/etc/passwd": {Type: tar.TypeReg, Mode: 0o644, Digest: strings.Repeat("a", 64)},
				"/manager":    {Type: tar.TypeReg, Mode: 0o755, Digest: strings.Repeat("b", 64)},
				"/tmp":        {Type: tar.TypeDir, Mode: 0o755},
				"/tmp/cache":  {Type: tar.TypeDir, Mode: 0o750, UID: 1001},
			},
		}
	}
	if d := differences(base(), base()); len(d) != 0 {
		t.Fatalf("an image differs from itself: %v", d)
	}
	onlyParents := base()
	onlyParents.Files["/usr"] = entry{Type: tar.TypeDir, Mode: 0o755}
	if d := differences(base(), onlyParents); len(d) != 0 {
		t.Errorf("a parent directory one builder records and the other does not is a difference: %v", d)
	}
	buildah := base()
	buildah.Files["/tmp"] = entry{Type: tar.TypeDir, Mode: 0o755, UID: 1001}
	buildah.Files["/tmp/cache"] = entry{Type: tar.TypeDir, Mode: 0o755, UID: 1001}
	if d := differences(base(), buildah); len(d) != 0 {
		t.Errorf("what the builders disagree on is a difference: %v", d)
	}
	for name, change := range map[string]func(v *view){
		"another platform":          func(v *view) { v.Platform = "linux/arm64" },
		"another entrypoint":        func(v *view) { v.Entrypoint = []string{"/manager", "--leader-elect"} },
		"a command":                 func(v *view) { v.Cmd = []string{"serve"} },
		"root user":                 func(v *view) { v.User = "0" },
		"the environment":           func(v *view) { v.Env = append(v.Env, "GODEBUG=x509sha1=1") },
		"another working dir":       func(v *view) { v.WorkingDir = "/workspace" },
		"an exposed port":           func(v *view) { v.ExposedPorts = []string{"8080/tcp"} },
		"a label less":              func(v *view) { delete(v.Labels, "org.opencontainers.image.version") },
		"a label more":              func(v *view) { v.Labels["extra"] = "1" },
		"another label value":       func(v *view) { v.Labels["org.opencontainers.image.version"] = "1.2.4" },
		"a file more":               func(v *view) { v.Files["/config/x.yaml"] = entry{Type: tar.TypeReg, Mode: 0o644} },
		"a file less":               func(v *view) { delete(v.Files, "/etc/passwd") },
		"another binary path":       func(v *view) { v.Files["/bin/manager"] = v.Files["/manager"]; delete(v.Files, "/manager") },
		"another binary":            func(v *view) { e := v.Files["/manager"]; e.Digest = strings.Repeat("c", 64); v.Files["/manager"] = e },
		"a mode":                    func(v *view) { e := v.Files["/manager"]; e.Mode = 0o700; v.Files["/manager"] = e },
		"an owner":                  func(v *view) { e := v.Files["/tmp/cache"]; e.UID = 0; v.Files["/tmp/cache"] = e },
		"a file become a symlink":   func(v *view) { v.Files["/manager"] = entry{Type: tar.TypeSymlink, Link: "/bin/sh"} },
		"a directory's permission":  func(v *view) { e := v.Files["/etc"]; e.Mode = 0o777; v.Files["/etc"] = e },
		"the catalog cache's owner": func(v *view) { e := v.Files["/tmp/cache"]; e.UID = 0; v.Files["/tmp/cache"] = e },
		"/tmp's mode":               func(v *view) { e := v.Files["/tmp"]; e.Mode = 0o700; v.Files["/tmp"] = e },
	} {
		t.Run(name, func(t *testing.T) {
			changed := base()
			change(&changed)
			if len(differences(base(), changed)) == 0 {
				t.Error("no difference found")
			}
		})
	}
}
