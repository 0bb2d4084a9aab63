package storagebucket

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func key(n int) bucketRef {
	return bucketRef{UID: types.UID(fmt.Sprintf("uid-%d", n)), Key: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("b%d", n)}}
}

func keysOf(ds []dueBucket) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Key.Name)
	}
	return out
}

func TestSchedulerPopsOnlyWhatIsDueEarliestFirst(t *testing.T) {
	s := newScheduler()
	s.Schedule(key(3), t0.Add(3*time.Second))
	s.Schedule(key(1), t0.Add(1*time.Second))
	s.Schedule(key(2), t0.Add(2*time.Second))
	if got := keysOf(s.PopDue(t0, nil)); len(got) != 0 {
		t.Fatalf("popped %v before anything was due", got)
	}
	if got := fmt.Sprint(keysOf(s.PopDue(t0.Add(2*time.Second), nil))); got != "[b1 b2]" {
		t.Errorf("popped %s, want [b1 b2]", got)
	}
	if got := keysOf(s.PopDue(t0.Add(2*time.Second), nil)); len(got) != 0 {
		t.Errorf("a dispatched bucket was popped again: %v", got)
	}
	if due, ok := s.Due(key(1).UID); !ok || !due.Equal(t0.Add(time.Second)) {
		t.Errorf("a dispatched bucket keeps its due time while in flight, got %v %v", due, ok)
	}
}

func TestSchedulerArmsADispatchedBucketAgain(t *testing.T) {
	s := newScheduler()
	s.Schedule(key(1), t0)
	s.PopDue(t0, nil)
	s.Arm(key(1).UID)
	if got := keysOf(s.PopDue(t0, nil)); fmt.Sprint(got) != "[b1]" {
		t.Errorf("re-armed bucket not dispatched again: %v", got)
	}
	s.Schedule(key(2), t0.Add(time.Hour))
	s.Arm(key(2).UID) // already armed: no duplicate
	if got := keysOf(s.PopDue(t0.Add(time.Hour), nil)); fmt.Sprint(got) != "[b2]" {
		t.Errorf("arming an armed bucket duplicated it: %v", got)
	}
	s.Arm(key(9).UID) // unknown: nothing happens
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2", s.Len())
	}
}

func TestSchedulerReschedulesInPlace(t *testing.T) {
	s := newScheduler()
	s.Schedule(key(1), t0.Add(time.Hour))
	s.Schedule(key(2), t0.Add(2*time.Hour))
	s.Schedule(key(2), t0.Add(time.Minute))
	if got := keysOf(s.PopDue(t0.Add(time.Minute), nil)); fmt.Sprint(got) != "[b2]" {
		t.Errorf("moving a due time earlier did not take effect: %v", got)
	}
	s.Forget(key(1).UID)
	if got := keysOf(s.PopDue(t0.Add(24*time.Hour), nil)); len(got) != 0 {
		t.Errorf("a forgotten bucket was dispatched: %v", got)
	}
	if _, ok := s.Due(key(1).UID); ok {
		t.Error("a forgotten bucket is still scheduled")
	}
}

func TestTriggerNowMakesBucketsDueAndWakesTheTicker(t *testing.T) {
	s := newScheduler()
	s.Schedule(key(1), t0.Add(time.Hour))
	s.TriggerNow(t0, key(1), key(2))
	select {
	case <-s.kick:
	default:
		t.Fatal("the ticker was not woken")
	}
	got := keysOf(s.PopDue(t0, nil))
	sort.Strings(got)
	if fmt.Sprint(got) != "[b1 b2]" {
		t.Errorf("popped %v, want both triggered buckets", got)
	}
	s.TriggerNow(t0) // nothing to trigger: no wake-up
	select {
	case <-s.kick:
		t.Error("woke the ticker for nothing")
	default:
	}
}

func TestNextDueFollowsTheBucketsGrid(t *testing.T) {
	const interval = 30 * time.Second
	uid := types.UID("4b0c0b1e-2f0d-4a5e-9c43-0d6b7a1f0001")
	first := nextDue(uid, interval, t0)
	if !first.After(t0) || first.Sub(t0) > interval {
		t.Fatalf("next due %v is not within one interval after %v", first, t0)
	}
	if got := nextDue(uid, interval, first); !got.Equal(first.Add(interval)) {
		t.Errorf("probing on time at %v gives %v, want one interval later", first, got)
	}
	late := first.Add(7 * time.Second)
	if got := nextDue(uid, interval, late); !got.Equal(first.Add(interval)) {
		t.Errorf("a late probe moved the grid: %v, want %v", got, first.Add(interval))
	}
	if got := nextDue(uid, interval, first.Add(-time.Nanosecond)); !got.Equal(first) {
		t.Errorf("just before a grid point the next due is %v, want %v", got, first)
	}
}

func TestNextDueSpreadsManyBucketsEvenly(t *testing.T) {
	const interval, n, slots = 30 * time.Second, 5000, 30
	counts := make([]int, slots)
	for i := range n {
		d := nextDue(types.UID(fmt.Sprintf("uid-%05d-%x", i, i*7919)), interval, t0)
		counts[int(d.Sub(t0)/time.Second)%slots]++
	}
	for s, c := range counts {
		if c < n/slots/2 || c > n/slots*2 {
			t.Errorf("second %d of the interval holds %d of %d buckets; want about %d", s, c, n, n/slots)
		}
	}
}

func bucket(gen int64, probed bool) *phalanksv1beta1.StorageBucket {
	sb := &phalanksv1beta1.StorageBucket{}
	sb.Generation = gen
	if probed {
		sb.Status.ObservedGeneration = gen
		sb.Status.LastProbeTime = &metav1.Time{Time: t0.Add(-time.Hour)}
	}
	return sb
}

func TestDecideProbe(t *testing.T) {
	known := &bucketState{generation: 2, fingerprint: fingerprint{adopt: "fp"}}
	for name, tc := range map[string]struct {
		sb        *phalanksv1beta1.StorageBucket
		st        *bucketState
		fp        string
		due       time.Time
		scheduled bool
		want      probeCause
	}{
		"a new bucket is probed at once":                          {sb: bucket(1, false), want: causeNew},
		"an edited bucket never probed for its generation is new": {sb: func() *phalanksv1beta1.StorageBucket { b := bucket(2, true); b.Generation = 3; return b }(), want: causeNew},
		"after a restart a probed bucket resumes on its grid":     {sb: bucket(2, true), want: causeResume},
		"after a restart a resumed bucket waits for its due time": {sb: bucket(2, true), due: t0.Add(time.Second), scheduled: true, want: causeNone},
		"after a restart a resumed bucket is probed when due":     {sb: bucket(2, true), due: t0, scheduled: true, want: causeSchedule},
		"a spec change is probed at once":                         {sb: bucket(3, true), st: known, fp: "fp", due: t0.Add(time.Hour), scheduled: true, want: causeSpec},
		"a changed Secret or CA is probed at once":                {sb: bucket(2, true), st: known, fp: "fp2", due: t0.Add(time.Hour), scheduled: true, want: causeInputs},
		"a due bucket is probed":                                  {sb: bucket(2, true), st: known, fp: "fp", due: t0.Add(-time.Second), scheduled: true, want: causeSchedule},
		"a bucket that is not due is not probed":                  {sb: bucket(2, true), st: known, fp: "fp", due: t0.Add(time.Second), scheduled: true, want: causeNone},
	} {
		t.Run(name, func(t *testing.T) {
			if got := decideProbe(tc.sb, tc.st, fingerprint{adopt: tc.fp}, tc.due, tc.scheduled, t0); got != tc.want {
				t.Errorf("decideProbe = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTickerDispatchesDueBucketsAndNeverBlocksShutdown(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := newScheduler()
	events := make(chan event.TypedGenericEvent[dueBatch]) // unbuffered, never read below
	tk := &ticker{sched: s, events: events, period: time.Second, clock: clk}
	s.Schedule(key(1), t0)
	ctx, cancel := contextWithCancel(t)
	done := make(chan error)
	go func() { done <- tk.Start(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ticker blocked shutdown on a channel nobody reads")
	}
}

func TestTickerSendsOnlyWhatIsDueAndWakesAtTheNextDueTime(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := newScheduler()
	events := make(chan event.TypedGenericEvent[dueBatch], 10)
	tk := &ticker{sched: s, events: events, period: time.Minute, clock: clk}
	s.Schedule(key(1), t0)
	s.Schedule(key(2), t0.Add(1500*time.Millisecond))
	ctx, cancel := contextWithCancel(t)
	go func() { _ = tk.Start(ctx) }()
	defer cancel()
	select {
	case e := <-events:
		if fmt.Sprint(e.Object) != fmt.Sprint(dueBatch{scheduled: []reconcile.Request{{NamespacedName: key(1).Key}}}) {
			t.Fatalf("sent %+v, want the bucket due now", e.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the bucket due now was not sent")
	}
	// The next bucket is sent when its due time comes, not a period later and not before.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(1499 * time.Millisecond)
	select {
	case e := <-events:
		t.Fatalf("sent %+v a millisecond early", e.Object)
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Millisecond)
	select {
	case e := <-events:
		if fmt.Sprint(e.Object) != fmt.Sprint(dueBatch{scheduled: []reconcile.Request{{NamespacedName: key(2).Key}}}) {
			t.Errorf("sent %+v, want the bucket due 1.5 s later", e.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the bucket due 1.5 s later was not sent at its due time")
	}
}

// In a steady state the due times are spread (each bucket has its own phase): the
// ticker waits its gather past the first due time, so that the buckets due meanwhile
// share the wake-up, and never sends a bucket before its due time. A kick sends what
// is due at once.
func TestTickerGathersTheBucketsDueShortlyAfterTheFirst(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := newScheduler()
	events := make(chan event.TypedGenericEvent[dueBatch], 10)
	tk := &ticker{sched: s, events: events, period: time.Minute, gather: 20 * time.Millisecond, clock: clk}
	for i, at := range []time.Duration{100, 105, 119, 125} {
		s.Schedule(key(i), t0.Add(at*time.Millisecond))
	}
	ctx, cancel := contextWithCancel(t)
	go func() { _ = tk.Start(ctx) }()
	defer cancel()
	step := func(d time.Duration) {
		t.Helper()
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(d)
	}
	sent := func(want ...int) {
		t.Helper()
		var reqs []reconcile.Request
		for _, i := range want {
			reqs = append(reqs, reconcile.Request{NamespacedName: key(i).Key})
		}
		select {
		case e := <-events:
			if fmt.Sprint(e.Object.scheduled) != fmt.Sprint(reqs) {
				t.Fatalf("at %v the ticker sent %v, want %v", clk.Now().Sub(t0), e.Object.scheduled, reqs)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("at %v the ticker sent nothing, want %v", clk.Now().Sub(t0), reqs)
		}
	}
	quiet := func() {
		t.Helper()
		select {
		case e := <-events:
			t.Fatalf("at %v the ticker sent %v", clk.Now().Sub(t0), e.Object)
		case <-time.After(50 * time.Millisecond):
		}
	}
	step(119 * time.Millisecond) // the first bucket is due since 19 ms
	quiet()
	step(time.Millisecond) // 20 ms past the first due time: the three due by now, not the fourth
	sent(0, 1, 2)
	step(20 * time.Millisecond) // 15 ms past the fourth's
	quiet()
	s.TriggerNow(clk.Now(), key(9)) // due now: at once, with the fourth, due 15 ms ago
	sent(3, 9)
	step(time.Hour)
	quiet()
}

// Whatever a wake-up finds due crosses the channel as one event, earliest first: the
// channel source's goroutines and the queue's add buffer are paid once per wake-up, not
// once per bucket (the capacity benchmark makes 5,000 buckets due at once).
func TestTickerSendsAWakeUpsDueBucketsAsOneEvent(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := newScheduler()
	const n = 1000
	events := make(chan event.TypedGenericEvent[dueBatch], 2*n) // room for one event per bucket
	var dispatched []int
	tk := &ticker{sched: s, events: events, period: time.Minute, clock: clk, onDispatch: func(n int) { dispatched = append(dispatched, n) }}
	for i := range n {
		s.Schedule(key(i), t0.Add(-time.Duration(n-i)*time.Millisecond))
	}
	s.Resume(key(n), t0)
	tk.dispatch(t.Context())
	if len(events) != 1 {
		t.Fatalf("the wake-up sent %d events, want one", len(events))
	}
	batch := (<-events).Object
	if len(batch.scheduled) != n || fmt.Sprint(dispatched) != fmt.Sprint([]int{n + 1}) {
		t.Fatalf("the event holds %d scheduled buckets (dispatched %v), want %d", len(batch.scheduled), dispatched, n)
	}
	for i, req := range batch.scheduled {
		if req.NamespacedName != key(i).Key {
			t.Fatalf("scheduled bucket %d of the event is %s, want %s, earliest first", i, req, key(i).Key)
		}
	}
	if fmt.Sprint(batch.resumed) != fmt.Sprint([]reconcile.Request{{NamespacedName: key(n).Key}}) {
		t.Errorf("the event resumes %v, want %s", batch.resumed, key(n).Key)
	}
	tk.dispatch(t.Context())
	if len(events) != 0 {
		t.Errorf("a wake-up with nothing due sent %d events", len(events))
	}
}

func TestDueHandlerEnqueuesAtOnceBelowEveryEditAndResumesLast(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := dueHandler()
	h.Generic(t.Context(), event.TypedGenericEvent[dueBatch]{Object: dueBatch{
		scheduled: []reconcile.Request{{NamespacedName: key(1).Key}, {NamespacedName: key(4).Key}},
		resumed:   []reconcile.Request{{NamespacedName: key(3).Key}},
	}}, q)
	// A user's edit arrives later but at normal priority: it is served first.
	q.Add(reconcile.Request{NamespacedName: key(2).Key})
	if n := q.Len(); n != 4 { // Len flushes the add buffer, so all are in before the first Get
		t.Fatalf("queue holds %d ready items, want 4", n)
	}
	var got []string
	for range 4 {
		req, prio, _ := q.GetWithPriority()
		got = append(got, fmt.Sprintf("%s(%d)", req.Name, prio))
		q.Done(req)
	}
	want := []string{"b2(0)", fmt.Sprintf("b1(%d)", schedulePriority), fmt.Sprintf("b4(%d)", schedulePriority), fmt.Sprintf("b3(%d)", resumePriority)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("served %v, want the edit, then the due buckets earliest first, then the resumed one: %v", got, want)
	}
	var _ workqueue.TypedRateLimitingInterface[reconcile.Request] = q
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}

func TestSchedulerKeysBucketsByUID(t *testing.T) {
	s := newScheduler()
	old, renewed := key(1), key(1)
	renewed.UID = "uid-1-recreated"
	s.Schedule(old, t0.Add(time.Hour))
	if _, ok := s.Due(renewed.UID); ok {
		t.Error("a StorageBucket re-created under the same name inherits its predecessor's schedule")
	}
	s.Schedule(renewed, t0)
	if got := s.UIDsOf(old.Key); len(got) != 2 {
		t.Errorf("UIDsOf(%s) = %v, want both objects", old.Key, got)
	}
	s.Forget(old.UID)
	if got := s.PopDue(t0.Add(2*time.Hour), nil); len(got) != 1 || got[0].UID != renewed.UID {
		t.Errorf("popped %+v, want only the new object", got)
	}
}
