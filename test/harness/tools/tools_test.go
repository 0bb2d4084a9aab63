package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// binDir makes a tools directory holding the default set's kube-apiserver and kubelet and
// kube-1.29's kube-apiserver, and points the lookups at it.
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"kube-apiserver", "kubelet", "minio", "kube-1.29/kube-apiserver"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(tools.EnvBinDir, dir)
	return dir
}

func TestKubernetesBinariesComeFromTheSelectedVersionOnly(t *testing.T) {
	dir := binDir(t)
	for _, tc := range []struct {
		name, set, tool, want, err string
	}{
		{name: "the default version without a selection", tool: "kube-apiserver", want: "kube-apiserver"},
		{name: "the default version by its set's name", set: "kube", tool: "kube-apiserver", want: "kube-apiserver"},
		{name: "the selected version's binary", set: "kube-1.29", tool: "kube-apiserver", want: "kube-1.29/kube-apiserver"},
		{name: "no newer kubelet beside an old API server", set: "kube-1.29", tool: "kubelet",
			err: "PHALANKS_KUBE_TOOLS=kube-1.29 selects that Kubernetes version"},
		{name: "a version that was not built", set: "kube-1.31", tool: "kube-apiserver",
			err: "hack/tools/build.sh kube-1.31"},
		{name: "tools of no Kubernetes version", set: "kube-1.29", tool: "minio", want: "minio"},
		{name: "a set that is no kube set", set: "minio", tool: "kube-apiserver", err: "want the name of a versioned kube tool set"},
		{name: "a path for a set", set: "kube-../../etc", tool: "kube-apiserver", err: "want the name of a versioned kube tool set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tools.EnvKubeTools, tc.set)
			got, err := tools.Path(tc.tool)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Path(%q) = %q, %v; want an error containing %q", tc.tool, got, err, tc.err)
				}
				return
			}
			if err != nil || got != filepath.Join(dir, tc.want) {
				t.Fatalf("Path(%q) = %q, %v; want %q", tc.tool, got, err, filepath.Join(dir, tc.want))
			}
		})
	}
}

func TestKubeBinDirIsTheSelectedVersionsDirectory(t *testing.T) {
	dir := binDir(t)
	t.Setenv(tools.EnvKubeTools, "kube-1.29")
	if got, err := tools.KubeBinDir(); err != nil || got != filepath.Join(dir, "kube-1.29") {
		t.Fatalf("KubeBinDir() = %q, %v; want %q", got, err, filepath.Join(dir, "kube-1.29"))
	}
	t.Setenv(tools.EnvKubeTools, "")
	if got, err := tools.KubeBinDir(); err != nil || got != dir {
		t.Fatalf("KubeBinDir() = %q, %v; want %q", got, err, dir)
	}
}

// The version a running API server reports must be the one its tool set's go.mod pins:
// a stale link or another version's binary fails the suite instead of passing for it.
func TestCheckKubeVersionWantsTheVersionTheSetPins(t *testing.T) {
	for _, set := range []string{"", "kube-1.29"} {
		t.Run("set "+set, func(t *testing.T) {
			t.Setenv(tools.EnvKubeTools, set)
			want, name, err := tools.KubeWant()
			if err != nil {
				t.Fatal(err)
			}
			if set != "" && !strings.HasPrefix(want, "v1.29.") {
				t.Fatalf("KubeWant() = %q for %s; want a v1.29 release", want, name)
			}
			if err := tools.CheckKubeVersion(want); err != nil {
				t.Fatalf("CheckKubeVersion(%q): %v", want, err)
			}
			err = tools.CheckKubeVersion("v1.28.0")
			if err == nil || !strings.Contains(err.Error(), "hack/tools/build.sh "+name) {
				t.Fatalf("CheckKubeVersion(v1.28.0) = %v; want an error telling to rebuild %s", err, name)
			}
		})
	}
}

// A binary whose set a background build is making (build.sh --background left its
// marker) is waited for, through build.sh for that set; without a marker, a missing
// binary is an error at once.
func TestPathWaitsForABinaryABackgroundBuildIsMaking(t *testing.T) {
	dir := binDir(t)
	t.Setenv(tools.EnvKubeTools, "kube-1.29")
	for _, m := range []string{".building/promtool", "kube-1.29/.building/etcd"} {
		p := filepath.Join(dir, m)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		set := map[bool]string{true: "kube-1.29", false: "prometheus"}[strings.HasPrefix(m, "kube-1.29")]
		if err := os.WriteFile(p, []byte(set+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var built []string
	defer tools.SetBuildSet(func(set string) error {
		built = append(built, set)
		bin := map[string]string{"prometheus": "promtool", "kube-1.29": "kube-1.29/etcd"}[set]
		return os.WriteFile(filepath.Join(dir, bin), nil, 0o600)
	})()

	for tool, want := range map[string]string{"promtool": "promtool", "etcd": "kube-1.29/etcd"} {
		got, err := tools.Path(tool)
		if err != nil || got != filepath.Join(dir, want) {
			t.Errorf("Path(%q) = %q, %v; want %q after the background build", tool, got, err, filepath.Join(dir, want))
		}
	}
	if strings.Join(built, ",") != "prometheus,kube-1.29" && strings.Join(built, ",") != "kube-1.29,prometheus" {
		t.Errorf("build.sh ran for %v; want prometheus and kube-1.29 once each", built)
	}
	if _, err := tools.Path("kwok"); err == nil || !strings.Contains(err.Error(), "kwok not found") {
		t.Errorf("Path(kwok) without a marker = %v; want not found", err)
	}
}
