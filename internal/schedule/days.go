package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Whole days, as public-holiday lists write them:
//
//	2026-12-24               that day
//	2026-12-24..2026-12-26   the days from the first to the last, both included
//	*-12-25                  that day every year
//	easter-2, easter+39      days counted from (Western) Easter Sunday, every year
//
// each optionally followed by an IANA zone. A day lasts from midnight to midnight on the
// wall clock of its zone, daylight saving time included (23 or 25 hours on the days the
// clock changes). A day written without a zone takes the zone of the schedule that uses
// it, so that one holiday calendar serves teams in different zones (see zoneOfDays and
// includeCalendar).

// maxEasterOffset bounds easter±N: the holidays counted from Easter lie within about
// two months of it (Carnival Monday -48, Corpus Christi +60).
const maxEasterOffset = 100

// date is a calendar date, without a zone.
type date struct {
	y int
	m time.Month
	d int
}

func (d date) at(loc *time.Location) time.Time { return time.Date(d.y, d.m, d.d, 0, 0, 0, 0, loc) }

// next is the day after d.
func (d date) next() date {
	t := time.Date(d.y, d.m, d.d+1, 0, 0, 0, 0, time.UTC)
	return date{t.Year(), t.Month(), t.Day()}
}

func (d date) before(o date) bool {
	if d.y != o.y {
		return d.y < o.y
	}
	if d.m != o.m {
		return d.m < o.m
	}
	return d.d < o.d
}

// dayRule is one whole-day element: an absolute range of dates (first and last), a
// yearly date, or a day counted from Easter.
type dayRule struct {
	kind        dayKind
	first, last date       // absoluteDays
	month       time.Month // yearlyDay
	day         int        // yearlyDay
	offset      int        // easterDay
}

type dayKind uint8

const (
	absoluteDays dayKind = iota
	yearlyDay
	easterDay
)

// days is a parsed whole-day element; loc is nil when it names no zone. It is never
// evaluated as it is: the builder binds its rules to a zone (bind), which turns them into
// absolute ranges and annual elements. Its methods only let the parser return it as an
// element.
type days struct {
	rules []dayRule
	loc   *time.Location
}

func (days) contains(time.Time) bool      { return false }
func (days) nextEdge(time.Time) time.Time { return time.Time{} }

// looksLikeDays reports whether an element is a whole-day element (as opposed to an
// absolute range of instants, which has a T, or any other element).
func looksLikeDays(text string) bool {
	first, _, _ := strings.Cut(text, " ")
	lower := strings.ToLower(first)
	switch {
	case strings.HasPrefix(lower, "easter"):
		return true
	case strings.HasPrefix(first, "*-"):
		return true
	}
	// A date, or a range of dates, alone or before a zone: a space and a time after the
	// date is an absolute range written with a space for its T, which absolute reports.
	if !looksAbsolute(first) || strings.Contains(first, "T") {
		return false
	}
	zone := strings.TrimSpace(strings.TrimPrefix(text, first))
	const dateLen = len("2006-01-02")
	isDate := len(first) == dateLen || len(first) > dateLen && strings.HasPrefix(first[dateLen:], "..")
	return isDate && (zone == "" || isLetter(zone[0]))
}

// wholeDays parses a whole-day element.
func wholeDays(text string) (days, error) {
	fields := strings.Fields(text)
	if len(fields) > 2 {
		return days{}, errors.New("a whole day is a date, a range of dates, *-MM-DD or easter±N, optionally followed by a time zone")
	}
	var out days
	if len(fields) == 2 {
		loc, err := loadZone(fields[1])
		if err != nil {
			return days{}, err
		}
		out.loc = loc
	}
	r, err := dayRuleOf(fields[0])
	if err != nil {
		return days{}, err
	}
	out.rules = []dayRule{r}
	return out, nil
}

func dayRuleOf(s string) (dayRule, error) {
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "easter"):
		rest := lower[len("easter"):]
		if rest == "" {
			return dayRule{kind: easterDay}, nil
		}
		n, err := strconv.Atoi(rest)
		if err != nil || rest[0] != '+' && rest[0] != '-' {
			return dayRule{}, fmt.Errorf("%q: a day counted from Easter is easter, easter+N or easter-N, such as easter-2 (Good Friday)", s)
		}
		if n < -maxEasterOffset || n > maxEasterOffset {
			return dayRule{}, fmt.Errorf("%q: at most %d days from Easter", s, maxEasterOffset)
		}
		return dayRule{kind: easterDay, offset: n}, nil
	case strings.HasPrefix(s, "*-"):
		t, err := time.Parse("2006-01-02", "2000"+s[1:])
		if err != nil || len(s) != len("*-01-02") {
			return dayRule{}, fmt.Errorf("%q: a yearly day is *-MM-DD, such as *-12-25", s)
		}
		if t.Month() == time.February && t.Day() == 29 {
			return dayRule{}, fmt.Errorf("%q: 29 February is not a yearly day (most years have none); write the dates", s)
		}
		return dayRule{kind: yearlyDay, month: t.Month(), day: t.Day()}, nil
	}
	first, last, isRange := strings.Cut(s, "..")
	a, err := parseDate(first)
	if err != nil {
		return dayRule{}, err
	}
	b := a
	if isRange {
		if b, err = parseDate(last); err != nil {
			return dayRule{}, err
		}
		if b.before(a) {
			return dayRule{}, fmt.Errorf("%q: the last day is before the first", s)
		}
	}
	return dayRule{kind: absoluteDays, first: a, last: b}, nil
}

func parseDate(s string) (date, error) {
	t, err := time.Parse("2006-01-02", s)
	if err != nil || len(s) != len("2006-01-02") {
		return date{}, fmt.Errorf("%q is not a date such as 2026-12-24 (or a range 2026-12-24..2026-12-26)", s)
	}
	return date{t.Year(), t.Month(), t.Day()}, nil
}

// easter returns the date of Western Easter Sunday in year y (the Gregorian computus,
// in the form of the anonymous algorithm of 1876).
func easter(y int) date {
	a := y % 19
	b, c := y/100, y%100
	d, e := b/4, b%4
	f := (b + 8) / 25
	g := (b - f + 1) / 3
	h := (19*a + b - d - g + 15) % 30
	i, k := c/4, c%4
	l := (32 + 2*e + 2*i - h - k) % 7
	m := (a + 11*h + 22*l) / 451
	month := (h + l - 7*m + 114) / 31
	day := (h+l-7*m+114)%31 + 1
	return date{y, time.Month(month), day}
}

// annual holds the yearly and Easter-relative days of one zone, as sets, so that
// deciding a day costs the same however many days a calendar lists.
type annual struct {
	loc *time.Location
	// yearly[m*32+d] is set for the yearly day d of month m.
	yearly [13 * 32]bool
	// fromEaster[n+maxEasterOffset] is set for the day n days from Easter Sunday.
	fromEaster [2*maxEasterOffset + 1]bool
}

// annualFor returns the annual element of zone loc, adding one if there is none yet.
func annualFor(byZone *[]*annual, loc *time.Location) *annual {
	return forZone(byZone, loc, func(a *annual) *time.Location { return a.loc }, func() *annual { return &annual{loc: loc} })
}

func (a *annual) add(r dayRule) {
	switch r.kind {
	case yearlyDay:
		a.yearly[int(r.month)*32+r.day] = true
	case easterDay:
		a.fromEaster[r.offset+maxEasterOffset] = true
	}
}

func (a *annual) merge(o *annual) {
	for i, v := range o.yearly {
		a.yearly[i] = a.yearly[i] || v
	}
	for i, v := range o.fromEaster {
		a.fromEaster[i] = a.fromEaster[i] || v
	}
}

// on reports whether the day d is one of a's.
func (a *annual) on(d date) bool {
	if a.yearly[int(d.m)*32+d.d] {
		return true
	}
	// Within maxEasterOffset days of Easter, a day may belong to the Easter of the year
	// before or after its own.
	day := d.at(time.UTC)
	for y := d.y - 1; y <= d.y+1; y++ {
		n := int(day.Sub(easter(y).at(time.UTC)).Hours()) / 24
		if n >= -maxEasterOffset && n <= maxEasterOffset && a.fromEaster[n+maxEasterOffset] {
			return true
		}
	}
	return false
}

func dateOf(t time.Time, loc *time.Location) date {
	y, m, d := t.In(loc).Date()
	return date{y, m, d}
}

func (a *annual) contains(t time.Time) bool { return a.on(dateOf(t, a.loc)) }

// annualHorizon is how many days nextEdge looks ahead: every yearly or Easter-relative
// day recurs within a year and a half (Easter moves by at most 35 days).
const annualHorizon = 2 * 366

// nextEdge returns the next midnight on a's wall clock at which a starts or stops
// containing the day, or, if the zone's offset changes first, the instant of that
// change (where a wall clock that jumps over or back across midnight changes the date
// without reaching a midnight); zero if neither within annualHorizon days.
func (a *annual) nextEdge(t time.Time) time.Time {
	lt := t.In(a.loc)
	_, end := lt.ZoneBounds()
	d := date{lt.Year(), lt.Month(), lt.Day()}
	now := a.on(d)
	sinceMidnight := time.Duration(lt.Hour())*time.Hour + time.Duration(lt.Minute())*time.Minute +
		time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
	midnight := t.Add(24*time.Hour - sinceMidnight)
	for range annualHorizon {
		if !end.IsZero() && !midnight.Before(end) {
			return end
		}
		d = d.next()
		if a.on(d) != now {
			return midnight
		}
		midnight = midnight.Add(24 * time.Hour)
	}
	return time.Time{}
}

// bind adds whole-day rules in zone loc: absolute days become absolute ranges (from
// the first midnight to the midnight after the last day), the others join the zone's
// annual element.
func (b *builder) bind(rules []dayRule, loc *time.Location) {
	for _, r := range rules {
		if r.kind == absoluteDays {
			b.ranges = append(b.ranges, interval{from: r.first.at(loc), until: r.last.next().at(loc), hasFrom: true, hasUntil: true})
			continue
		}
		annualFor(&b.annuals, loc).add(r)
	}
}

// zoneOfDays is the zone of a schedule's whole days that name none: the one zone its
// recurring elements name, else the default zone.
func (p *parser) zoneOfDays(weeks []*weekly) (*time.Location, error) {
	if len(weeks) == 1 {
		return weeks[0].loc, nil
	}
	loc, err := p.defaultZone()
	if err != nil {
		return nil, errors.New("whole days are read in the schedule's time zone, and this schedule has none: " +
			"name one after the day (2026-12-24 Europe/Berlin) or after the calendar (holidays:de-by Europe/Berlin), " +
			"use one zone in its recurring elements, or configure a default time zone")
	}
	return loc, nil
}

// includeCalendar adds a calendar's elements as they are (its absolute ranges stay
// absolute boundaries for Next), and its whole days that name no zone in zone, the one
// written after the calendar's name, or else in the zone of the schedule that names it
// (zoneOf).
func (b *builder) includeCalendar(cal *Schedule, zone string, zoneOf func() (*time.Location, error)) error {
	var loc *time.Location
	var err error
	if zone != "" {
		loc, err = loadZone(zone)
	} else if len(cal.unzoned) > 0 {
		loc, err = zoneOf()
	}
	if err != nil {
		return err
	}
	zoned := *cal
	zoned.unzoned = nil
	b.include(&zoned)
	b.bind(cal.unzoned, loc)
	return nil
}
