package sharding

import (
	"context"
	"time"
)

// slotWork is the work on one slot: the contexts it runs under and how much of it runs.
type slotWork struct {
	// ctx ends when the slot is given up or the ownership lapses; cleanup only when the
	// ownership lapses. work is what Begin hands out: WorkContext's, or ctx.
	ctx, cleanup          context.Context
	cancel, cancelCleanup context.CancelFunc
	work                  context.Context
	// running counts the work begun and not ended.
	running int
	// quiet is when the last work on a slot given up ended (zero while it runs, or while
	// the slot is worked on).
	quiet time.Time
}

// Begin starts a piece of work on slot. It returns the context the work runs under,
// which ends when this member gives the slot up or its ownership lapses, and true; or
// false when this member does not work on the slot now. Every Begin that returned true
// must be followed by one End(slot) when the work ended: a slot given up stays claimed
// until then.
func (m *Member) Begin(slot int) (context.Context, bool) {
	m.mu.Lock()
	m.init()
	lapsed := m.expireIfDueLocked()
	owned := m.owned.Has(slot)
	var ctx context.Context
	if owned {
		w := &m.work[slot]
		w.running++
		ctx = w.work
	}
	m.mu.Unlock()
	m.logLapse(lapsed)
	return ctx, owned
}

// End ends a piece of work that Begin started on slot.
func (m *Member) End(slot int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &m.work[slot]
	w.running--
	if w.running == 0 && !m.owned.Has(slot) && (m.draining | m.lapsed).Has(slot) {
		m.quietLocked(slot, m.Clock.Now())
	}
}

// Holds reports whether this member may still act on slot: its ownership holds, and it
// works on the slot or gave it up with work still running (the slot is still claimed,
// so no one else started on it). Work under the slot's cleanup context checks it before
// each request it sends.
func (m *Member) Holds(slot int) bool {
	m.mu.Lock()
	m.init()
	lapsed := m.expireIfDueLocked()
	holds := (m.owned | m.draining).Has(slot)
	m.mu.Unlock()
	m.logLapse(lapsed)
	return holds
}

// Ownership is what a member works on at one instant.
type Ownership struct {
	// Slots are the slots worked on.
	Slots Set
	// Terms count, per slot, the times this member took it: a slot whose term differs
	// between two looks was given up (and its work stopped) in between.
	Terms [Slots]uint32
	// Changed is closed at the next change.
	Changed <-chan struct{}
}

// Ownership returns what this member works on now.
func (m *Member) Ownership() Ownership {
	m.mu.Lock()
	m.init()
	lapsed := m.expireIfDueLocked()
	o := Ownership{Slots: m.owned, Terms: m.terms, Changed: m.changed}
	m.mu.Unlock()
	m.logLapse(lapsed)
	return o
}

// openLocked makes the contexts of a slot this member takes (again): a new ctx under
// the slot's cleanup context, which lives on from a release (a canary still being
// deleted) but not from a lapse.
func (m *Member) openLocked(slot int) {
	w := &m.work[slot]
	if w.cleanup == nil || w.cleanup.Err() != nil {
		w.cleanup, w.cancelCleanup = context.WithCancel(context.Background())
	}
	w.ctx, w.cancel = context.WithCancel(w.cleanup)
	w.work = w.ctx
	if m.WorkContext != nil {
		w.work = m.WorkContext(slot, w.ctx, w.cleanup)
	}
	w.quiet = time.Time{}
	m.terms[slot]++
}

// stopLocked stops the work on a slot given up, and with lapse its cleanup as well.
func (m *Member) stopLocked(slot int, now time.Time, lapse bool) {
	w := &m.work[slot]
	if w.cancel != nil {
		w.cancel()
	}
	if lapse && w.cancelCleanup != nil {
		w.cancelCleanup()
	}
	if w.running == 0 && w.quiet.IsZero() {
		m.quietLocked(slot, now)
	}
}

// quietLocked records that the work on a slot given up ended at now, and steps again
// once the margin passed, to withdraw the claim.
func (m *Member) quietLocked(slot int, now time.Time) {
	m.work[slot].quiet = now
	m.Clock.AfterFunc(m.safetyMargin(), m.poke)
}

// poke makes Start step at once.
func (m *Member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// settleLocked stops claiming the slots given up whose work ended at least the margin
// ago: requests it sent have reached their endpoints.
func (m *Member) settleLocked(now time.Time) {
	for slot := range Slots {
		if !(m.draining | m.lapsed).Has(slot) {
			continue
		}
		if w := &m.work[slot]; w.running == 0 && !w.quiet.IsZero() && !now.Before(w.quiet.Add(m.safetyMargin())) {
			m.draining &^= 1 << uint(slot)
			m.lapsed &^= 1 << uint(slot)
		}
	}
}

// expireIfDueLocked ends the ownership if it lapsed by this member's clock: every slot
// worked on or draining has its work stopped, cleanup included, and stays claimed
// (lapsed) until that work ended; nothing pending starts. It returns the slots that
// were worked on. The expiry timer calls it on time; every look at the ownership calls
// it too, so a late timer (a process paused, a loaded machine) changes nothing.
func (m *Member) expireIfDueLocked() Set {
	if m.validUntil.IsZero() || m.validLocked() || (m.owned|m.draining|m.pending) == 0 {
		return 0
	}
	now := m.Clock.Now()
	for slot := range Slots {
		if (m.owned | m.draining).Has(slot) {
			m.stopLocked(slot, now, true)
		}
	}
	m.lapsed |= m.owned | m.draining
	m.draining, m.pending, m.publishedPending = 0, 0, 0
	return m.setOwnedLocked(0)
}

// logLapse reports a lapse of the ownership; call it without the lock.
func (m *Member) logLapse(old Set) {
	if old != 0 {
		m.Log.Info("shard ownership lapsed: the Lease was not renewed in time; stopped working on every slot",
			"slots", old.String())
	}
}

// armExpiryLocked makes the ownership end when it lapses, so running work is stopped
// on time even while a renewal hangs.
func (m *Member) armExpiryLocked() {
	if m.expiry != nil {
		m.expiry.Stop()
	}
	m.expiry = m.Clock.AfterFunc(m.validUntil.Sub(m.Clock.Now()), m.expire)
}

func (m *Member) stopExpiry() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.expiry != nil {
		m.expiry.Stop()
	}
}

// expire ends the ownership if it lapsed (a renewal may have come first). It takes
// only the member's lock, which nothing holds while it waits.
func (m *Member) expire() {
	m.mu.Lock()
	lapsed := m.expireIfDueLocked()
	m.mu.Unlock()
	m.logLapse(lapsed)
}

// settlePoll is how often leave looks at the work of the slots it gave up.
const settlePoll = 5 * time.Millisecond

// awaitSettled waits until every slot given up stopped being claimed, or ctx ends, and
// reports whether they did.
func (m *Member) awaitSettled(ctx context.Context) bool {
	for {
		m.mu.Lock()
		m.settleLocked(m.Clock.Now())
		settled := m.draining|m.lapsed == 0
		m.mu.Unlock()
		if settled {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(settlePoll):
		}
	}
}
