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
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxElements bounds the work one schedule can cause: the elements it is written with,
// those of the holiday calendars it names included. The peers set no bound; a thousand
// absolute ranges is more than a list of holidays needs.
const MaxElements = 1000

// lookahead is how long Next follows recurring boundaries that leave the schedule
// unchanged before it concludes that, until the next absolute boundary, nothing will
// change. Recurring elements repeat weekly on the wall clock and zone rules repeat
// yearly, so any change they can make shows within a year; two leave a margin.
const lookahead = 2 * 366 * 24 * time.Hour

// nextBudget is what one call of Next may spend: far more than any schedule of
// ordinary shape needs to be followed exactly.
const nextBudget = 1_000_000

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
//
// However many elements it is written with, it is evaluated as at most one constant,
// one set of absolute ranges (every absolute and directional element, merged) and one
// weekly element per zone (every recurring element of that zone, merged), so the cost
// of Contains and Next grows with the number of zones, not of elements.
type Schedule struct {
	// elements are what Contains and Next evaluate: constant(true) alone if any
	// element contains every instant, else the ranges (if any) and the weeks.
	elements []element
	ranges   rangeSet
	weeks    []*weekly
	// annuals are the yearly and Easter-relative days, by zone.
	annuals []*annual
	// unzoned are the whole days of a holiday calendar that name no zone: the schedule
	// that names the calendar reads them in its own zone.
	unzoned []dayRule
	always  bool
	// size is the number of elements written, those of the calendars named included.
	size     int
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

// Size is the number of elements the schedule is written with, those of the holiday
// calendars it names included; at most MaxElements.
func (s *Schedule) Size() int {
	if s == nil {
		return 0
	}
	return s.size
}

// element is one part of an evaluated schedule.
type element interface {
	contains(t time.Time) bool
	// nextEdge returns an instant after t at or before the first instant after t at
	// which contains changes, or zero if contains never changes after t.
	nextEdge(t time.Time) time.Time
}

// Parse parses spec. Every element is validated; the error names each bad element
// (by position and text) and the reason.
//
// What a specification says besides its calendars is read once and remembered (see
// memo): the operator reads the same annotations at every decision. The calendars it
// names are looked up at every call, since they change on their own.
func Parse(spec string, d Defaults) (*Schedule, error) {
	return parse(spec, d, false)
}

// parse is Parse; inCalendar leaves the whole days that name no zone unzoned, for the
// schedule that names the calendar to read in its zone.
func parse(spec string, d Defaults, inCalendar bool) (*Schedule, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, &parseError{problems: []string{"the schedule is empty"}}
	}
	if n := strings.Count(spec, ",") + 1; n > MaxElements {
		return nil, &parseError{problems: []string{tooMany(n)}}
	}
	own := readOwn(spec, d.TimeZone, d.Weekdays, inCalendar)
	if len(own.calendars) == 0 {
		if len(own.problems) > 0 {
			return nil, &parseError{problems: texts(own.problems)}
		}
		return own.schedule, nil
	}
	p := parser{defaults: d}
	var b builder
	b.include(own.schedule)
	problems := slices.Clone(own.problems)
	var calendarWarnings []noted
	for _, ref := range own.calendars {
		cal, err := p.holidays(ref.name)
		if err == nil {
			err = b.includeCalendar(cal, ref.zone, func() (*time.Location, error) { return p.zoneOfDays(own.schedule.weeks) })
		}
		if err != nil {
			problems = append(problems, noted{ref.index, elementName(ref.index, ref.text) + err.Error()})
			continue
		}
		for _, w := range cal.warnings {
			calendarWarnings = append(calendarWarnings, noted{ref.index, elementName(ref.index, ref.text) + w})
		}
	}
	if b.size > MaxElements {
		problems = append(problems, noted{len(spec), tooMany(b.size) + ", counting those of the holiday calendars it names"})
	}
	if len(problems) > 0 {
		return nil, &parseError{problems: texts(inOrder(problems))}
	}
	s := b.build()
	s.warnings = texts(inOrder(slices.Concat(own.warnings, calendarWarnings)))
	return s, nil
}

func tooMany(n int) string {
	return "too many elements: " + strconv.Itoa(n) + " (at most " + strconv.Itoa(MaxElements) + ")"
}

// builder collects parsed elements and merges them into a Schedule.
type builder struct {
	always bool
	ranges []interval
	// sets are the merged ranges of schedules included whole (calendars).
	sets []rangeSet
	// byZone are the recurring elements by zone.
	byZone []*weekly
	// annuals are the yearly and Easter-relative days by zone; unzoned the whole days
	// that name no zone, in a calendar (readOwn binds a schedule's own).
	annuals  []*annual
	unzoned  []dayRule
	size     int
	warnings []string
}

// add adds one parsed element: a recurrence, or any other element.
func (b *builder) add(r *recurrence, e element) {
	switch e := e.(type) {
	case nil:
		weeklyFor(&b.byZone, r.loc).add(*r)
	case constant:
		b.always = b.always || bool(e)
	case interval:
		b.ranges = append(b.ranges, e)
	case days:
		if e.loc == nil {
			b.unzoned = append(b.unzoned, e.rules...)
		} else {
			b.bind(e.rules, e.loc)
		}
	}
}

// include adds every element of a parsed schedule.
func (b *builder) include(s *Schedule) {
	b.always = b.always || s.always
	if len(s.ranges.edges) > 0 || s.ranges.before {
		b.sets = append(b.sets, s.ranges)
	}
	for _, w := range s.weeks {
		weeklyFor(&b.byZone, w.loc).merge(w)
	}
	for _, a := range s.annuals {
		annualFor(&b.annuals, a.loc).merge(a)
	}
	b.unzoned = append(b.unzoned, s.unzoned...)
	b.size += s.size
}

func (b *builder) build() *Schedule {
	s := &Schedule{always: b.always, size: b.size, warnings: b.warnings, weeks: b.byZone, annuals: b.annuals, unzoned: b.unzoned}
	if len(b.ranges) == 0 && len(b.sets) == 1 {
		s.ranges = b.sets[0]
	} else {
		ivs := b.ranges
		for _, set := range b.sets {
			ivs = append(ivs, set.intervals()...)
		}
		s.ranges = newRangeSet(ivs)
	}
	for _, w := range s.weeks {
		w.finish()
	}
	switch {
	case s.always:
		s.elements = []element{constant(true)}
	default:
		if len(s.ranges.edges) > 0 || s.ranges.before {
			s.elements = append(s.elements, s.ranges)
		}
		for _, w := range s.weeks {
			s.elements = append(s.elements, w)
		}
		for _, a := range s.annuals {
			s.elements = append(s.elements, a)
		}
	}
	return s
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

// Budget bounds the work of following a schedule's transitions: each element a search
// evaluates at an instant it stops at spends one unit. One Budget may be shared by the
// searches of one decision, so that the decision as a whole is bounded.
type Budget struct{ left int }

// NewBudget returns a budget of units.
func NewBudget(units int) *Budget { return &Budget{left: units} }

// Spent reports whether the budget has run out.
func (b *Budget) Spent() bool { return b != nil && b.left <= 0 }

// Next returns the first instant after t at which Contains changes, or the zero time if
// it never does (within a bound far beyond what schedules of ordinary shape need; see
// NextWithin).
func (s *Schedule) Next(t time.Time) time.Time {
	return s.NextWithin(t, NewBudget(nextBudget))
}

// NextWithin is Next with its work bounded by b. When b runs out before the change is
// found, it returns the furthest instant it reached: an instant after t at which nothing
// changed, so the change comes later, and a search from there goes on where this one
// stopped.
//
// It moves from boundary to boundary, never minute by minute. Each element knows its
// next boundary (for a recurring element that includes the zone transitions where its
// wall clock jumps). While the schedule is outside, every element stays outside until
// its own next boundary, so the earliest of those is the only candidate. While it is
// inside, it stays inside at least until the latest next boundary among the elements
// that contain the instant, so everything before that is skipped.
func (s *Schedule) NextWithin(t time.Time, b *Budget) time.Time {
	if s == nil || len(s.elements) == 0 {
		return time.Time{}
	}
	if b == nil {
		b = NewBudget(nextBudget)
	}
	// Boundaries are wall-clock instants; a monotonic reading would only confuse the
	// comparisons between them.
	t = t.Round(0)
	current := s.Contains(t)
	horizon := t.Add(lookahead)
	for x := t; ; {
		if b.Spent() && x.After(t) {
			return x
		}
		// A step evaluates every element for its next edge (inside, first whether it
		// contains the instant) and again where it stops.
		if current {
			b.left -= 3 * len(s.elements)
		} else {
			b.left -= 2 * len(s.elements)
		}
		if x.After(horizon) {
			// Between absolute boundaries only recurring elements act, and those showed
			// no change for a whole lookahead: go on from the next absolute boundary.
			f := s.ranges.nextEdge(x)
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

// weeklyFor returns the weekly element of zone loc, adding one if there is none yet.
func weeklyFor(byZone *[]*weekly, loc *time.Location) *weekly {
	return forZone(byZone, loc, func(w *weekly) *time.Location { return w.loc }, func() *weekly { return &weekly{loc: loc} })
}

// forZone returns the element of zone loc in byZone (zoneOf tells an element's zone),
// adding a new one if there is none yet: a schedule evaluates one element of a kind per
// zone.
func forZone[E any](byZone *[]E, loc *time.Location, zoneOf func(E) *time.Location, newElement func() E) E {
	for _, e := range *byZone {
		if zoneOf(e).String() == loc.String() {
			return e
		}
	}
	e := newElement()
	*byZone = append(*byZone, e)
	return e
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

// rangeSet is the union of intervals: the instants at which it changes, ascending, and
// whether it contains the instants before the first of them (all of them, with none).
// Touching and overlapping intervals are merged, so every edge is a change, and Next
// crosses a thousand touching hourly ranges in one step.
type rangeSet struct {
	edges  []time.Time
	before bool
}

// newRangeSet merges intervals.
func newRangeSet(ivs []interval) rangeSet {
	slices.SortFunc(ivs, func(a, b interval) int {
		switch {
		case !a.hasFrom && !b.hasFrom:
			return 0
		case !a.hasFrom:
			return -1
		case !b.hasFrom:
			return 1
		}
		return a.from.Compare(b.from)
	})
	var r rangeSet
	var cur interval
	open := false
	flush := func() {
		if cur.hasFrom {
			r.edges = append(r.edges, cur.from)
		} else {
			r.before = true
		}
		if cur.hasUntil {
			r.edges = append(r.edges, cur.until)
		}
	}
	for _, iv := range ivs {
		switch {
		case !open:
			cur, open = iv, true
		case !cur.hasUntil:
			// It reaches the end of time: nothing after it adds anything.
		case !iv.hasFrom || !iv.from.After(cur.until):
			// Overlapping or touching: one range.
			if !iv.hasUntil {
				cur.hasUntil = false
			} else if iv.until.After(cur.until) {
				cur.until = iv.until
			}
		default:
			flush()
			cur = iv
		}
	}
	if open {
		flush()
	}
	return r
}

// intervals returns the merged ranges again.
func (r rangeSet) intervals() []interval {
	var out []interval
	edges := r.edges
	if r.before {
		iv := interval{}
		if len(edges) > 0 {
			iv.until, iv.hasUntil = edges[0], true
			edges = edges[1:]
		}
		out = append(out, iv)
	}
	for i := 0; i < len(edges); i += 2 {
		iv := interval{from: edges[i], hasFrom: true}
		if i+1 < len(edges) {
			iv.until, iv.hasUntil = edges[i+1], true
		}
		out = append(out, iv)
	}
	return out
}

// after returns the index of the first edge after t.
func (r rangeSet) after(t time.Time) int {
	return sort.Search(len(r.edges), func(i int) bool { return r.edges[i].After(t) })
}

func (r rangeSet) contains(t time.Time) bool { return r.before != (r.after(t)%2 == 1) }

func (r rangeSet) nextEdge(t time.Time) time.Time {
	if i := r.after(t); i < len(r.edges) {
		return r.edges[i]
	}
	return time.Time{}
}
