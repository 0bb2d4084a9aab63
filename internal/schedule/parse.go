package schedule

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	// The zone database is compiled in, so schedules work in images without tzdata.
	_ "time/tzdata"
)

// rfc3339 matches one RFC 3339 timestamp as Kubernetes writes them: upper-case T, and
// Z or a numeric offset.
const rfc3339 = `\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})`

var (
	absoluteRange = regexp.MustCompile(`^(` + rfc3339 + `)\s*-\s*(` + rfc3339 + `)$`)
	timestamp     = regexp.MustCompile(`^` + rfc3339 + `$`)
	looksAbsolute = regexp.MustCompile(`^\d{4}-`)
	clockTime     = regexp.MustCompile(`^\d\d:\d\d$`)
	weekdayRange  = regexp.MustCompile(`^([A-Za-z]+)(?:-([A-Za-z]+))?$`)
)

// weekdayNames in the order of the week frame: Monday is day 0.
var weekdayNames = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// parser parses elements; it resolves the defaults once, on first use.
type parser struct {
	defaults Defaults

	zone     *time.Location
	zoneErr  error
	days     *[7]bool
	daysErr  error
	resolved struct{ zone, days bool }
}

// element parses one trimmed element: a recurrence, or any other element.
func (p *parser) element(text string) (*recurrence, element, error) {
	if text == "" {
		return nil, nil, errors.New("empty element (two commas in a row, or a comma at the start or end)")
	}
	lower := strings.ToLower(text)
	switch lower {
	case "always", "true":
		return nil, constant(true), nil
	case "never", "false":
		return nil, constant(false), nil
	}
	switch {
	case strings.HasPrefix(lower, "from"):
		at, err := directional(text[len("from"):])
		if err != nil {
			return nil, nil, err
		}
		return nil, interval{from: at, hasFrom: true}, nil
	case strings.HasPrefix(lower, "until"):
		at, err := directional(text[len("until"):])
		if err != nil {
			return nil, nil, err
		}
		return nil, interval{until: at, hasUntil: true}, nil
	case looksAbsolute.MatchString(text):
		e, err := absolute(text)
		return nil, e, err
	}
	r, err := p.recurring(text)
	return r, nil, err
}

// directional parses what follows "from" or "until": a space, a dash or nothing, then
// an RFC 3339 time.
func directional(rest string) (time.Time, error) {
	rest = strings.TrimLeft(rest, " \t")
	if strings.HasPrefix(rest, "-") {
		rest = strings.TrimLeft(rest[1:], " \t")
	}
	if rest == "" {
		return time.Time{}, errors.New("missing time after from/until")
	}
	if !timestamp.MatchString(rest) {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time such as 2024-11-01T22:00:00+01:00", rest)
	}
	return parseTime(rest)
}

// absolute parses "<RFC 3339>-<RFC 3339>", spaces allowed around the dash.
func absolute(text string) (element, error) {
	m := absoluteRange.FindStringSubmatch(text)
	if m == nil {
		return nil, errors.New("not an absolute range: expected <start>-<end> in RFC 3339, " +
			"such as 2024-11-01T22:00:00+00:00-2024-11-22T05:00:00+00:00")
	}
	from, err := parseTime(m[1])
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	until, err := parseTime(m[2])
	if err != nil {
		return nil, fmt.Errorf("end: %w", err)
	}
	if !until.After(from) {
		return nil, fmt.Errorf("end %s is not after start %s", m[2], m[1])
	}
	return interval{from: from, until: until, hasFrom: true, hasUntil: true}, nil
}

// parseTime parses a string that already has the RFC 3339 shape, so only range errors
// (month 13, hour 25, …) remain.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		var pe *time.ParseError
		if errors.As(err, &pe) && pe.Message != "" {
			return time.Time{}, fmt.Errorf("%q: %s", s, strings.TrimPrefix(pe.Message, ": "))
		}
		return time.Time{}, fmt.Errorf("%q is not a valid RFC 3339 time", s)
	}
	return t, nil
}

// recurring parses "[weekdays] HH:MM-HH:MM [zone]".
func (p *parser) recurring(text string) (*recurrence, error) {
	fields := strings.Fields(text)
	at := -1
	for i, f := range fields {
		if f[0] >= '0' && f[0] <= '9' {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, errors.New("not a schedule element: expected always, never, an absolute range, " +
			"from/until <time>, or [weekdays] HH:MM-HH:MM [zone] such as Mon-Fri 07:30-20:30 Europe/Berlin")
	}
	if at > 1 {
		return nil, fmt.Errorf("unexpected %q: at most one weekday range comes before the time window", fields[0])
	}
	if len(fields)-at > 2 {
		return nil, fmt.Errorf("unexpected %q: at most one time zone comes after the time window", fields[at+2])
	}

	start, end, err := window(fields[at])
	if err != nil {
		return nil, err
	}
	var days [7]bool
	if at == 1 {
		if days, err = parseWeekdays(fields[0]); err != nil {
			return nil, err
		}
	} else {
		d, err := p.defaultDays()
		if err != nil {
			return nil, err
		}
		days = *d
	}
	var loc *time.Location
	if len(fields) > at+1 {
		if loc, err = loadZone(fields[at+1]); err != nil {
			return nil, err
		}
	} else if loc, err = p.defaultZone(); err != nil {
		return nil, err
	}
	return &recurrence{days: days, start: start, end: end, loc: loc}, nil
}

// window parses "HH:MM-HH:MM" into minutes of the day; the end may be 24:00.
func window(s string) (start, end int, err error) {
	from, to, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("time window %q: expected HH:MM-HH:MM", s)
	}
	if start, err = clock(from); err != nil {
		return 0, 0, fmt.Errorf("start %w", err)
	}
	if end, err = clock(to); err != nil {
		return 0, 0, fmt.Errorf("end %w", err)
	}
	switch start {
	case minutesPerDay:
		return 0, 0, errors.New("start 24:00 is the end of the day; use 00:00")
	case end:
		return 0, 0, fmt.Errorf("start and end are both %s, so the window is empty; use 00:00-24:00 for a whole day", from)
	}
	return start, end, nil
}

// clock parses "HH:MM" with hours 0–24, minutes 0–59 and 24 only as 24:00.
func clock(s string) (int, error) {
	if !clockTime.MatchString(s) {
		return 0, fmt.Errorf("%q is not HH:MM with two digits each", s)
	}
	h := int(s[0]-'0')*10 + int(s[1]-'0')
	m := int(s[3]-'0')*10 + int(s[4]-'0')
	switch {
	case h > 24:
		return 0, fmt.Errorf("%q: hour %d is out of range 0-24", s, h)
	case m > 59:
		return 0, fmt.Errorf("%q: minute %d is out of range 0-59", s, m)
	case h == 24 && m != 0:
		return 0, fmt.Errorf("%q: 24 is only valid as 24:00, the end of the day", s)
	}
	return h*60 + m, nil
}

// parseWeekdays parses "Mon-Fri" (inclusive, may wrap: "Sat-Mon") or a single "Sat".
func parseWeekdays(s string) ([7]bool, error) {
	var days [7]bool
	m := weekdayRange.FindStringSubmatch(s)
	if m == nil {
		return days, fmt.Errorf("weekdays %q: expected a range such as Mon-Fri", s)
	}
	from, err := weekday(m[1])
	if err != nil {
		return days, err
	}
	to := from
	if m[2] != "" {
		if to, err = weekday(m[2]); err != nil {
			return days, err
		}
	}
	for d := from; ; d = (d + 1) % 7 {
		days[d] = true
		if d == to {
			return days, nil
		}
	}
}

func weekday(s string) (int, error) {
	for i, n := range weekdayNames {
		if strings.EqualFold(s, n) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown weekday %q: use Mon, Tue, Wed, Thu, Fri, Sat or Sun", s)
}

func (p *parser) defaultDays() (*[7]bool, error) {
	if !p.resolved.days {
		p.resolved.days = true
		if p.defaults.Weekdays == "" {
			p.daysErr = errors.New("no weekdays given and no default week frame is configured")
		} else if d, err := parseWeekdays(p.defaults.Weekdays); err != nil {
			p.daysErr = fmt.Errorf("default week frame: %w", err)
		} else {
			p.days = &d
		}
	}
	return p.days, p.daysErr
}

func (p *parser) defaultZone() (*time.Location, error) {
	if !p.resolved.zone {
		p.resolved.zone = true
		if p.defaults.TimeZone == "" {
			p.zoneErr = errors.New("no time zone given and no default time zone is configured")
		} else if p.zone, p.zoneErr = loadZone(p.defaults.TimeZone); p.zoneErr != nil {
			p.zoneErr = fmt.Errorf("default %w", p.zoneErr)
		}
	}
	return p.zone, p.zoneErr
}

// zones caches loaded locations: loading one reads and parses zone data, and every
// reconcile parses its schedules again.
var zones sync.Map

// loadZone loads an IANA zone. "Local" is refused: the operator's own zone is not
// something a schedule should depend on.
func loadZone(name string) (*time.Location, error) {
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), nil
	}
	if name == "Local" || strings.ContainsAny(name, `\`) {
		return nil, fmt.Errorf("time zone %q: use an IANA zone name such as Europe/Berlin or UTC", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: use an IANA zone name such as Europe/Berlin or UTC", name)
	}
	zones.Store(name, loc)
	return loc, nil
}
