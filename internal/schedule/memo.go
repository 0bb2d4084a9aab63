package schedule

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ownPart is what a specification says besides its calendars: its other elements,
// parsed and merged, what is wrong with them, and where it names calendars.
type ownPart struct {
	// schedule holds the elements other than calendars; its warnings are theirs.
	schedule *Schedule
	warnings []noted
	problems []noted
	// calendars are the holidays:<name> elements, in order.
	calendars []calendarRef
}

// calendarRef is a holidays:<name> element.
type calendarRef struct {
	index            int
	text, name, zone string
}

// noted is a problem or warning about the element at index, so that those about
// calendars, found at every call, fall in place among the others.
type noted struct {
	index int
	text  string
}

func texts(ns []noted) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.text
	}
	return out
}

func inOrder(ns []noted) []noted {
	slices.SortStableFunc(ns, func(a, b noted) int { return a.index - b.index })
	return ns
}

func elementName(i int, text string) string {
	return "element " + strconv.Itoa(i+1) + " " + strconv.Quote(text) + ": "
}

// readOwn parses what spec says besides its calendars, with zone and weekdays as the
// defaults, or returns what an earlier call parsed. The result is shared: nothing
// changes it afterwards. Whole days that name no zone are read in the schedule's zone
// (see zoneOfDays), or, inCalendar, left for the schedule that names the calendar.
func readOwn(spec, zone, weekdays string, inCalendar bool) *ownPart {
	key := memoKey{spec, zone, weekdays, inCalendar}
	if o, ok := memo.get(key); ok {
		return o
	}
	p := parser{defaults: Defaults{TimeZone: zone, Weekdays: weekdays}}
	var b builder
	o := &ownPart{}
	var unzoned []noted
	var unzonedRules []dayRule
	for i, part := range strings.Split(spec, ",") {
		text := strings.TrimSpace(part)
		p.warning = ""
		if name, refZone, ok := holidaysRef(text); ok {
			o.calendars = append(o.calendars, calendarRef{index: i, text: text, name: name, zone: refZone})
			continue
		}
		b.size++
		r, e, err := p.element(text)
		if err != nil {
			o.problems = append(o.problems, noted{i, elementName(i, text) + err.Error()})
			continue
		}
		if p.warning != "" {
			o.warnings = append(o.warnings, noted{i, elementName(i, text) + p.warning})
		}
		if d, ok := e.(days); ok && d.loc == nil && !inCalendar {
			unzoned = append(unzoned, noted{index: i, text: text})
			unzonedRules = append(unzonedRules, d.rules...)
			continue
		}
		b.add(r, e)
	}
	if len(unzoned) > 0 {
		loc, err := p.zoneOfDays(b.byZone)
		if err != nil {
			for _, u := range unzoned {
				o.problems = append(o.problems, noted{u.index, elementName(u.index, u.text) + err.Error()})
			}
			o.problems = inOrder(o.problems)
		} else {
			b.bind(unzonedRules, loc)
		}
	}
	b.warnings = texts(o.warnings)
	o.schedule = b.build()
	memo.put(key, o)
	return o
}

type memoKey struct {
	spec, zone, weekdays string
	inCalendar           bool
}

// memo remembers the own parts of the specifications read lately. It is bounded by
// the length of the specifications it holds (what they parse to grows with it): when
// full, it starts again empty.
var memo = &ownParts{parts: map[memoKey]*ownPart{}}

// memoLimit is the total length of the specifications memo holds.
const memoLimit = 8 << 20

type ownParts struct {
	mu    sync.Mutex
	parts map[memoKey]*ownPart
	bytes int
}

func (m *ownParts) get(k memoKey) (*ownPart, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.parts[k]
	return o, ok
}

func (m *ownParts) put(k memoKey, o *ownPart) {
	n := len(k.spec) + len(k.zone) + len(k.weekdays)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bytes+n > memoLimit {
		clear(m.parts)
		m.bytes = 0
	}
	if _, ok := m.parts[k]; !ok {
		m.parts[k] = o
		m.bytes += n
	}
}
