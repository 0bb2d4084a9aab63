package schedule

import (
	"math/bits"
	"sort"
	"time"
)

const (
	minutesPerDay  = 24 * 60
	minutesPerWeek = 7 * minutesPerDay
)

// weekly is a recurring element: the minutes of the week, on the wall clock of its zone,
// that it covers. Minute 0 is Monday 00:00.
type weekly struct {
	loc     *time.Location
	minutes [minutesPerWeek/64 + 1]uint64
	// edges are the minutes of the week at which coverage differs from the minute
	// before, ascending. None means the element covers the whole week.
	edges []int
}

// recurrence is one parsed recurring element, "days start-end loc": the spans of each
// listed day it covers (usually one).
type recurrence struct {
	days  [7]bool
	spans []span
	loc   *time.Location
}

// add covers the minutes of r. A reversed span (end before start) starts on each listed
// day and runs past midnight into the next day: the part after midnight belongs to the
// day the window started on.
func (w *weekly) add(r recurrence) {
	for d, on := range r.days {
		if !on {
			continue
		}
		for _, sp := range r.spans {
			from, to := d*minutesPerDay+sp.start, d*minutesPerDay+sp.end
			if sp.end < sp.start {
				to += minutesPerDay
			}
			if to > minutesPerWeek {
				// Sunday's night runs into Monday.
				w.setRange(0, to-minutesPerWeek)
				to = minutesPerWeek
			}
			w.setRange(from, to)
		}
	}
}

// merge covers the minutes of another weekly element of the same zone.
func (w *weekly) merge(o *weekly) {
	for i := range w.minutes {
		w.minutes[i] |= o.minutes[i]
	}
}

// setRange covers the minutes [from, to) of the week, a word at a time.
func (w *weekly) setRange(from, to int) {
	for from < to {
		bit := from % 64
		n := min(64-bit, to-from)
		w.minutes[from/64] |= ^uint64(0) >> (64 - n) << bit
		from += n
	}
}

// finish computes the edges once every element of the zone has been added: the minutes
// whose coverage differs from the minute before, found a word at a time.
func (w *weekly) finish() {
	w.edges = w.edges[:0]
	const lastWord, lastBits = minutesPerWeek / 64, minutesPerWeek % 64
	prev := w.has(minutesPerWeek - 1)
	for i := 0; i <= lastWord; i++ {
		x := w.minutes[i]
		carry := uint64(0)
		if prev {
			carry = 1
		}
		changed := x ^ (x<<1 | carry)
		if i == lastWord {
			changed &= 1<<lastBits - 1
		}
		prev = x>>63 == 1
		for changed != 0 {
			b := bits.TrailingZeros64(changed)
			w.edges = append(w.edges, i*64+b)
			changed &= changed - 1
		}
	}
}

func (w *weekly) has(m int) bool { return w.minutes[m/64]&(1<<(m%64)) != 0 }

// wallClock returns the wall-clock minute of the week of t in loc, and how far into
// that minute t is. It reads the zone's offset once and counts from the Unix epoch (a
// Thursday), rather than ask the time for its weekday, hour and minute, which reads
// the offset at each question: recurring elements are evaluated at every step of a
// search.
func wallClock(t time.Time, loc *time.Location) (minute int, into time.Duration) {
	_, offset := t.In(loc).Zone()
	sec := t.Unix() + int64(offset)
	const thursday = 3 * minutesPerDay
	minutes := sec / 60
	rest := sec - minutes*60
	if rest < 0 {
		minutes, rest = minutes-1, rest+60
	}
	m := (minutes + thursday) % minutesPerWeek
	if m < 0 {
		m += minutesPerWeek
	}
	return int(m), time.Duration(rest)*time.Second + time.Duration(t.Nanosecond())
}

func (w *weekly) contains(t time.Time) bool {
	m, _ := wallClock(t, w.loc)
	return w.has(m)
}

// nextEdge returns the next instant at which the wall clock reaches one of the edges,
// or, if the zone's offset changes first, the instant of that change: there the wall
// clock jumps (a spring-forward gap or a fall-back fold) and coverage can change
// without any edge being reached.
func (w *weekly) nextEdge(t time.Time) time.Time {
	if len(w.edges) == 0 {
		return time.Time{}
	}
	m, intoMinute := wallClock(t, w.loc)
	var ahead int
	if i := sort.SearchInts(w.edges, m+1); i < len(w.edges) {
		ahead = w.edges[i] - m
	} else {
		ahead = w.edges[0] + minutesPerWeek - m
	}
	next := t.Add(time.Duration(ahead)*time.Minute - intoMinute)
	lt := t.In(w.loc)
	if _, end := lt.ZoneBounds(); !end.IsZero() && !next.Before(end) {
		return end
	}
	return next
}
