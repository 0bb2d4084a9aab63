package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	// The zone database is compiled in, so schedules work in images without tzdata.
	_ "time/tzdata"
)

// The grammar is read by hand rather than with regular expressions: a schedule may have
// a thousand elements and is read at every decision.

// rfc3339Len returns the length of the RFC 3339 timestamp at the start of s, as
// Kubernetes writes them (2024-11-01T22:00:00+01:00: upper-case T, optional fractional
// seconds, Z or a numeric offset), or 0 if s does not start with one.
func rfc3339Len(s string) int {
	const shape = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(shape) {
		return 0
	}
	for i := range len(shape) {
		if shape[i] == 'd' && !isDigit(s[i]) || shape[i] != 'd' && s[i] != shape[i] {
			return 0
		}
	}
	n := len(shape)
	if n < len(s) && s[n] == '.' {
		j := n + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == n+1 {
			return 0
		}
		n = j
	}
	switch {
	case n < len(s) && s[n] == 'Z':
		return n + 1
	case n+6 <= len(s) && (s[n] == '+' || s[n] == '-') && isDigit(s[n+1]) && isDigit(s[n+2]) && s[n+3] == ':' && isDigit(s[n+4]) && isDigit(s[n+5]):
		return n + 6
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// looksAbsolute reports whether an element starts like an RFC 3339 date: four digits
// and a dash.
func looksAbsolute(s string) bool {
	return len(s) >= 5 && isDigit(s[0]) && isDigit(s[1]) && isDigit(s[2]) && isDigit(s[3]) && s[4] == '-'
}

// trimSpace trims what \s matches: spaces, tabs and line breaks.
func trimSpace(s string) string { return strings.Trim(s, " \t\n\f\r") }

// weekdayNames in the order of the week frame: Monday is day 0.
var weekdayNames = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// parser parses elements; it resolves the defaults once, on first use.
type parser struct {
	defaults Defaults
	// warning is set by the element being parsed when it was read leniently.
	warning string

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
	case looksLikeDays(text):
		d, err := wholeDays(text)
		if err != nil {
			return nil, nil, err
		}
		return nil, d, nil
	case looksAbsolute(text):
		e, err := absolute(text)
		if errors.Is(err, errEmptyRange) {
			p.warning = err.Error()
			return nil, constant(false), nil
		}
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
	if rfc3339Len(rest) != len(rest) {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time such as 2024-11-01T22:00:00+01:00", rest)
	}
	return parseTime(rest)
}

// absolute parses "<RFC 3339>-<RFC 3339>", spaces allowed around the dash.
func absolute(text string) (element, error) {
	n := rfc3339Len(text)
	rest := trimSpace(text[n:])
	if n == 0 || !strings.HasPrefix(rest, "-") || rfc3339Len(trimSpace(rest[1:])) != len(trimSpace(rest[1:])) {
		return nil, errors.New("not an absolute range: expected <start>-<end> in RFC 3339, " +
			"such as 2024-11-01T22:00:00+00:00-2024-11-22T05:00:00+00:00")
	}
	from, err := parseTime(text[:n])
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	until, err := parseTime(trimSpace(rest[1:]))
	if err != nil {
		return nil, fmt.Errorf("end: %w", err)
	}
	if !until.After(from) {
		return nil, errEmptyRange
	}
	return interval{from: from, until: until, hasFrom: true, hasUntil: true}, nil
}

// errEmptyRange marks an absolute range whose end is not after its start. The peers
// accept such a range and it never matches there, so Parse reads it the same way and
// warns.
var errEmptyRange = errors.New("the end is not after the start, so the range is empty and never matches " +
	"(as kube-downscaler and GoKubeDownscaler read it)")

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

	spans, warning, err := window(fields[at])
	if err != nil {
		return nil, err
	}
	p.warning = warning
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
		if fields[at+1] == "Local" {
			// GoKubeDownscaler reads Local as the zone of its own process, which is UTC in
			// its image; the operator's own zone is nothing a schedule should depend on.
			loc = time.UTC
			p.warning = joinWarnings(p.warning, `time zone "Local" is read as UTC, the zone of GoKubeDownscaler's image; name the zone, such as Europe/Berlin`)
		} else if loc, err = loadZone(fields[at+1]); err != nil {
			return nil, err
		}
	} else if loc, err = p.defaultZone(); err != nil {
		return nil, err
	}
	return &recurrence{days: days, spans: spans, loc: loc}, nil
}

func joinWarnings(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// span is a time window on a listed day, in minutes of the day: [start, end), and when
// end is before start, from start to midnight and on into the next day until end.
type span struct{ start, end int }

// window parses "HH:MM-HH:MM" into spans; the end may be 24:00.
//
// Times are read strictly: hours 00–23, minutes 00–59, and 24:00 only as an end, and a
// window that starts where it ends is no window. kube-downscaler accepts any two digits
// (it compares hour*60+minute with the time of day, so 25:00 lies after every time of
// day), GoKubeDownscaler hours up to 24 and any start (it wraps a window whose start is
// after its end within the same day). So that a schedule either accepts is never
// rejected, such a window is read as they read it, and the returned warning says how.
func window(s string) (spans []span, warning string, err error) {
	from, to, ok := strings.Cut(s, "-")
	if !ok {
		return nil, "", fmt.Errorf("time window %q: expected HH:MM-HH:MM", s)
	}
	start, err := clock(from)
	if err != nil {
		return nil, "", fmt.Errorf("start %w", err)
	}
	end, err := clock(to)
	if err != nil {
		return nil, "", fmt.Errorf("end %w", err)
	}
	if start.valid(false) && end.valid(true) && start.minutes() != end.minutes() {
		return []span{{start.minutes(), end.minutes()}}, "", nil
	}
	return lenientWindow(start, end)
}

// lenientWindow reads a window the strict reading rejects as the peers do: as
// GoKubeDownscaler when it accepts both times (hours up to 24, minutes up to 59), else as
// kube-downscaler. Either way the result lies within one day.
func lenientWindow(start, end clockTime) ([]span, string, error) {
	a, b := start.minutes(), end.minutes()
	peer := "kube-downscaler"
	var spans []span
	add := func(from, to int) {
		from, to = min(from, minutesPerDay), min(to, minutesPerDay)
		if from < to {
			spans = append(spans, span{from, to})
		}
	}
	switch {
	case start.goAccepts() && end.goAccepts() && a > b:
		peer = "GoKubeDownscaler"
		add(a, minutesPerDay)
		add(0, b)
	case start.goAccepts() && end.goAccepts():
		peer = "kube-downscaler and GoKubeDownscaler"
		add(a, b)
	default:
		add(a, b)
	}
	meaning := "never matches"
	if len(spans) > 0 {
		var parts []string
		for _, sp := range spans {
			parts = append(parts, formatMinutes(sp.start)+"-"+formatMinutes(sp.end))
		}
		meaning = "is " + strings.Join(parts, " and ") + " on the listed days"
	}
	verb := "reads"
	if strings.Contains(peer, " and ") {
		verb = "read"
	}
	return spans, fmt.Sprintf("%s-%s %s, as %s %s it (%s)", start.text, end.text, meaning, peer, verb, strictReason(start, end)), nil
}

// strictReason says why the strict reading rejects a window.
func strictReason(start, end clockTime) string {
	var reasons []string
	switch {
	case start.m > 59:
		reasons = append(reasons, fmt.Sprintf("minute %d of the start is out of range 0-59", start.m))
	case start.h == 24 && start.m == 0:
		reasons = append(reasons, "24:00 is the end of the day, not a start; use 00:00")
	case start.h > 23:
		reasons = append(reasons, fmt.Sprintf("hour %d of the start is out of range 0-23", start.h))
	}
	switch {
	case end.m > 59:
		reasons = append(reasons, fmt.Sprintf("minute %d of the end is out of range 0-59", end.m))
	case end.h == 24 && end.m != 0:
		reasons = append(reasons, "an end hour of 24 is only valid as 24:00")
	case end.h > 24:
		reasons = append(reasons, fmt.Sprintf("hour %d of the end is out of range 0-24", end.h))
	}
	if len(reasons) == 0 {
		return "start and end are the same, so the window is empty; 00:00-24:00 is a whole day"
	}
	return strings.Join(reasons, "; ")
}

func formatMinutes(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// clockTime is an HH:MM as written: any two digits each.
type clockTime struct {
	text string
	h, m int
}

func (c clockTime) minutes() int { return c.h*60 + c.m }

// valid reports whether the strict reading accepts the time: 00:00–23:59, or 24:00 as
// an end.
func (c clockTime) valid(end bool) bool {
	return c.h < 24 && c.m < 60 || end && c.h == 24 && c.m == 0
}

// goAccepts reports whether GoKubeDownscaler accepts the time: hours 0–24, minutes 0–59.
func (c clockTime) goAccepts() bool { return c.h <= 24 && c.m < 60 }

// clock parses "HH:MM" with two digits each; which values are valid is window's concern.
func clock(s string) (clockTime, error) {
	if len(s) != 5 || !isDigit(s[0]) || !isDigit(s[1]) || s[2] != ':' || !isDigit(s[3]) || !isDigit(s[4]) {
		return clockTime{}, fmt.Errorf("%q is not HH:MM with two digits each", s)
	}
	return clockTime{text: s, h: int(s[0]-'0')*10 + int(s[1]-'0'), m: int(s[3]-'0')*10 + int(s[4]-'0')}, nil
}

// parseWeekdays parses "Mon-Fri" (inclusive, may wrap: "Sat-Mon") or a single "Sat".
func parseWeekdays(s string) ([7]bool, error) {
	var days [7]bool
	first, last, isRange := strings.Cut(s, "-")
	if !letters(first) || isRange && !letters(last) {
		return days, fmt.Errorf("weekdays %q: expected a range such as Mon-Fri", s)
	}
	from, err := weekday(first)
	if err != nil {
		return days, err
	}
	to := from
	if isRange {
		if to, err = weekday(last); err != nil {
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

// letters reports whether s is one or more ASCII letters.
func letters(s string) bool {
	for i := range len(s) {
		if !isLetter(s[i]) {
			return false
		}
	}
	return s != ""
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
