package minio

import (
	"path/filepath"

	"github.com/phalanks/phalanks-operator/test/harness/process"
)

// versityGW is the process of a versitygw serving s: the POSIX backend over a directory
// of s's own, with bucket versioning (its versions in a directory beside the data), the
// root key pair of s, and s's region, which it enforces on every signed request.
func versityGW(bin string, s *Server, certsDir string) *process.Process {
	args := []string{"--port", s.Endpoint, "--region", s.Region, "--quiet"}
	if s.opts.TLS {
		args = append(args, "--cert", filepath.Join(certsDir, "public.crt"), "--key", filepath.Join(certsDir, "private.key"))
	}
	args = append(args, "posix", "--versioning-dir", filepath.Join(s.opts.Dir, "versions"), filepath.Join(s.opts.Dir, "data"))
	return &process.Process{
		Name: "versitygw",
		Path: bin,
		Args: args,
		Env: []string{
			"ROOT_ACCESS_KEY=" + s.AccessKey,
			"ROOT_SECRET_KEY=" + s.SecretKey,
			"HOME=" + s.opts.Dir,
		},
		LogPath: filepath.Join(s.opts.Dir, "versitygw.log"),
	}
}
