package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// cgroup writes a cgroup tree below a temporary root: files maps a path below the root
// to its content.
func cgroup(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestContainerReadsEitherCgroupVersion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		err   string
	}{
		{"v2, a limit", map[string]string{"memory.max": "268435456\n"}, 256 << 20, ""},
		{"v2, no limit", map[string]string{"memory.max": "max\n"}, 0, ""},
		{"v1, a limit", map[string]string{"memory/memory.limit_in_bytes": "268435456\n"}, 256 << 20, ""},
		// What this project's real node (cgroup v1) reports for a container without a
		// limit, and the largest value on 64 KiB pages.
		{"v1, no limit", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, ""},
		{"v1, no limit on 64 KiB pages", map[string]string{"memory/memory.limit_in_bytes": "9223372036854710272"}, 0, ""},
		{"v2 wins over a v1 file beside it", map[string]string{"memory.max": "1073741824", "memory/memory.limit_in_bytes": "268435456"}, 1 << 30, ""},
		{"no cgroup", map[string]string{"cpu.max": "max 100000"}, 0, ""},
		{"garbage", map[string]string{"memory.max": "lots"}, 0, `holds "lots"`},
		{"negative", map[string]string{"memory/memory.limit_in_bytes": "-1"}, 0, `holds "-1"`},
		{"zero", map[string]string{"memory.max": "0"}, 0, `holds "0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Container(cgroup(t, tc.files))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSoftIsTheRatioInWholeMiB(t *testing.T) {
	// The manager's default: 256 MiB at 0.9 is 230.4 MiB, so 230 MiB.
	if got := Soft(256<<20, 0.9); got != 230<<20 {
		t.Errorf("Soft(256 MiB, 0.9) = %d, want %d", got, 230<<20)
	}
	if got := Soft(1<<30, 1); got != 1<<30 {
		t.Errorf("Soft(1 GiB, 1) = %d, want %d", got, 1<<30)
	}
	if got := Soft(1<<20, 0.5); got != 0 {
		t.Errorf("Soft(1 MiB, 0.5) = %d, want 0", got)
	}
}

// keepLimit restores the process's soft limit after a test that sets it.
func keepLimit(t *testing.T) {
	t.Helper()
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)
}

func TestSetGivesTheCollectorTheRatioOfTheLimit(t *testing.T) {
	keepLimit(t)
	d, err := Set(cgroup(t, map[string]string{"memory/memory.limit_in_bytes": "268435456"}), 0.9, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Container != 256<<20 || d.Soft != 230<<20 {
		t.Errorf("decision %+v, want a container limit of 256 MiB and a soft one of 230 MiB", d)
	}
	if got := debug.SetMemoryLimit(-1); got != 230<<20 {
		t.Errorf("the runtime's soft limit is %d, want %d", got, 230<<20)
	}
}

func TestSetLeavesTheLimitAlone(t *testing.T) {
	limited := map[string]string{"memory.max": "268435456"}
	for _, tc := range []struct {
		name       string
		files      map[string]string
		ratio      float64
		gomemlimit string
		why        string
	}{
		{"GOMEMLIMIT set by the user", limited, 0.9, "200MiB", "GOMEMLIMIT=200MiB"},
		{"turned off", limited, 0, "", "turned off"},
		{"no container limit", map[string]string{"memory.max": "max"}, 0.9, "", "no memory limit"},
		{"outside a container", nil, 0.9, "", "no memory limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keepLimit(t)
			d, err := Set(cgroup(t, tc.files), tc.ratio, tc.gomemlimit)
			if err != nil {
				t.Fatal(err)
			}
			if d.Soft != 0 || !strings.Contains(d.Why, tc.why) {
				t.Errorf("decision %+v, want no soft limit because %q", d, tc.why)
			}
			if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
				t.Errorf("the runtime's soft limit changed to %d", got)
			}
		})
	}
}

func TestSetRefusesARatioOutOfRange(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5, math.NaN()} {
		if _, err := Set(t.TempDir(), r, ""); err == nil {
			t.Errorf("ratio %v accepted", r)
		}
	}
}
