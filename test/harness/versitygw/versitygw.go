// Package versitygw runs versitygw, an S3 gateway over a POSIX directory, in the place of
// the MinIO that test/harness/minio runs: the same minio.Server (address, generated key
// pair, region, data directory, TLS, stop and restart), another S3 implementation. A
// suite picks it with PHALANKS_TEST_S3=versitygw (see StartForTest).
package versitygw

import (
	"os"
	"path/filepath"

	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Env names the environment variable that makes StartForTest start versitygw.
const Env = "PHALANKS_TEST_S3"

// Server is versitygw as a minio.Implementation: the POSIX backend over the server's
// data directory, with bucket versioning (the versions in a directory beside it), the
// root key pair, and the region, which it enforces on every signed request. It has no
// IAM subsystem and no STS.
type Server struct{}

// IAM implements minio.Implementation.
func (Server) IAM() bool { return false }

// Process implements minio.Implementation.
func (Server) Process(s *minio.Server, o minio.Options, certsDir string) (*process.Process, error) {
	bin, err := tools.Path("versitygw")
	if err != nil {
		return nil, err
	}
	data, versions := filepath.Join(o.Dir, "data"), filepath.Join(o.Dir, "versions")
	for _, d := range []string{data, versions} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	args := []string{"--port", s.Endpoint, "--region", s.Region, "--quiet"}
	if o.TLS {
		args = append(args, "--cert", filepath.Join(certsDir, "public.crt"), "--key", filepath.Join(certsDir, "private.key"))
	}
	return &process.Process{
		Name: "versitygw",
		Path: bin,
		Args: append(args, "posix", "--versioning-dir", versions, data),
		Env: []string{
			"ROOT_ACCESS_KEY=" + s.AccessKey,
			"ROOT_SECRET_KEY=" + s.SecretKey,
			"HOME=" + o.Dir,
		},
		LogPath: filepath.Join(o.Dir, "versitygw.log"),
	}, nil
}

// StartForTest starts versitygw when PHALANKS_TEST_S3 is versitygw, else MinIO, in a
// test's temporary directory, and stops it when the test ends.
func StartForTest(t minio.TB, o minio.Options) *minio.Server {
	t.Helper()
	switch v := os.Getenv(Env); v {
	case "", "minio":
	case "versitygw":
		o.Implementation = Server{}
	default:
		t.Fatalf("%s=%q: want minio or versitygw", Env, v)
	}
	return minio.StartForTest(t, o)
}
