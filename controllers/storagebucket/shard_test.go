package storagebucket

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type requestValue struct{}

// A pass's context ends with its slot, not with the request's context, carries the
// request's values, and a context derived from it (the probe's timeout) is registered
// with the slot's cancelation itself: no goroutine per probe waits on the slot.
func TestPassContextEndsWithItsSlotAndKeepsTheRequestsValues(t *testing.T) {
	const slot = 7
	// The slots' contexts, as the ring member makes them when it takes a slot.
	slotContext := workContext(func(int) bool { return true })
	slotCtx, giveUp := context.WithCancel(context.Background())
	otherCtx, giveUpOther := context.WithCancel(context.Background())
	defer giveUpOther()
	req, cancelReq := context.WithCancel(context.WithValue(t.Context(), requestValue{}, "logger"))
	pass := passContext{Context: slotContext(slot, slotCtx, context.Background()), req: req}
	other := passContext{Context: slotContext(slot+1, otherCtx, context.Background()), req: req}

	if got := pass.Value(requestValue{}); got != "logger" {
		t.Errorf("the pass's context lost the request's value: %v", got)
	}
	cancelReq()
	if pass.Err() != nil {
		t.Fatalf("the pass ended with the request's context: %v", pass.Err())
	}

	before := runtime.NumGoroutine()
	const children = 500
	cancels := make([]context.CancelFunc, 0, children)
	var probe context.Context
	for range children {
		var cancel context.CancelFunc
		probe, cancel = context.WithTimeout(pass, time.Hour)
		cancels = append(cancels, cancel)
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	if n := runtime.NumGoroutine() - before; n > children/10 {
		t.Errorf("%d contexts derived from a pass started %d goroutines: they are not registered with the slot's cancelation", children, n)
	}

	giveUp() // the slot is given up
	select {
	case <-probe.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a probe's context outlived its slot")
	}
	if !errors.Is(probe.Err(), context.Canceled) || !stopped(pass) {
		t.Errorf("the probe ended with %v, the pass with %v; want both canceled", probe.Err(), pass.Err())
	}
	if other.Err() != nil {
		t.Errorf("a pass of another slot ended: %v", other.Err())
	}
}
