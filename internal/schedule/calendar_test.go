package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// calendars is a fixed set of calendars, parsed as the operator parses ConfigMaps.
type calendars map[string]map[string]string

func (c calendars) Calendar(name string) (*Schedule, error) {
	entries, ok := c[name]
	if !ok {
		return nil, errors.New("unknown holiday calendar " + name)
	}
	return ParseCalendar(name, entries, Defaults{})
}

func TestHolidayCalendars(t *testing.T) {
	cals := calendars{
		"de-by": {
			"christmas": "2026-12-24T00:00:00+01:00-2026-12-27T00:00:00+01:00",
			"new-year":  "2027-01-01T00:00:00+01:00-2027-01-02T00:00:00+01:00, 2027-01-06T00:00:00+01:00-2027-01-07T00:00:00+01:00",
		},
		"shutdown": {"summer": "2027-08-02T00:00:00+02:00 - 2027-08-16T00:00:00+02:00"},
	}
	d := Defaults{Calendars: cals}
	cases := []struct {
		name, spec, at string
		want           bool
	}{
		{"a calendar contains its holidays", "holidays:de-by", "2026-12-25T12:00:00+01:00", true},
		{"and not the days between them", "holidays:de-by", "2026-12-28T12:00:00+01:00", false},
		{"every entry counts", "holidays:de-by", "2027-01-06T09:00:00+01:00", true},
		{"a calendar joins the other elements", "Mon-Fri 00:00-06:00 UTC, holidays:shutdown", "2027-08-04T12:00:00+02:00", true},
		{"the name is read case-insensitively after the prefix", "HOLIDAYS: de-by", "2026-12-24T00:00:00+01:00", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, d)
			if err != nil {
				t.Fatal(err)
			}
			at, err := time.Parse(time.RFC3339, c.at)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Contains(at); got != c.want {
				t.Errorf("Contains(%s) = %v, want %v", c.at, got, c.want)
			}
		})
	}

	t.Run("its ranges are boundaries for Next, however far ahead", func(t *testing.T) {
		s, err := Parse("holidays:shutdown", d)
		if err != nil {
			t.Fatal(err)
		}
		from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
		if got, want := s.Next(from), time.Date(2027, 8, 1, 22, 0, 0, 0, time.UTC); !got.Equal(want) {
			t.Errorf("Next = %s, want %s", got, want)
		}
	})
}

func TestHolidayCalendarErrorsNameTheCalendar(t *testing.T) {
	cases := []struct {
		name, spec string
		cals       Calendars
		want       []string
	}{
		{"an unknown calendar", "Mon-Fri 08:00-18:00 UTC, holidays:at", calendars{}, []string{`element 2 "holidays:at"`, "unknown holiday calendar at"}},
		{"a name no ConfigMap can have", "holidays:DE_BY", calendars{}, []string{`holiday calendar "DE_BY"`, "named like a ConfigMap"}},
		{"no name", "holidays:", calendars{}, []string{"missing calendar name"}},
		{"no calendars where the schedule is read", "holidays:de-by", nil, []string{`holiday calendar "de-by": calendars cannot be used here`}},
		{"an invalid entry, by key", "holidays:bad", calendars{"bad": {"ok": "2026-12-24T00:00:00Z-2026-12-25T00:00:00Z", "typo": "2026-12-31-2027-01-01"}},
			[]string{`holiday calendar "bad" is invalid`, `"typo": element 1`}},
		{"a calendar that names another", "holidays:outer", calendars{"outer": {"all": "holidays:inner"}, "inner": {"x": "always"}},
			[]string{`"all": "holidays:inner" names another calendar`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.spec, Defaults{Calendars: c.cals})
			if err == nil {
				t.Fatal("parsed, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestReferencesListsTheCalendarsASpecNames(t *testing.T) {
	got := References("Mon-Fri 08:00-18:00 UTC, holidays:de-by,holidays:shutdown , Holidays:de-by")
	if strings.Join(got, ",") != "de-by,shutdown" {
		t.Errorf("References = %v", got)
	}
}

func TestPeerReadingsOfWhatTheyReadDifferently(t *testing.T) {
	cases := []struct {
		name, spec string
		want       map[string]string // peer → its reading ("rejected" when it refuses it)
	}{
		{"a reversed window", "Mon-Fri 20:00-08:00 Europe/Berlin", map[string]string{
			KubeDownscaler:   "never",
			GoKubeDownscaler: "Mon-Fri 20:00-24:00 Europe/Berlin, Mon-Fri 00:00-08:00 Europe/Berlin",
		}},
		{"a single weekday", "Sat 10:00-12:00 UTC", map[string]string{KubeDownscaler: "rejected", GoKubeDownscaler: "rejected"}},
		{"from", "from 2026-01-01T00:00:00+00:00", map[string]string{KubeDownscaler: "rejected"}},
		{"Z in an absolute range", "2026-12-24T00:00:00Z-2026-12-27T00:00:00Z", map[string]string{KubeDownscaler: "rejected"}},
		{"what all three read alike", "Mon-Fri 07:30-20:30 Europe/Berlin, 2026-12-24T00:00:00+01:00-2026-12-27T00:00:00+01:00", map[string]string{}},
		{"a holiday calendar", "Mon-Fri 08:00-18:00 UTC, holidays:de-by", map[string]string{KubeDownscaler: "rejected", GoKubeDownscaler: "rejected"}},
	}
	d := Defaults{Calendars: calendars{"de-by": {"x": "2026-12-24T00:00:00Z-2026-12-25T00:00:00Z"}}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			readings, err := PeerReadings(c.spec, d)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range readings {
				got[r.Peer] = r.Spec
				if r.Rejected {
					got[r.Peer] = "rejected"
				}
				if len(r.Notes) == 0 {
					t.Errorf("%s: no note says what differs", r.Peer)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("readings %v, want %v", got, c.want)
			}
			for peer, want := range c.want {
				if got[peer] != want {
					t.Errorf("%s reads %q, want %q", peer, got[peer], want)
				}
			}
			for _, r := range readings {
				if !r.Rejected {
					if _, err := Parse(r.Spec, d); err != nil {
						t.Errorf("%s's reading %q does not parse: %v", r.Peer, r.Spec, err)
					}
				}
			}
		})
	}
}

// hourlyRanges returns n touching absolute ranges of an hour each from start, as a
// tenant's calendar of every hour would hold them.
func hourlyRanges(start time.Time, n int) string {
	parts := make([]string, n)
	for i := range parts {
		a := start.Add(time.Duration(i) * time.Hour)
		parts[i] = a.Format(time.RFC3339) + "-" + a.Add(time.Hour).Format(time.RFC3339)
	}
	return strings.Join(parts, ", ")
}

func TestTheElementBoundCountsCalendars(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t.Run("a calendar of twenty thousand ranges is rejected, whatever its entries", func(t *testing.T) {
		entries := map[string]string{"a": hourlyRanges(start, 10000), "b": hourlyRanges(start.Add(10000*time.Hour), 10000)}
		_, err := ParseCalendar("every-hour", entries, Defaults{})
		if err == nil || !strings.Contains(err.Error(), `holiday calendar "every-hour" is invalid: too many elements: 20000 (at most 1000)`) {
			t.Fatalf("error %v, want the bound named", err)
		}
	})
	t.Run("a calendar at the bound is accepted", func(t *testing.T) {
		if _, err := ParseCalendar("full", map[string]string{"a": hourlyRanges(start, 600), "b": hourlyRanges(start, 400)}, Defaults{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a schedule's own elements and its calendars' count together", func(t *testing.T) {
		d := Defaults{Calendars: calendars{"full": {"a": hourlyRanges(start, MaxElements)}}}
		if s, err := Parse("holidays:full", d); err != nil || s.Size() != MaxElements {
			t.Fatalf("a schedule of one full calendar: size %d, error %v", s.Size(), err)
		}
		_, err := Parse("Mon-Fri 08:00-18:00 UTC, holidays:full", d)
		if err == nil || !strings.Contains(err.Error(), "too many elements: 1001 (at most 1000), counting those of the holiday calendars it names") {
			t.Fatalf("error %v, want the bound named", err)
		}
	})
}

func TestTouchingRangesAreCrossedInOneStep(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := Parse(hourlyRanges(start, MaxElements), Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBudget(4)
	if got, want := s.NextWithin(start.Add(30*time.Minute), b), start.Add(MaxElements*time.Hour); !got.Equal(want) {
		t.Errorf("Next = %s, want the end of the last range, %s", got, want)
	}
	if b.Spent() {
		t.Error("crossing the ranges took more than one step")
	}
}

func TestNextWithinABudgetStopsOnTheWayAndGoesOnFromThere(t *testing.T) {
	// Two zones that hand over to each other every day: nothing changes for a year,
	// then summer time opens a gap.
	s, err := Parse("Mon-Sun 00:00-12:00 Europe/Berlin, Mon-Sun 11:00-24:00 UTC", Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2024, 1, 15, 10, 0, 0, 0, time.UTC)
	want := s.Next(from)
	if !want.Equal(time.Date(2024, 3, 31, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("Next = %s", want)
	}
	x, hops := from, 0
	for {
		b := NewBudget(50)
		got := s.NextWithin(x, b)
		if !got.After(x) || got.After(want) {
			t.Fatalf("NextWithin(%s) = %s: not after it, or past the change at %s", x, got, want)
		}
		hops++
		if got.Equal(want) {
			break
		}
		if !b.Spent() {
			t.Fatalf("NextWithin(%s) = %s, which is no change, with budget left", x, got)
		}
		if s.Contains(got) != s.Contains(from) {
			t.Fatalf("NextWithin stopped at %s, where the schedule changes, without saying so", got)
		}
		x = got
	}
	if hops < 2 {
		t.Errorf("a budget of 50 units found the change in %d search", hops)
	}
}
