//go:build !linux

package scaling

import "testing"

// loopWithCPU runs f in the benchmark's loop; the CPU time per call is measured on
// Linux only.
func loopWithCPU(b *testing.B, f func()) {
	b.Helper()
	for b.Loop() {
		f()
	}
}
