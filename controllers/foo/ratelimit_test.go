package foo

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func request(i int) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("foo-%d", i)}}
}

func TestRetriesOfOneFooBackOffFrom5msTo1000s(t *testing.T) {
	rl := newRateLimiter()
	req := request(0)
	for i, want := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
		if got := rl.When(req); got != want {
			t.Errorf("failure %d: delay %s, want %s", i+1, got, want)
		}
	}
	for range 40 {
		rl.When(req)
	}
	if got := rl.When(req); got != 1000*time.Second {
		t.Errorf("after many failures: delay %s, want the 1000s cap", got)
	}
	rl.Forget(req)
	if got := rl.When(req); got != 5*time.Millisecond {
		t.Errorf("after Forget: delay %s, want 5ms again", got)
	}
}

func TestRetriesOfAllFoosShareA50QPSBucketWithBurst300(t *testing.T) {
	rl := newRateLimiter()
	for i := range 300 {
		if got := rl.When(request(i)); got != 5*time.Millisecond {
			t.Fatalf("retry %d within the burst: delay %s, want the per-item 5ms", i+1, got)
		}
	}
	// Past the burst, each retry waits for a token: 1/50 s more than the one before
	// (less whatever refilled while the loop ran).
	if got := rl.When(request(300)); got < 10*time.Millisecond || got > 20*time.Millisecond {
		t.Errorf("retry 301: delay %s, want about 20ms", got)
	}
	for i := 301; i < 399; i++ {
		rl.When(request(i))
	}
	if got := rl.When(request(399)); got < 1900*time.Millisecond || got > 2*time.Second {
		t.Errorf("retry 400: delay %s, want about 2s (100 retries past the burst at 50/s)", got)
	}
}
