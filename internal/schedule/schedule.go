// Package schedule parses and evaluates the working-hours schedules of scheduled scaling:
// a comma-separated list of elements in the kube-downscaler grammar, made strict. What
// the strict reading rejects but kube-downscaler or GoKubeDownscaler accept is read as
// they read it, with a warning (see Schedule.Warnings).
//
//	Mon-Fri 07:30-20:30 Europe/Berlin        recurring, weekday range and time window in a zone
//	Sat-Mon 22:00-06:00 UTC                  ranges may wrap; a reversed window runs past midnight
//	2024-12-24T00:00:00+01:00-2024-12-27T00:00:00+01:00   absolute range, end exclusive
//	from 2025-01-01T00:00:00Z, until 2025-01-01T00:00:00Z directional
//	always, never, true, false               constants
//
// A schedule contains an instant when any element does. Recurring elements are evaluated
// on the wall clock of their zone, so daylight saving time moves them with the clock.
package schedule

import (
	"strconv"
	"strings"
	"time"
)

// maxElements bounds the work one annotation can cause. The peers set no bound; a
// thousand absolute ranges is more than a list of holidays needs.
const maxElements = 1000

// lookahead is how long Next follows recurring boundaries that leave the schedule
// unchanged before it concludes that, until the next absolute boundary, nothing will
// change. Recurring elements repeat weekly on the wall clock and zone rules repeat
// yearly, so any change they can make shows within a year; two leave a margin.
const lookahead = 2 * 366 * 24 * time.Hour

// Defaults fill in what a recurring element leaves out: TimeZone is an IANA zone name,
// Weekdays a range such as "Mon-Fri". Empty means no default, and an element that
// omits the part is an error. Calendars resolves holidays:<name> elements; with none,
// such an element is an error.
type Defaults struct {
	TimeZone, Weekdays string
	Calendars          Calendars
}

// Calendars looks holiday calendars up by name (see ParseCalendar). The error of an
// unknown or invalid calendar names it and says why.
type Calendars interface {
	Calendar(name string) (*Schedule, error)
}

// Schedule is a parsed schedule. The nil Schedule contains no instant.
type Schedule struct {
	elements []element
	warnings []string
}

// Warnings lists the elements read leniently, as kube-downscaler or GoKubeDownscaler
// read them, where the strict reading would have rejected them: each names the element
// and says how it was read.
func (s *Schedule) Warnings() []string {
	if s == nil {
		return nil
	}
	return s.warnings
}

// element is one comma-separated part of a schedule.
type element interface {
	contains(t time.Time) bool
	// nextEdge returns an instant after t at or before the first instant after t at
	// which contains changes, or zero if contains never changes after t.
	nextEdge(t time.Time) time.Time
}

// Parse parses spec. Every element is validated; the error names each bad element
// (by position and text) and the reason.
func Parse(spec string, d Defaults) (*Schedule, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, &parseError{problems: []string{"the schedule is empty"}}
	}
	parts := strings.Split(spec, ",")
	if len(parts) > maxElements {
		return nil, &parseError{problems: []string{"too many elements: " + strconv.Itoa(len(parts)) + " (at most " + strconv.Itoa(maxElements) + ")"}}
	}
	p := parser{defaults: d}
	s := &Schedule{}
	// Recurring elements in the same zone merge into one weekly element, so the cost
	// of Next grows with the number of zones, not of elements.
	var byZone []*weekly
	var problems []string
	for i, part := range parts {
		text := strings.TrimSpace(part)
		p.warning = ""
		name := "element " + strconv.Itoa(i+1) + " " + strconv.Quote(text) + ": "
		if calendar, ok := holidaysRef(text); ok {
			cal, err := p.holidays(calendar)
			if err != nil {
				problems = append(problems, name+err.Error())
				continue
			}
			// A calendar's elements join the schedule as they are: its absolute ranges
			// stay absolute boundaries for Next.
			s.elements = append(s.elements, cal.elements...)
			for _, w := range cal.warnings {
				s.warnings = append(s.warnings, name+w)
			}
			continue
		}
		r, e, err := p.element(text)
		if err != nil {
			problems = append(problems, name+err.Error())
			continue
		}
		if p.warning != "" {
			s.warnings = append(s.warnings, name+p.warning)
		}
		if r != nil {
			weeklyFor(&byZone, r.loc).add(*r)
			continue
		}
		s.elements = append(s.elements, e)
	}
	if len(problems) > 0 {
		return nil, &parseError{problems: problems}
	}
	for _, w := range byZone {
		w.finish()
		s.elements = append(s.elements, w)
	}
	return s, nil
}

// Contains reports whether t falls inside the schedule.
func (s *Schedule) Contains(t time.Time) bool {
	if s == nil {
		return false
	}
	t = t.Round(0)
	for _, e := range s.elements {
		if e.contains(t) {
			return true
		}
	}
	return false
}

// Next returns the first instant after t at which Contains changes, or the zero time if
// it never does.
//
// It moves from boundary to boundary, never minute by minute. Each element knows its
// next boundary (for a recurring element that includes the zone transitions where its
// wall clock jumps). While the schedule is outside, every element stays outside until
// its own next boundary, so the earliest of those is the only candidate. While it is
// inside, it stays inside at least until the latest next boundary among the elements
// that contain the instant, so everything before that is skipped.
func (s *Schedule) Next(t time.Time) time.Time {
	if s == nil || len(s.elements) == 0 {
		return time.Time{}
	}
	// Boundaries are wall-clock instants; a monotonic reading would only confuse the
	// comparisons between them.
	t = t.Round(0)
	current := s.Contains(t)
	horizon := t.Add(lookahead)
	for x := t; ; {
		if x.After(horizon) {
			// Between absolute boundaries only recurring elements act, and those showed
			// no change for a whole lookahead: go on from the next absolute boundary.
			f := s.nextFixed(x)
			if f.IsZero() {
				return time.Time{}
			}
			if s.Contains(f) != current {
				return f
			}
			x, horizon = f, f.Add(lookahead)
			continue
		}
		var u time.Time
		if current {
			u = x
			for _, e := range s.elements {
				if !e.contains(x) {
					continue
				}
				n := e.nextEdge(x)
				if n.IsZero() {
					return time.Time{}
				}
				if n.After(u) {
					u = n
				}
			}
		} else {
			for _, e := range s.elements {
				if n := e.nextEdge(x); !n.IsZero() && (u.IsZero() || n.Before(u)) {
					u = n
				}
			}
			if u.IsZero() {
				return time.Time{}
			}
		}
		if s.Contains(u) != current {
			return u
		}
		x = u
	}
}

// nextFixed returns the first absolute boundary after t, or zero if there is none.
func (s *Schedule) nextFixed(t time.Time) time.Time {
	var u time.Time
	for _, e := range s.elements {
		if iv, ok := e.(interval); ok {
			if n := iv.nextEdge(t); !n.IsZero() && (u.IsZero() || n.Before(u)) {
				u = n
			}
		}
	}
	return u
}

// weeklyFor returns the weekly element of zone loc, adding one if there is none yet.
func weeklyFor(byZone *[]*weekly, loc *time.Location) *weekly {
	for _, w := range *byZone {
		if w.loc.String() == loc.String() {
			return w
		}
	}
	w := &weekly{loc: loc}
	*byZone = append(*byZone, w)
	return w
}

// parseError lists every problem Parse found, one per bad element, naming it and the
// reason.
type parseError struct{ problems []string }

func (e *parseError) Error() string { return strings.Join(e.problems, "; ") }

// constant is always, never, true or false.
type constant bool

func (c constant) contains(time.Time) bool      { return bool(c) }
func (c constant) nextEdge(time.Time) time.Time { return time.Time{} }

// interval is an absolute range [from, until), or one side of it: from (inclusive) or
// until (exclusive).
type interval struct {
	from, until time.Time
	hasFrom     bool
	hasUntil    bool
}

func (iv interval) contains(t time.Time) bool {
	return (!iv.hasFrom || !t.Before(iv.from)) && (!iv.hasUntil || t.Before(iv.until))
}

func (iv interval) nextEdge(t time.Time) time.Time {
	if iv.hasFrom && iv.from.After(t) {
		return iv.from
	}
	if iv.hasUntil && iv.until.After(t) {
		return iv.until
	}
	return time.Time{}
}
