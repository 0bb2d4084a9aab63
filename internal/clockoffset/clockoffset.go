// Package clockoffset is a real clock shifted by a fixed offset: the wall time it
// reads is off, the durations it measures are not (it keeps Go's monotonic reading).
// It stands in for a node whose clock is wrong, for fault-injection tests of code that
// takes its clock as a parameter; the manager reads an offset from the environment
// (EnvVar) for the same purpose.
package clockoffset

import (
	"fmt"
	"os"
	"time"

	"k8s.io/utils/clock"
)

// EnvVar names the environment variable the manager reads its clock offset from: a
// Go duration such as "-10m" or "20s". For fault-injection tests only.
const EnvVar = "PHALANKS_TEST_CLOCK_OFFSET"

// Clock is the real clock plus Offset.
type Clock struct {
	clock.RealClock
	Offset time.Duration
}

var _ clock.WithTickerAndDelayedExecution = Clock{}

// Now returns the shifted time, with its monotonic reading.
func (c Clock) Now() time.Time { return time.Now().Add(c.Offset) }

// Since returns the time elapsed since t on this clock: exact for a t this clock read
// (the monotonic readings are compared), shifted by Offset for a t from elsewhere.
func (c Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// FromEnv returns the clock EnvVar asks for: the real clock when it is unset.
func FromEnv() (clock.WithTickerAndDelayedExecution, time.Duration, error) {
	v := os.Getenv(EnvVar)
	if v == "" {
		return clock.RealClock{}, 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", EnvVar, err)
	}
	return Clock{Offset: d}, d, nil
}
