package clockoffset

import (
	"testing"
	"time"
)

func TestWallTimeIsShiftedAndDurationsAreNot(t *testing.T) {
	c := Clock{Offset: -10 * time.Minute}
	before := time.Now()
	now := c.Now()
	if d := before.Sub(now.Round(0)); d < 10*time.Minute-time.Second || d > 10*time.Minute+time.Second {
		t.Fatalf("the wall time is %s behind, want 10m", d)
	}
	if d := c.Since(now); d < 0 || d > time.Second {
		t.Errorf("Since of its own reading = %s, want the small time elapsed", d)
	}
	// A time read elsewhere (no monotonic reading in common) is 10 minutes ahead.
	if d := c.Since(before.Round(0)); d > -10*time.Minute+time.Second || d < -10*time.Minute-time.Second {
		t.Errorf("Since of a foreign time = %s, want about -10m", d)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "")
	if _, d, err := FromEnv(); err != nil || d != 0 {
		t.Errorf("unset: %s, %v", d, err)
	}
	t.Setenv(EnvVar, "20s")
	if _, d, err := FromEnv(); err != nil || d != 20*time.Second {
		t.Errorf("20s: %s, %v", d, err)
	}
	t.Setenv(EnvVar, "soon")
	if _, _, err := FromEnv(); err == nil {
		t.Error("an invalid offset was accepted")
	}
}
