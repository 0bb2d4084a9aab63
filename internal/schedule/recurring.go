package schedule

import (
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
			for m := from; m < to; m++ {
				w.set(m % minutesPerWeek)
			}
		}
	}
}

// finish computes the edges once every element of the zone has been added.
func (w *weekly) finish() {
	for m := range minutesPerWeek {
		if w.has(m) != w.has((m+minutesPerWeek-1)%minutesPerWeek) {
			w.edges = append(w.edges, m)
		}
	}
}

func (w *weekly) set(m int)      { w.minutes[m/64] |= 1 << (m % 64) }
func (w *weekly) has(m int) bool { return w.minutes[m/64]&(1<<(m%64)) != 0 }

// minuteOfWeek is the wall-clock minute of the week of a time already in its zone.
func minuteOfWeek(lt time.Time) int {
	return (int(lt.Weekday())+6)%7*minutesPerDay + lt.Hour()*60 + lt.Minute()
}

func (w *weekly) contains(t time.Time) bool {
	return w.has(minuteOfWeek(t.In(w.loc)))
}

// nextEdge returns the next instant at which the wall clock reaches one of the edges,
// or, if the zone's offset changes first, the instant of that change: there the wall
// clock jumps (a spring-forward gap or a fall-back fold) and coverage can change
// without any edge being reached.
func (w *weekly) nextEdge(t time.Time) time.Time {
	if len(w.edges) == 0 {
		return time.Time{}
	}
	lt := t.In(w.loc)
	m := minuteOfWeek(lt)
	var ahead int
	if i := sort.SearchInts(w.edges, m+1); i < len(w.edges) {
		ahead = w.edges[i] - m
	} else {
		ahead = w.edges[0] + minutesPerWeek - m
	}
	intoMinute := time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
	next := t.Add(time.Duration(ahead)*time.Minute - intoMinute)
	if _, end := lt.ZoneBounds(); !end.IsZero() && !next.Before(end) {
		return end
	}
	return next
}
