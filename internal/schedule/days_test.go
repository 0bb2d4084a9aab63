package schedule

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestEaster(t *testing.T) {
	// Western Easter Sunday as published; 2285 and 2038 are the earliest and latest
	// dates the computus gives (22 March, 25 April).
	for _, want := range []string{
		"2000-04-23", "2019-04-21", "2024-03-31", "2025-04-20", "2026-04-05", "2027-03-28",
		"2028-04-16", "2038-04-25", "2285-03-22",
	} {
		d, err := parseDate(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := easter(d.y); got != d {
			t.Errorf("easter(%d) = %v, want %s", d.y, got, want)
		}
	}
}

// The public holidays of Bavaria (Germany) and of Austria in 2025, 2026 and 2027, as
// the states publish them (Bavaria: www.stmi.bayern.de, "Feiertage"; Austria:
// www.oesterreich.gv.at, "Gesetzliche Feiertage"), copied as dates, not computed: the
// calendars below must give exactly these days, each from midnight to midnight in the
// schedule's zone.
var publishedHolidays = map[string][]string{
	"de-by": {
		"2025-01-01", "2025-01-06", "2025-04-18", "2025-04-21", "2025-05-01", "2025-05-29", "2025-06-09",
		"2025-06-19", "2025-08-15", "2025-10-03", "2025-11-01", "2025-12-25", "2025-12-26",
		"2026-01-01", "2026-01-06", "2026-04-03", "2026-04-06", "2026-05-01", "2026-05-14", "2026-05-25",
		"2026-06-04", "2026-08-15", "2026-10-03", "2026-11-01", "2026-12-25", "2026-12-26",
		"2027-01-01", "2027-01-06", "2027-03-26", "2027-03-29", "2027-05-01", "2027-05-06", "2027-05-17",
		"2027-05-27", "2027-08-15", "2027-10-03", "2027-11-01", "2027-12-25", "2027-12-26",
	},
	"at": {
		"2025-01-01", "2025-01-06", "2025-04-21", "2025-05-01", "2025-05-29", "2025-06-09", "2025-06-19",
		"2025-08-15", "2025-10-26", "2025-11-01", "2025-12-08", "2025-12-25", "2025-12-26",
		"2026-01-01", "2026-01-06", "2026-04-06", "2026-05-01", "2026-05-14", "2026-05-25", "2026-06-04",
		"2026-08-15", "2026-10-26", "2026-11-01", "2026-12-08", "2026-12-25", "2026-12-26",
		"2027-01-01", "2027-01-06", "2027-03-29", "2027-05-01", "2027-05-06", "2027-05-17", "2027-05-27",
		"2027-08-15", "2027-10-26", "2027-11-01", "2027-12-08", "2027-12-25", "2027-12-26",
	},
}

// holidayCalendars are those two calendars as a user writes them: every holiday once,
// for every year, and no zone (each team's schedule brings its own).
var holidayCalendars = calendars{
	"de-by": {
		"new-year":       "*-01-01",
		"epiphany":       "*-01-06",
		"easter":         "easter-2, easter+1",
		"labour-day":     "*-05-01",
		"ascension":      "easter+39",
		"whit-monday":    "easter+50",
		"corpus-christi": "easter+60",
		"assumption":     "*-08-15",
		"german-unity":   "*-10-03",
		"all-saints":     "*-11-01",
		"christmas":      "*-12-25, *-12-26",
	},
	"at": {
		"fixed":   "*-01-01, *-01-06, *-05-01, *-08-15, *-10-26, *-11-01, *-12-08, *-12-25, *-12-26",
		"movable": "easter+1, easter+39, easter+50, easter+60",
	},
}

func TestWholeDaysMatchPublishedHolidays(t *testing.T) {
	for name, zone := range map[string]string{"de-by": "Europe/Berlin", "at": "Europe/Vienna"} {
		t.Run(name, func(t *testing.T) {
			loc, err := time.LoadLocation(zone)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Parse("holidays:"+name, Defaults{TimeZone: zone, Calendars: holidayCalendars})
			if err != nil {
				t.Fatal(err)
			}
			want := publishedHolidays[name]
			var got []string
			for day := time.Date(2025, 1, 1, 0, 0, 0, 0, loc); day.Year() < 2028; day = day.AddDate(0, 0, 1) {
				next := day.AddDate(0, 0, 1)
				first, last := s.Contains(day), s.Contains(next.Add(-time.Second))
				if first != last {
					t.Errorf("%s: Contains differs at its first and last second (%v, %v)", day.Format(time.DateOnly), first, last)
				}
				if first {
					got = append(got, day.Format(time.DateOnly))
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("holidays 2025-2027:\n got %v\nwant %v", got, want)
			}
		})
	}
}

func TestWholeDaysFollowTheWallClock(t *testing.T) {
	vienna, err := time.LoadLocation("Europe/Vienna")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse("holidays:at", Defaults{TimeZone: "Europe/Vienna", Calendars: holidayCalendars})
	if err != nil {
		t.Fatal(err)
	}
	// Austria's national day in 2025 is the Sunday the clocks go back: 25 hours long.
	start := time.Date(2025, 10, 26, 0, 0, 0, 0, vienna)
	end := time.Date(2025, 10, 27, 0, 0, 0, 0, vienna)
	if got := end.Sub(start); got != 25*time.Hour {
		t.Fatalf("the day is %v long, want 25h", got)
	}
	if got := s.Next(start.Add(-12 * time.Hour)); !got.Equal(start) {
		t.Errorf("Next before the day = %v, want its midnight %v", got, start)
	}
	if got := s.Next(start); !got.Equal(end) {
		t.Errorf("Next on the day = %v, want the next midnight %v", got, end)
	}
	if !s.Contains(end.Add(-time.Minute)) || s.Contains(end) {
		t.Errorf("the day's last minute must be inside and the next midnight outside")
	}
	// Christmas and Stefanitag are one stretch: Next skips the midnight between them.
	xmas := time.Date(2025, 12, 25, 0, 0, 0, 0, vienna)
	if got, want := s.Next(xmas), time.Date(2025, 12, 27, 0, 0, 0, 0, vienna); !got.Equal(want) {
		t.Errorf("Next on Christmas = %v, want %v", got, want)
	}
	// And the day after the last holiday of a year finds the first of the next one.
	if got, want := s.Next(time.Date(2025, 12, 28, 0, 0, 0, 0, vienna)), time.Date(2026, 1, 1, 0, 0, 0, 0, vienna); !got.Equal(want) {
		t.Errorf("Next after Stefanitag = %v, want %v", got, want)
	}
}

func TestWholeDaysTakeTheZoneOfTheScheduleThatUsesThem(t *testing.T) {
	cals := calendars{"xmas": {"christmas": "*-12-25"}, "eve": {"eve": "2026-12-24"}}
	// 2026-12-24T20:00Z is Christmas morning in Tokyo (05:00) and Christmas Eve
	// afternoon in New York (15:00).
	morning := time.Date(2026, 12, 24, 20, 0, 0, 0, time.UTC)
	cases := []struct {
		name, spec, zone string
		want             bool
	}{
		{"in the default zone", "holidays:xmas", "Asia/Tokyo", true},
		{"in another default zone", "holidays:xmas", "America/New_York", false},
		{"an absolute day in the default zone", "holidays:eve", "America/New_York", true},
		{"an absolute day in another", "holidays:eve", "Asia/Tokyo", false},
		{"the zone after the calendar's name wins over the default", "holidays:xmas Asia/Tokyo", "America/New_York", true},
		{"in either direction", "holidays:xmas America/New_York", "Asia/Tokyo", false},
		{"the one zone of the schedule's recurring elements wins over the default", "Sat 00:00-01:00 Asia/Tokyo, holidays:xmas", "America/New_York", true},
		{"in either direction, too", "Sat 00:00-01:00 America/New_York, holidays:xmas", "Asia/Tokyo", false},
		{"days in the schedule itself", "Mon-Fri 08:00-09:00 Asia/Tokyo, 2026-12-25..2026-12-27", "America/New_York", true},
		{"with their own zone", "Mon-Fri 08:00-09:00 Asia/Tokyo, 2026-12-25..2026-12-27 America/New_York", "America/New_York", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, Defaults{TimeZone: c.zone, Calendars: cals})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Contains(morning); got != c.want {
				t.Errorf("Contains(%v) = %v, want %v", morning, got, c.want)
			}
		})
	}
	t.Run("a zone written in the calendar stays", func(t *testing.T) {
		fixed := calendars{"xmas": {"christmas": "*-12-25 America/New_York"}}
		s, err := Parse("holidays:xmas", Defaults{TimeZone: "Asia/Tokyo", Calendars: fixed})
		if err != nil {
			t.Fatal(err)
		}
		if s.Contains(morning) {
			t.Errorf("Christmas in New York contains %v (Christmas Eve there)", morning)
		}
	})
	t.Run("days in a schedule itself", func(t *testing.T) {
		s, err := Parse("Mon-Fri 08:00-18:00 Asia/Tokyo, 2026-12-25..2026-12-27", Defaults{TimeZone: "America/New_York"})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Contains(morning) {
			t.Errorf("the range is read in the schedule's zone, Tokyo")
		}
	})
}

func TestWholeDaysRejects(t *testing.T) {
	cases := []struct {
		name, spec, want string
		d                Defaults
	}{
		{"a day that does not exist", "2026-02-30", "not a date", Defaults{TimeZone: "UTC"}},
		{"a range that ends before it starts", "2026-12-26..2026-12-24", "the last day is before the first", Defaults{TimeZone: "UTC"}},
		{"a yearly 29 February", "*-02-29", "not a yearly day", Defaults{TimeZone: "UTC"}},
		{"a yearly day that does not exist", "*-04-31", "a yearly day is *-MM-DD", Defaults{TimeZone: "UTC"}},
		{"Easter without a sign", "easter2", "easter+N or easter-N", Defaults{TimeZone: "UTC"}},
		{"too far from Easter", "easter+365", "at most 100 days from Easter", Defaults{TimeZone: "UTC"}},
		{"an unknown zone", "*-12-25 Europe/Nowhere", "unknown time zone", Defaults{}},
		{"no zone at all", "*-12-25", "whole days are read in the schedule's time zone", Defaults{}},
		{"two zones and no default", "Mon 08:00-09:00 UTC, Tue 08:00-09:00 Asia/Tokyo, 2026-12-25", "has none", Defaults{}},
		{"a calendar's days with no zone to read them in", "holidays:xmas", "whole days are read in the schedule's time zone",
			Defaults{Calendars: calendars{"xmas": {"christmas": "*-12-25"}}}},
		{"a bad zone after the calendar's name", "holidays:xmas Mars/Olympus", "unknown time zone",
			Defaults{Calendars: calendars{"xmas": {"christmas": "2026-12-25T00:00:00Z-2026-12-26T00:00:00Z"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.spec, c.d)
			if err == nil {
				t.Fatalf("Parse(%q) accepted it", c.spec)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse(%q) = %q, want it to say %q", c.spec, err, c.want)
			}
		})
	}
	t.Run("a calendar with a bad day names it", func(t *testing.T) {
		_, err := ParseCalendar("de-by", map[string]string{"ok": "*-12-25", "bad": "easter+500"}, Defaults{})
		if err == nil || !strings.Contains(err.Error(), `"bad"`) || strings.Contains(err.Error(), `"ok"`) {
			t.Errorf("ParseCalendar = %v, want the bad entry named, the other not", err)
		}
	})
}

func TestWholeDaysArePhalanksOwn(t *testing.T) {
	readings, err := PeerReadings("*-12-25, easter+1", Defaults{TimeZone: "Europe/Berlin"})
	if err != nil {
		t.Fatal(err)
	}
	if len(readings) != 2 {
		t.Fatalf("readings = %+v, want both peers", readings)
	}
	for _, r := range readings {
		if !r.Rejected {
			t.Errorf("%s accepts whole days: %+v", r.Peer, r)
		}
	}
}

// A calendar of many yearly days costs the same per day as one of a few: deciding a
// year of days with a thousand rules stays far below a millisecond per day.
func TestManyWholeDaysStayCheap(t *testing.T) {
	var entries []string
	for m := 1; m <= 12; m++ {
		for d := 1; d <= 28; d += 3 {
			entries = append(entries, time.Date(2001, time.Month(m), d, 0, 0, 0, 0, time.UTC).Format("*-01-02"))
		}
	}
	for n := -maxEasterOffset; n <= maxEasterOffset; n += 7 {
		if n >= 0 {
			entries = append(entries, "easter+"+strconv.Itoa(n))
		} else {
			entries = append(entries, "easter"+strconv.Itoa(n))
		}
	}
	cal := calendars{"many": {"all": strings.Join(entries, ", ")}}
	s, err := Parse("holidays:many", Defaults{TimeZone: "Europe/Berlin", Calendars: cal})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBudget(nextBudget)
	x := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 200 {
		n := s.NextWithin(x, b)
		if n.IsZero() || !n.After(x) {
			t.Fatalf("NextWithin(%v) = %v", x, n)
		}
		x = n
	}
	if b.Spent() {
		t.Errorf("two hundred transitions spent the whole budget")
	}
}
