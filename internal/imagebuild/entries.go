package imagebuild

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Kind is what an Entry is in the image's filesystem.
type Kind int

const (
	// KindFile is a regular file.
	KindFile Kind = iota
	// KindDir is a directory.
	KindDir
	// KindSymlink is a symbolic link.
	KindSymlink
)

func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "directory"
	case KindSymlink:
		return "symlink"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Entry is one file, directory or symlink of a layer. Build entries with File, HostFile,
// Dir, Symlink or HostTree, and change the owner with Owner.
type Entry struct {
	// Path is the absolute path in the image ("/etc/passwd").
	Path string
	Kind Kind
	// Mode holds the permission bits, with the setuid, setgid and sticky bits
	// (fs.ModeSetuid, fs.ModeSetgid, fs.ModeSticky). Symlinks are always 0777.
	Mode fs.FileMode
	// UID and GID are the numeric owner; names are not recorded.
	UID, GID int
	// Data is a file's content; when nil and Source is set, the content is read from the
	// host file Source when the layer is built.
	Data   []byte
	Source string
	// Target is a symlink's target.
	Target string
}

// File is a regular file with the given content, owned by root.
func File(imagePath string, data []byte, mode fs.FileMode) Entry {
	if data == nil {
		data = []byte{}
	}
	return Entry{Path: imagePath, Kind: KindFile, Mode: mode, Data: data}
}

// HostFile is a regular file whose content is read from the host file source when the
// layer is built, owned by root.
func HostFile(imagePath, source string, mode fs.FileMode) Entry {
	return Entry{Path: imagePath, Kind: KindFile, Mode: mode, Source: source}
}

// Dir is a directory, owned by root. Parents of every entry are added as 0755 root
// directories when a layer does not list them.
func Dir(imagePath string, mode fs.FileMode) Entry {
	return Entry{Path: imagePath, Kind: KindDir, Mode: mode}
}

// Symlink is a symbolic link at imagePath pointing to target, owned by root.
func Symlink(imagePath, target string) Entry {
	return Entry{Path: imagePath, Kind: KindSymlink, Mode: 0o777, Target: target}
}

// Owner returns the entry owned by uid:gid.
func (e Entry) Owner(uid, gid int) Entry {
	e.UID, e.GID = uid, gid
	return e
}

// HostTree lists the host directory source as entries under the image directory
// imageDir, recursively: the directory itself, its subdirectories (0755), regular files
// (0755 if the host file has any execute bit, otherwise 0644) and symlinks (their
// targets as they are). Every entry is owned by root, whatever the host says, so a
// checkout's umask and owner do not change the image. Other file types are an error.
func HostTree(imageDir, source string) ([]Entry, error) {
	var entries []Entry
	err := filepath.WalkDir(source, func(hostPath string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(source, hostPath)
		if err != nil {
			return err
		}
		imagePath := path.Join(imageDir, filepath.ToSlash(rel))
		if imagePath == "/" {
			return nil // the root directory is not an entry
		}
		switch t := d.Type(); {
		case t.IsDir():
			entries = append(entries, Dir(imagePath, 0o755))
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if info.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			entries = append(entries, HostFile(imagePath, hostPath, mode))
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(hostPath)
			if err != nil {
				return err
			}
			entries = append(entries, Symlink(imagePath, target))
		default:
			return fmt.Errorf("%s: unsupported file type %s", hostPath, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", source, err)
	}
	return entries, nil
}

// cleanPath checks that p is an absolute image path and returns it cleaned.
func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("image path %q is not absolute", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("image path %q names the root directory", p)
	}
	return c, nil
}
