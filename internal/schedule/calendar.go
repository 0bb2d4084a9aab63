package schedule

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// HolidaysPrefix starts an element that names a holiday calendar: holidays:de-by. The
// element contains what the calendar does.
const HolidaysPrefix = "holidays:"

// calendarName is a Kubernetes object name (a DNS subdomain): calendars are ConfigMaps.
var calendarName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// holidaysRef reports whether an element names a calendar, and which (as written): the
// name, and the zone written after it (holidays:de-by Europe/Berlin), which the
// calendar's whole days that name none are read in.
func holidaysRef(text string) (name, zone string, ok bool) {
	if len(text) < len(HolidaysPrefix) || !strings.EqualFold(text[:len(HolidaysPrefix)], HolidaysPrefix) {
		return "", "", false
	}
	name, zone, _ = strings.Cut(strings.TrimSpace(text[len(HolidaysPrefix):]), " ")
	return name, strings.TrimSpace(zone), true
}

// holidays looks a calendar up.
func (p *parser) holidays(name string) (*Schedule, error) {
	switch {
	case name == "":
		return nil, errors.New("missing calendar name after holidays:, such as holidays:de-by")
	case len(name) > 253 || !calendarName.MatchString(name):
		return nil, fmt.Errorf("holiday calendar %q: a calendar is named like a ConfigMap (lower-case letters, digits, '-' and '.')", name)
	case p.defaults.Calendars == nil:
		return nil, fmt.Errorf("holiday calendar %q: calendars cannot be used here", name)
	}
	return p.defaults.Calendars.Calendar(name)
}

// ParseCalendar parses a holiday calendar: entries (the data of its ConfigMap), each a
// schedule in the grammar of Parse such as a comma-separated list of absolute ranges,
// under a key that names it (christmas, 2026, company-shutdown). The calendar contains
// an instant when any entry does. It may not name other calendars, and its entries
// together have at most MaxElements elements (counted before any is parsed, so that an
// oversized calendar costs no more than counting its commas). Every entry is
// validated; the error names the calendar, each bad entry by key and the reason.
func ParseCalendar(name string, entries map[string]string, d Defaults) (*Schedule, error) {
	d.Calendars = nil
	keys := make([]string, 0, len(entries))
	total := 0
	for k, spec := range entries {
		keys = append(keys, k)
		total += strings.Count(spec, ",") + 1
	}
	if total > MaxElements {
		return nil, fmt.Errorf("holiday calendar %q is invalid: %s in its %d entries together", name, tooMany(total), len(entries))
	}
	slices.Sort(keys)
	var b builder
	var problems []string
	for _, k := range keys {
		spec := entries[k]
		if ref := nestedCalendar(spec); ref != "" {
			problems = append(problems, fmt.Sprintf("%s: %q names another calendar; calendars do not nest", strconv.Quote(k), ref))
			continue
		}
		s, err := parse(spec, d, true)
		if err != nil {
			problems = append(problems, strconv.Quote(k)+": "+err.Error())
			continue
		}
		b.include(s)
		for _, w := range s.warnings {
			b.warnings = append(b.warnings, "holiday calendar "+strconv.Quote(name)+" "+strconv.Quote(k)+": "+w)
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("holiday calendar %q is invalid: %s", name, strings.Join(problems, "; "))
	}
	return b.build(), nil
}

// nestedCalendar returns the first element of spec that names a calendar.
func nestedCalendar(spec string) string {
	for _, part := range strings.Split(spec, ",") {
		if _, _, ok := holidaysRef(strings.TrimSpace(part)); ok {
			return strings.TrimSpace(part)
		}
	}
	return ""
}

// References returns the calendars a schedule specification names, without parsing it.
func References(spec string) []string {
	var out []string
	for _, part := range strings.Split(spec, ",") {
		if name, _, ok := holidaysRef(strings.TrimSpace(part)); ok && name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}
