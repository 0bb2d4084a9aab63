// Package memlimit gives Go's garbage collector a soft memory limit below the
// container's memory limit, so that the collector works harder as the heap nears the
// limit instead of the kernel killing the process (GOMEMLIMIT, which Go does not derive
// from the container on its own, as it does GOMAXPROCS from the CPU limit).
package memlimit

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// unlimitedV1 is the smallest value cgroup v1's memory.limit_in_bytes reports for "no
// limit" (the largest page-aligned int64, 9223372036854771712, on every page size up to
// 64 KiB): anything this large is no limit a machine has.
const unlimitedV1 = int64(1) << 62

// Container returns the memory limit of the cgroup the process runs in, read below root
// (/sys/fs/cgroup in a container): cgroup v2's memory.max, else cgroup v1's
// memory/memory.limit_in_bytes. It returns 0 when the cgroup sets no limit or neither
// file exists (a process outside a container, or a cgroup not mounted), and an error when
// a file exists but does not hold a limit.
func Container(root string) (int64, error) {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		data, err := os.ReadFile(filepath.Join(root, f)) //nolint:gosec // G304: the cgroup filesystem the process runs in, not user input
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		s := strings.TrimSpace(string(data))
		if s == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s holds %q, not a memory limit", filepath.Join(root, f), s)
		}
		if n >= unlimitedV1 {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}

// Decision is what Set did, for the log.
type Decision struct {
	// Container is the container's memory limit in bytes, 0 for none.
	Container int64
	// Soft is the soft limit given to the garbage collector in bytes, 0 when Set left
	// Go's default (no limit) or the GOMEMLIMIT of the environment.
	Soft int64
	// Why says which of the cases applied.
	Why string
}

// Soft returns the soft limit for a container limit and a ratio in (0, 1]: the ratio of
// the limit, rounded down to a whole MiB.
func Soft(container int64, ratio float64) int64 {
	soft := int64(math.Floor(float64(container) * ratio))
	return soft &^ (1<<20 - 1)
}

// Set gives the garbage collector ratio of the container limit found below root as its
// soft limit, unless gomemlimit (the environment's GOMEMLIMIT) is set, which Go applied
// already and which wins, or ratio is 0, which turns this off.
func Set(root string, ratio float64, gomemlimit string) (Decision, error) {
	if ratio < 0 || ratio > 1 || math.IsNaN(ratio) {
		return Decision{}, fmt.Errorf("the ratio %v is not between 0 and 1", ratio)
	}
	if gomemlimit != "" {
		return Decision{Why: "GOMEMLIMIT=" + gomemlimit + " is set, and wins"}, nil
	}
	if ratio == 0 {
		return Decision{Why: "turned off (ratio 0)"}, nil
	}
	limit, err := Container(root)
	if err != nil {
		return Decision{}, err
	}
	if limit == 0 {
		return Decision{Why: "the container has no memory limit"}, nil
	}
	soft := Soft(limit, ratio)
	if soft <= 0 {
		return Decision{Container: limit, Why: "the container's limit is below 1 MiB at this ratio"}, nil
	}
	debug.SetMemoryLimit(soft)
	return Decision{Container: limit, Soft: soft, Why: fmt.Sprintf("%v of the container's memory limit", ratio)}, nil
}
