package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// IgnorePatterns reads the ignore file a builder applies to the context of the
// Dockerfile name (relative to root): name.dockerignore beside it when there is one
// (BuildKit, buildah), else the context's .dockerignore; none leaves nothing out.
func IgnorePatterns(root, name string) ([]string, error) {
	for _, f := range []string{name + ".dockerignore", ".dockerignore"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return ignorefile.ReadAll(bytes.NewReader(data))
	}
	return nil, nil
}

// MissingSources lists the files each go build of d needs from its own module (the
// go.mod, go.sum and the source and embedded files of every package of the module the
// binary links, for linux/amd64 with the build's tags) that its builder stage lacks: left
// out of the context by the ignore patterns, or by the stage's COPYs. Empty means every
// builder stage holds the sources it compiles. It runs `go list`, so a module whose
// dependencies are not in the module cache is downloaded.
func (d *Dockerfile) MissingSources(ctx context.Context, root string, ignore []string) ([]string, error) {
	pm, err := patternmatcher.New(ignore)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, image := range slices.Sorted(maps.Keys(d.GoBuilds)) {
		b := d.GoBuilds[image]
		files, err := moduleSources(ctx, filepath.Join(root, b.Binary.Module), b.Binary)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", image, err)
		}
		for _, rel := range files {
			repo := path.Join(b.Binary.Module, rel)
			if ignored, err := pm.MatchesOrParentMatches(repo); err != nil {
				return nil, err
			} else if ignored {
				out = append(out, fmt.Sprintf("%s (for %s): the ignore file leaves it out of the context", repo, image))
				continue
			}
			if !copiedTo(b.Copied, path.Join(b.Dir, rel), repo) {
				out = append(out, fmt.Sprintf("%s (for %s): no COPY puts it at %s", repo, image, path.Join(b.Dir, rel)))
			}
		}
	}
	return out, nil
}

// copiedTo reports whether a COPY of copied (stage path to repository path) put the
// repository file repo at the stage path at, itself or within a copied directory.
func copiedTo(copied map[string]string, at, repo string) bool {
	for dst, src := range copied {
		if dst == at && src == repo {
			return true
		}
		rel, ok := strings.CutPrefix(at, dst+"/")
		if ok && (src == "." && rel == repo || path.Join(src, rel) == repo) {
			return true
		}
	}
	return false
}

// moduleSources lists, relative to the module directory dir, the go.mod, go.sum and the
// files of the module's own packages that the binary b links, as go list sees them for
// linux/amd64 without cgo.
func moduleSources(ctx context.Context, dir string, b GoBinary) ([]string, error) {
	args := []string{"list", "-deps"}
	if len(b.Tags) > 0 {
		args = append(args, "-tags="+strings.Join(b.Tags, ","))
	}
	args = append(args, "-f", `{{if and .Module .Module.Main}}{{.Dir}}{{range .GoFiles}}|{{.}}{{end}}{{range .EmbedFiles}}|{{.}}{{end}}{{end}}`, b.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	listed, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	files := []string{"go.mod"}
	if _, err := os.Stat(filepath.Join(dir, "go.sum")); err == nil {
		files = append(files, "go.sum")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(listed)), "\n") {
		if line == "" {
			continue
		}
		fields := strings.Split(line, "|")
		pkgDir, err := filepath.Rel(dir, fields[0])
		if err != nil || strings.HasPrefix(pkgDir, "..") {
			return nil, fmt.Errorf("package directory %s is outside the module %s", fields[0], dir)
		}
		for _, f := range fields[1:] {
			files = append(files, path.Join(filepath.ToSlash(pkgDir), f))
		}
	}
	return files, nil
}
