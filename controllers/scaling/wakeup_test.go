package scaling

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestWakeupsQueueEachWorkloadAtItsTransitionOnTheInjectedClock: moving the clock, not
// waiting, brings a workload back into the queue; a later schedule replaces an earlier
// one, and a cancelled one never comes.
func TestWakeupsQueueEachWorkloadAtItsTransitionOnTheInjectedClock(t *testing.T) {
	start := time.Date(2024, 6, 5, 17, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	w := newWakeups(clock)
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx, queue); err != nil {
		t.Fatal(err)
	}
	req := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: name}}
	}
	w.at(req("web"), start.Add(time.Hour))
	w.at(req("db"), start.Add(2*time.Hour))
	w.at(req("db"), start.Add(3*time.Hour)) // the schedule changed
	w.at(req("gone"), start.Add(time.Hour))
	w.at(req("gone"), time.Time{}) // deleted

	next := func() reconcile.Request {
		t.Helper()
		got := make(chan reconcile.Request, 1)
		go func() {
			r, _ := queue.Get()
			queue.Done(r)
			got <- r
		}()
		select {
		case r := <-got:
			return r
		case <-time.After(30 * time.Second):
			t.Fatal("nothing queued")
			return reconcile.Request{}
		}
	}
	waitForTimer := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !clock.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("the wake-ups wait on no timer")
			}
			time.Sleep(time.Millisecond)
		}
	}

	waitForTimer()
	if queue.Len() != 0 {
		t.Fatalf("%d queued before any transition", queue.Len())
	}
	clock.Step(time.Hour)
	if r := next(); r != req("web") {
		t.Errorf("queued %v at the first transition, want web", r)
	}
	waitForTimer()
	clock.Step(time.Hour)
	waitForTimer()
	if queue.Len() != 0 {
		t.Errorf("db queued at its superseded time")
	}
	clock.Step(time.Hour)
	if r := next(); r != req("db") {
		t.Errorf("queued %v, want db at its new time", r)
	}
	if queue.Len() != 0 {
		t.Errorf("%d queued after every transition was served", queue.Len())
	}
}

// passingClock is a fake clock that passes the next transition while the wake-ups make
// their first timer, as a test stepping the clock can at that moment.
type passingClock struct {
	*clocktesting.FakeClock
	once sync.Once
	by   time.Duration
}

func (c *passingClock) NewTimer(d time.Duration) clock.Timer {
	c.once.Do(func() { c.Step(c.by) })
	return c.FakeClock.NewTimer(d)
}

// TestWakeupsFireATransitionTheClockPassedWhileTheTimerWasMade: the workload is queued
// at once, not after a timer set from a reading of the clock that is already past.
func TestWakeupsFireATransitionTheClockPassedWhileTheTimerWasMade(t *testing.T) {
	start := time.Date(2024, 6, 5, 17, 0, 0, 0, time.UTC)
	w := newWakeups(&passingClock{FakeClock: clocktesting.NewFakeClock(start), by: time.Hour})
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	web := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "web"}}
	w.at(web, start.Add(time.Hour))
	<-w.changed // as if the loop had seen the change already: only the timer is left to wake it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx, queue); err != nil {
		t.Fatal(err)
	}
	got := make(chan reconcile.Request, 1)
	go func() {
		r, _ := queue.Get()
		got <- r
	}()
	select {
	case r := <-got:
		if r != web {
			t.Errorf("queued %v, want %v", r, web)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the transition the clock passed was not queued")
	}
}
