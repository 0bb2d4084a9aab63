package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the modification time of every entry of every layer, and the default
// creation time of an image: the Unix epoch, so a digest depends on content alone.
var Epoch = time.Unix(0, 0).UTC()

// Layer builds a gzip-compressed OCI layer holding entries. Entries are written in path
// order, parents before children; a parent directory no entry lists is added as a 0755
// directory owned by root. Two entries with the same path are an error, and so is a path
// below a file or symlink.
func Layer(entries []Entry) (v1.Layer, error) {
	data, err := layerTar(entries)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// layerTar returns the uncompressed tar stream of a layer.
func layerTar(entries []Entry) ([]byte, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		p, err := cleanPath(e.Path)
		if err != nil {
			return nil, err
		}
		e.Path = p
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("%s is listed twice", p)
		}
		byPath[p] = e
	}
	// Add missing parents, and refuse a path below a non-directory.
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			parent, ok := byPath[dir]
			if !ok {
				byPath[dir] = Dir(dir, 0o755)
				continue
			}
			if parent.Kind != KindDir {
				return nil, fmt.Errorf("%s is below %s, which is a %s", p, dir, parent.Kind)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	// Sorting by path puts every directory before its contents ("/a" < "/a/b"), but
	// "/a-b" sorts between "/a" and "/a/b"; compare path elements instead.
	sort.Slice(paths, func(i, j int) bool {
		return strings.ReplaceAll(paths[i], "/", "\x00") < strings.ReplaceAll(paths[j], "/", "\x00")
	})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p]); err != nil {
			return nil, fmt.Errorf("add %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, e Entry) error {
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(e.Path, "/"),
		Mode:    tarMode(e.Mode),
		Uid:     e.UID,
		Gid:     e.GID,
		ModTime: Epoch,
		Format:  tar.FormatPAX,
	}
	var data []byte
	switch e.Kind {
	case KindDir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case KindSymlink:
		if e.Target == "" {
			return fmt.Errorf("symlink without a target")
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.Target
		hdr.Mode = 0o777
	case KindFile:
		hdr.Typeflag = tar.TypeReg
		data = e.Data
		if data == nil {
			if e.Source == "" {
				return fmt.Errorf("file without content or source")
			}
			var err error
			if data, err = os.ReadFile(e.Source); err != nil {
				return err
			}
		}
		hdr.Size = int64(len(data))
	default:
		return fmt.Errorf("unknown kind %s", e.Kind)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// tarMode converts permission and special bits to the tar header's mode.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
