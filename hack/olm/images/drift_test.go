package images_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var testParams = images.Params{Version: "1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567"}

func buildArgs(p images.Params) map[string]string {
	return map[string]string{"VERSION": p.Version, "REVISION": p.Revision, "TARGETOS": "linux", "TARGETARCH": "amd64"}
}

// specs are the four images as the daemonless build makes them.
func specs(t *testing.T, p images.Params) []images.Spec {
	t.Helper()
	b, err := images.Bundle(p, bundle.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return []images.Spec{images.Operator(p), images.ScorecardTests(p), b, images.Catalog()}
}

// TestDockerfilesDescribeTheDaemonlessBuilds reads each Dockerfile and requires the
// image its final stage makes to be the daemonless build's: entrypoint, command, user,
// environment, working directory, ports, labels, every file with its source and owner,
// and the go build of each binary.
func TestDockerfilesDescribeTheDaemonlessBuilds(t *testing.T) {
	p := testParams
	p.Root = repoRoot(t)
	for _, s := range specs(t, p) {
		t.Run(s.Name, func(t *testing.T) {
			d, err := images.ParseDockerfile(p.Root, s.Dockerfile, buildArgs(p))
			if err != nil {
				t.Fatal(err)
			}
			for _, diff := range images.Diff(s, d) {
				t.Error(diff)
			}
		})
	}
}

// TestDriftIsCaught changes one thing at a time in a Dockerfile and requires the
// comparison to notice, or the Dockerfile reader to refuse what it does not understand.
func TestDriftIsCaught(t *testing.T) {
	p := testParams
	p.Root = repoRoot(t)
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(p.Root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	operator, catalog := read("Dockerfile"), read("catalog.Dockerfile")
	for name, c := range map[string]struct {
		spec images.Spec
		text string
	}{
		"another entrypoint":        {images.Operator(p), strings.Replace(operator, `ENTRYPOINT ["/manager"]`, `ENTRYPOINT ["/manager", "--leader-elect"]`, 1)},
		"root user":                 {images.Operator(p), strings.Replace(operator, "USER 65532:65532", "USER 0", 1)},
		"a label less":              {images.Operator(p), strings.Replace(operator, "org.opencontainers.image.licenses=Apache-2.0 \\\n", "", 1)},
		"a label more":              {images.Operator(p), operator + "LABEL extra=1\n"},
		"a file more":               {images.Operator(p), strings.Replace(operator, "USER 65532", "COPY config/ /config/\nUSER 65532", 1)},
		"another binary path":       {images.Operator(p), strings.Replace(operator, "/out/manager /manager", "/out/manager /bin/manager", 1)},
		"a build with cgo":          {images.Operator(p), strings.Replace(operator, "CGO_ENABLED=0", "CGO_ENABLED=1", 1)},
		"a build flag less":         {images.Operator(p), strings.Replace(operator, " -trimpath", "", 1)},
		"the environment":           {images.Operator(p), operator + "ENV GODEBUG=x509sha1=1\n"},
		"another cache owner":       {images.Catalog(), strings.Replace(catalog, "--chown=1001:0", "--chown=0:0", 1)},
		"another command":           {images.Catalog(), strings.Replace(catalog, `"--cache-dir=/tmp/cache"]`, `"--cache-dir=/tmp/other"]`, 1)},
		"no exposed port":           {images.Catalog(), strings.Replace(catalog, "EXPOSE 50051\n", "", 1)},
		"another catalog for cache": {images.Catalog(), strings.Replace(catalog, "COPY catalog/ /configs/\nRUN", "COPY bundle/ /configs/\nRUN", 1)},
	} {
		t.Run(name, func(t *testing.T) {
			if c.text == operator || c.text == catalog {
				t.Fatal("the change did not apply: the Dockerfile changed under this test")
			}
			d, err := images.ParseDockerfileText(p.Root, c.spec.Dockerfile, c.text, buildArgs(p))
			if err == nil && len(images.Diff(c.spec, d)) == 0 {
				t.Error("no difference found")
			}
		})
	}
	for name, text := range map[string]string{
		"a base image":       strings.Replace(operator, "FROM scratch", "FROM gcr.io/distroless/static:nonroot", 1),
		"a RUN in the image": strings.Replace(operator, "USER 65532", "RUN [\"/manager\", \"--help\"]\nUSER 65532", 1),
		"shell-form command": strings.Replace(operator, `ENTRYPOINT ["/manager"]`, "ENTRYPOINT /manager", 1),
		"an unknown step":    strings.Replace(operator, "RUN go mod download", "RUN go mod download && make", 1),
		"HEALTHCHECK":        operator + "HEALTHCHECK CMD [\"/manager\"]\n",
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			if _, err := images.ParseDockerfileText(p.Root, "Dockerfile", text, buildArgs(p)); err == nil {
				t.Error("ParseDockerfileText accepted it")
			}
		})
	}
}

// TestDockerfileBuildStagesHoldTheirSources requires every builder stage of each
// Dockerfile to hold what its go build compiles from its own module (go.mod, go.sum, the
// source and embedded files of the packages the binary links), through the context the
// Dockerfile's ignore file admits and the stage's COPYs; and a Dockerfile or an ignore
// file that leaves one of the manager's files out to be caught.
func TestDockerfileBuildStagesHoldTheirSources(t *testing.T) {
	p := testParams
	p.Root = repoRoot(t)
	missing := func(t *testing.T, name, text string, ignore []string) []string {
		t.Helper()
		d, err := images.ParseDockerfileText(p.Root, name, text, buildArgs(p))
		if err != nil {
			t.Fatal(err)
		}
		out, err := d.MissingSources(t.Context(), p.Root, ignore)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(p.Root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	ignores := map[string][]string{}
	for _, s := range specs(t, p) {
		ignore, err := images.IgnorePatterns(p.Root, s.Dockerfile)
		if err != nil {
			t.Fatal(err)
		}
		ignores[s.Dockerfile] = ignore
		t.Run(s.Name, func(t *testing.T) {
			for _, m := range missing(t, s.Dockerfile, read(s.Dockerfile), ignore) {
				t.Error(m)
			}
		})
	}

	operator := read("Dockerfile")
	// The manager's package main spans several files; the Dockerfile of release 0.2.0
	// copied main.go alone, and its .dockerignore admitted main.go alone.
	const oneFile = "COPY main.go main.go\n"
	t.Run("a main package file the Dockerfile does not copy", func(t *testing.T) {
		text := strings.Replace(operator, "COPY *.go ./\n", oneFile, 1)
		if text == operator {
			t.Fatal("the change did not apply: the Dockerfile changed under this test")
		}
		got := missing(t, "Dockerfile", text, ignores["Dockerfile"])
		if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "shard.go ") }) {
			t.Errorf("shard.go not reported missing: %q", got)
		}
	})
	t.Run("a main package file the ignore file leaves out", func(t *testing.T) {
		ignore := slices.DeleteFunc(slices.Clone(ignores["Dockerfile"]), func(p string) bool { return p == "!*.go" })
		ignore = append(ignore, "!main.go")
		got := missing(t, "Dockerfile", operator, ignore)
		if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "shard.go ") && strings.Contains(m, "ignore file") }) {
			t.Errorf("shard.go not reported left out of the context: %q", got)
		}
	})
	t.Run("a module file the ignore file leaves out", func(t *testing.T) {
		got := missing(t, "Dockerfile", operator, append(slices.Clone(ignores["Dockerfile"]), "internal/schedule"))
		if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "internal/schedule/") }) {
			t.Errorf("internal/schedule not reported left out of the context: %q", got)
		}
	})
}
