// Command krew builds the release archives of the kubectl plugin kubectl-phalanks, one
// per platform, and the krew manifest that installs them (krew: the kubectl plugin
// manager; its index takes the manifest):
//
//	go run ./hack/krew -version v0.2.0 -out bin/plugin-dist
//
// The archives are named kubectl-phalanks_<os>_<arch>.tar.gz, hold the binary and the
// repository's LICENSE (krew's index requires one), and are meant to be uploaded to the
// release at -url; the manifest's checksums are theirs.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
)

//go:embed phalanks.yaml.tmpl
var manifestTemplate string

// platform is one os/arch the plugin is built for, and its archive once built.
type platform struct {
	OS, Arch, Bin, URI, SHA256 string
	archive                    string
}

// defaultPlatforms are those of krew's index most users run kubectl on.
const defaultPlatforms = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64"

func main() {
	version := flag.String("version", "", "Release version, such as v0.2.0.")
	out := flag.String("out", "bin/plugin-dist", "Directory for the archives and phalanks.yaml.")
	url := flag.String("url", "https://github.com/phalanks/phalanks-operator/releases/download/{{version}}",
		"Where the archives are downloaded from; {{version}} is replaced.")
	platforms := flag.String("platforms", defaultPlatforms, "Comma-separated os/arch pairs.")
	root := flag.String("root", ".", "The repository's root.")
	flag.Parse()
	if err := run(*root, *version, *out, strings.ReplaceAll(*url, "{{version}}", *version), *platforms); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(root, version, out, url, platforms string) error {
	if !strings.HasPrefix(version, "v") {
		return errors.New("-version must be a version such as v0.2.0 (krew wants the v)")
	}
	if err := os.MkdirAll(out, 0o750); err != nil {
		return err
	}
	var built []platform
	for _, p := range strings.Split(platforms, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok {
			return fmt.Errorf("platform %q: want os/arch", p)
		}
		pl := platform{OS: goos, Arch: goarch, Bin: "kubectl-phalanks"}
		if goos == "windows" {
			pl.Bin += ".exe"
		}
		name := fmt.Sprintf("kubectl-phalanks_%s_%s.tar.gz", goos, goarch)
		pl.archive = filepath.Join(out, name)
		pl.URI = strings.TrimSuffix(url, "/") + "/" + name
		if err := build(root, out, &pl); err != nil {
			return err
		}
		built = append(built, pl)
	}
	f, err := os.Create(filepath.Join(out, "phalanks.yaml"))
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	t := template.Must(template.New("manifest").Parse(manifestTemplate))
	if err := t.Execute(f, map[string]any{"Version": version, "Platforms": built}); err != nil {
		return err
	}
	return f.Close()
}

// build compiles the plugin for p and archives it with its checksum.
func build(root, out string, p *platform) error {
	bin := filepath.Join(out, p.OS+"_"+p.Arch, p.Bin)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/kubectl-phalanks")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+p.OS, "GOARCH="+p.Arch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build for %s/%s: %w\n%s", p.OS, p.Arch, err, b)
	}
	if err := archive(p.archive, map[string]string{p.Bin: bin, "LICENSE": filepath.Join(root, "LICENSE")}); err != nil {
		return err
	}
	sum, err := sha256File(p.archive)
	if err != nil {
		return err
	}
	p.SHA256 = sum
	return os.RemoveAll(filepath.Dir(bin))
}

// archive writes a gzipped tar of files (name in the archive → path), sorted by name.
func archive(path string, files map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := addFile(tw, name, files[name]); err != nil {
			return err
		}
	}
	for _, c := range []io.Closer{tw, gz, f} {
		if err := c.Close(); err != nil {
			return err
		}
	}
	return nil
}

func addFile(tw *tar.Writer, name, path string) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if info.Mode()&0o111 != 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
