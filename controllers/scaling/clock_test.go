package scaling_test

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// stepClock runs at real speed from a chosen start, and can jump forward. Timers wait
// on its time: a jump fires every timer it passes at once, and the others keep waiting
// for the rest of their duration. Controllers therefore see requeues at the next
// transition happen when a test jumps to it, while retries with backoff keep working.
type stepClock struct {
	mu     sync.Mutex
	offset time.Duration
	timers map[*stepTimer]struct{}
}

var _ clock.WithTicker = &stepClock{}

// newStepClock returns a clock that reads start now.
func newStepClock(start time.Time) *stepClock {
	return &stepClock{offset: time.Until(start), timers: map[*stepTimer]struct{}{}}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset).Round(0)
}

func (c *stepClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// JumpTo moves the clock forward to t (never back) and fires the timers it passes.
func (c *stepClock) JumpTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := time.Until(t); d > c.offset {
		c.offset = d
	}
	now := time.Now().Add(c.offset)
	for tm := range c.timers {
		tm.arm(now)
	}
}

func (c *stepClock) NewTimer(d time.Duration) clock.Timer { return c.newTimer(d, 0) }

func (c *stepClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

func (c *stepClock) Sleep(d time.Duration) { <-c.After(d) }

func (c *stepClock) NewTicker(d time.Duration) clock.Ticker { return stepTicker{c.newTimer(d, d)} }

func (c *stepClock) Tick(d time.Duration) <-chan time.Time { return c.NewTicker(d).C() }

func (c *stepClock) newTimer(d, period time.Duration) *stepTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().Add(c.offset)
	t := &stepTimer{clock: c, ch: make(chan time.Time, 1), deadline: now.Add(d), period: period}
	c.timers[t] = struct{}{}
	t.arm(now)
	return t
}

// stepTimer is a timer or, with a period, a ticker on a stepClock.
type stepTimer struct {
	clock    *stepClock
	ch       chan time.Time
	deadline time.Time
	period   time.Duration
	real     *time.Timer
}

// arm (under the clock's lock) fires the timer if its deadline has passed, and
// otherwise waits the remaining time in real time.
func (t *stepTimer) arm(now time.Time) {
	if t.real != nil {
		t.real.Stop()
	}
	remaining := t.deadline.Sub(now)
	if remaining <= 0 {
		t.fire(now)
		return
	}
	t.real = time.AfterFunc(remaining, func() {
		t.clock.mu.Lock()
		defer t.clock.mu.Unlock()
		if _, active := t.clock.timers[t]; active {
			t.arm(time.Now().Add(t.clock.offset))
		}
	})
}

func (t *stepTimer) fire(now time.Time) {
	select {
	case t.ch <- now:
	default:
	}
	if t.period > 0 {
		t.deadline = now.Add(t.period)
		t.arm(now)
		return
	}
	delete(t.clock.timers, t)
}

func (t *stepTimer) C() <-chan time.Time { return t.ch }

func (t *stepTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, active := t.clock.timers[t]
	delete(t.clock.timers, t)
	if t.real != nil {
		t.real.Stop()
	}
	return active
}

func (t *stepTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, active := t.clock.timers[t]
	now := time.Now().Add(t.clock.offset)
	t.deadline = now.Add(d)
	t.clock.timers[t] = struct{}{}
	t.arm(now)
	return active
}

// stepTicker adapts a periodic stepTimer to clock.Ticker.
type stepTicker struct{ t *stepTimer }

func (k stepTicker) C() <-chan time.Time { return k.t.C() }

func (k stepTicker) Stop() { k.t.Stop() }
