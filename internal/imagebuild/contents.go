package imagebuild

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Contents reads img's filesystem, every layer applied in order (whiteouts included),
// as entries keyed by absolute path, files with their Data.
func Contents(img v1.Image) (map[string]Entry, error) {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	out := map[string]Entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read image filesystem: %w", err)
		}
		p := path.Clean("/" + hdr.Name)
		e := Entry{Path: p, Mode: headerMode(hdr), UID: hdr.Uid, GID: hdr.Gid}
		switch hdr.Typeflag {
		case tar.TypeDir:
			e.Kind = KindDir
		case tar.TypeSymlink:
			e.Kind, e.Target = KindSymlink, hdr.Linkname
		case tar.TypeReg:
			e.Kind = KindFile
			if e.Data, err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("read %s: %w", p, err)
			}
		default:
			return nil, fmt.Errorf("%s: unsupported tar entry type %q", p, hdr.Typeflag)
		}
		out[p] = e
	}
}

func headerMode(hdr *tar.Header) fs.FileMode {
	m := fs.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
