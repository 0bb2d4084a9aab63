package scaling

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// loopWithCPU runs f in the benchmark's loop and reports, besides the wall time, the
// CPU time of the thread that ran it per call: on a shared machine the wall time follows
// the load, the CPU time the code.
func loopWithCPU(b *testing.B, f func()) {
	b.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &before); err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		f()
		n++
	}
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &after); err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/op")
}
