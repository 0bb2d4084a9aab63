package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad test instant %q: %v", s, err)
	}
	return v
}

// Instants are written with the offset the named zone has at that moment, so the wall
// time a case is about can be read off directly.
func TestContains(t *testing.T) {
	berlinWork := "Mon-Fri 07:30-20:30 Europe/Berlin"
	nightShift := "Mon-Fri 20:00-08:00 UTC"
	cases := []struct {
		name     string
		spec     string
		defaults Defaults
		at       string
		want     bool
	}{
		// Recurring windows: start inclusive, end exclusive, weekdays inclusive.
		{"a window contains its start", berlinWork, Defaults{}, "2024-06-03T07:30:00+02:00", true},
		{"a window does not contain the minute before its start", berlinWork, Defaults{}, "2024-06-03T07:29:59+02:00", false},
		{"a window contains the last instant before its end", berlinWork, Defaults{}, "2024-06-03T20:29:59.999+02:00", true},
		{"a window does not contain its end", berlinWork, Defaults{}, "2024-06-03T20:30:00+02:00", false},
		{"the last weekday of a range is included", berlinWork, Defaults{}, "2024-06-07T12:00:00+02:00", true},
		{"a weekday outside the range is not", berlinWork, Defaults{}, "2024-06-08T12:00:00+02:00", false},
		{"the instant is converted into the element's zone", berlinWork, Defaults{}, "2024-06-03T05:30:00Z", true},
		{"an instant that is Monday in UTC but Sunday in the zone is Sunday", "Mon-Fri 00:00-24:00 America/New_York", Defaults{}, "2024-06-03T02:00:00Z", false},
		{"weekday names are case-insensitive", "mon-FRI 07:30-20:30 Europe/Berlin", Defaults{}, "2024-06-04T08:00:00+02:00", true},
		{"a single weekday is a one-day range", "Sat 10:00-12:00 UTC", Defaults{}, "2024-06-08T11:00:00Z", true},
		{"a single weekday excludes the next day", "Sat 10:00-12:00 UTC", Defaults{}, "2024-06-09T11:00:00Z", false},
		{"a wrapping range Sat-Mon includes Sunday", "Sat-Mon 09:00-17:00 UTC", Defaults{}, "2024-06-09T10:00:00Z", true},
		{"a wrapping range Sat-Mon includes Monday", "Sat-Mon 09:00-17:00 UTC", Defaults{}, "2024-06-10T10:00:00Z", true},
		{"a wrapping range Sat-Mon excludes Tuesday", "Sat-Mon 09:00-17:00 UTC", Defaults{}, "2024-06-11T10:00:00Z", false},
		{"a wrapping range Sat-Mon excludes Friday", "Sat-Mon 09:00-17:00 UTC", Defaults{}, "2024-06-07T10:00:00Z", false},
		{"Tue-Mon covers the whole week", "Tue-Mon 09:00-17:00 UTC", Defaults{}, "2024-06-10T10:00:00Z", true},
		{"24:00 ends a window at midnight, covering the last minute", "Fri 20:00-24:00 UTC", Defaults{}, "2024-06-07T23:59:59Z", true},
		{"24:00 does not reach into the next day", "Fri 20:00-24:00 UTC", Defaults{}, "2024-06-08T00:00:00Z", false},
		{"00:00-24:00 covers a whole day", "Sat-Sun 00:00-24:00 UTC", Defaults{}, "2024-06-09T23:59:59Z", true},

		// Reversed windows belong to the weekday on which they start.
		{"a reversed window starts on a listed weekday", nightShift, Defaults{}, "2024-06-07T20:00:00Z", true},
		{"a reversed window started on Friday runs into Saturday", nightShift, Defaults{}, "2024-06-08T07:59:59Z", true},
		{"a reversed window ends at its end time", nightShift, Defaults{}, "2024-06-08T08:00:00Z", false},
		{"Monday early morning is not inside: Sunday is not listed", nightShift, Defaults{}, "2024-06-10T02:00:00Z", false},
		{"Tuesday early morning is inside: it started Monday", nightShift, Defaults{}, "2024-06-11T02:00:00Z", true},
		{"a reversed window does not cover the daytime", nightShift, Defaults{}, "2024-06-11T12:00:00Z", false},
		{"a reversed weekend window reaches Monday morning", "Sat-Sun 22:00-06:00 UTC", Defaults{}, "2024-06-10T05:00:00Z", true},
		{"a reversed window ending at 00:00 ends at midnight", "Mon 20:00-00:00 UTC", Defaults{}, "2024-06-11T00:00:00Z", false},

		// Defaults.
		{"default weekdays fill a window without weekdays", "07:30-20:30 Europe/Berlin", Defaults{Weekdays: "Mon-Fri"}, "2024-06-05T08:00:00+02:00", true},
		{"default weekdays exclude the weekend", "07:30-20:30 Europe/Berlin", Defaults{Weekdays: "Mon-Fri"}, "2024-06-08T08:00:00+02:00", false},
		{"a default zone fills a window without zone", "Mon-Fri 07:30-20:30", Defaults{TimeZone: "Europe/Berlin"}, "2024-06-03T05:30:00Z", true},
		{"an explicit zone beats the default", "Mon-Fri 07:30-20:30 UTC", Defaults{TimeZone: "Europe/Berlin"}, "2024-06-03T05:30:00Z", false},
		{"both defaults together", "07:30-20:30", Defaults{TimeZone: "Asia/Kolkata", Weekdays: "Sun"}, "2024-06-09T08:00:00+05:30", true},

		// Absolute and directional ranges.
		{"an absolute range contains its start", "2024-11-01T22:00:00+00:00-2024-11-22T05:00:00+00:00", Defaults{}, "2024-11-01T22:00:00Z", true},
		{"an absolute range does not contain its end", "2024-11-01T22:00:00+00:00-2024-11-22T05:00:00+00:00", Defaults{}, "2024-11-22T05:00:00Z", false},
		{"an absolute range contains the instant before its end", "2024-11-01T22:00:00+00:00-2024-11-22T05:00:00+00:00", Defaults{}, "2024-11-22T04:59:59.999999999Z", true},
		{"an absolute range accepts Z and spaces around the dash", "2024-11-01T22:00:00Z - 2024-11-22T05:00:00Z", Defaults{}, "2024-11-10T00:00:00Z", true},
		{"an absolute range with negative offsets", "2024-11-01T17:00:00-05:00-2024-11-01T18:00:00-05:00", Defaults{}, "2024-11-01T22:30:00Z", true},
		{"an absolute range with fractional seconds", "2024-11-01T22:00:00.5Z-2024-11-01T23:00:00Z", Defaults{}, "2024-11-01T22:00:00.4Z", false},
		{"from includes its instant", "from 2025-01-01T00:00:00Z", Defaults{}, "2025-01-01T00:00:00Z", true},
		{"from excludes what is before", "from 2025-01-01T00:00:00Z", Defaults{}, "2024-12-31T23:59:59Z", false},
		{"from- with a dash", "from-2025-01-01T00:00:00+01:00", Defaults{}, "2024-12-31T23:00:00Z", true},
		{"from with nothing in between", "from2025-01-01T00:00:00Z", Defaults{}, "2026-01-01T00:00:00Z", true},
		{"until excludes its instant", "until 2025-01-01T00:00:00Z", Defaults{}, "2025-01-01T00:00:00Z", false},
		{"until includes what is before", "UNTIL-2025-01-01T00:00:00Z", Defaults{}, "2024-12-31T23:59:59Z", true},

		// Constants and lists.
		{"always", "always", Defaults{}, "2024-06-03T00:00:00Z", true},
		{"ALWAYS is case-insensitive", "ALWAYS", Defaults{}, "2024-06-03T00:00:00Z", true},
		{"true means always", "True", Defaults{}, "2024-06-03T00:00:00Z", true},
		{"never", "never", Defaults{}, "2024-06-03T00:00:00Z", false},
		{"false means never", "FALSE", Defaults{}, "2024-06-03T00:00:00Z", false},
		{"a list matches if any element does", "never, Sat-Sun 00:00-24:00 UTC, Mon-Fri 22:00-24:00 UTC", Defaults{}, "2024-06-05T23:00:00Z", true},
		{"a list matches nothing if no element does", "never, Sat-Sun 00:00-24:00 UTC, Mon-Fri 22:00-24:00 UTC", Defaults{}, "2024-06-05T21:00:00Z", false},
		{"a holiday range next to working hours", "Mon-Fri 07:30-20:30 Europe/Berlin, 2024-12-24T00:00:00+01:00-2024-12-27T00:00:00+01:00", Defaults{}, "2024-12-24T03:00:00+01:00", true},

		// Daylight saving time: the wall clock decides.
		{"Berlin spring gap: before the jump (01:59:59 CET) is outside 02:30-04:00", "Mon-Sun 02:30-04:00 Europe/Berlin", Defaults{}, "2024-03-31T00:59:59Z", false},
		{"Berlin spring gap: the jump lands at 03:00 CEST, inside 02:30-04:00", "Mon-Sun 02:30-04:00 Europe/Berlin", Defaults{}, "2024-03-31T01:00:00Z", true},
		{"Berlin spring gap: 02:00-03:00 never matches on the day of the jump", "Mon-Sun 02:00-03:00 Europe/Berlin", Defaults{}, "2024-03-31T01:00:00Z", false},
		{"Berlin spring gap: 02:00-03:00 matches again the next night", "Mon-Sun 02:00-03:00 Europe/Berlin", Defaults{}, "2024-04-01T00:30:00Z", true},
		{"Berlin fall fold: first 02:30 (CEST) is inside 02:30-03:00", "Sun 02:30-03:00 Europe/Berlin", Defaults{}, "2024-10-27T00:30:00Z", true},
		{"Berlin fall fold: the clock turns back to 02:00 CET, outside", "Sun 02:30-03:00 Europe/Berlin", Defaults{}, "2024-10-27T01:00:00Z", false},
		{"Berlin fall fold: second 02:30 (CET) is inside again", "Sun 02:30-03:00 Europe/Berlin", Defaults{}, "2024-10-27T01:30:00Z", true},
		{"Berlin fall fold: 03:00 CET is outside", "Sun 02:30-03:00 Europe/Berlin", Defaults{}, "2024-10-27T02:00:00Z", false},
		{"New York spring gap: 01:59:59 EST is outside 02:00-02:30", "Sun 02:00-02:30 America/New_York", Defaults{}, "2024-03-10T06:59:59Z", false},
		{"New York spring gap: the jump lands at 03:00 EDT, still outside", "Sun 02:00-02:30 America/New_York", Defaults{}, "2024-03-10T07:00:00Z", false},
		{"New York fall fold: first 01:30 (EDT) is inside 01:00-02:00", "Sun 01:00-02:00 America/New_York", Defaults{}, "2024-11-03T05:30:00Z", true},
		{"New York fall fold: second 01:30 (EST) is inside too", "Sun 01:00-02:00 America/New_York", Defaults{}, "2024-11-03T06:30:00Z", true},
		{"New York fall fold: 02:00 EST ends the window", "Sun 01:00-02:00 America/New_York", Defaults{}, "2024-11-03T07:00:00Z", false},
		{"a half-hour DST shift (Lord Howe) is on the wall clock too", "Sun 02:00-02:30 Australia/Lord_Howe", Defaults{}, "2024-10-05T15:30:00Z", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, c.defaults)
			if err != nil {
				t.Fatalf("Parse(%q): %v", c.spec, err)
			}
			if got := s.Contains(at(t, c.at)); got != c.want {
				t.Errorf("Parse(%q).Contains(%s) = %v, want %v", c.spec, c.at, got, c.want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	cases := []struct {
		name string
		spec string
		from string
		want string // empty: never changes
	}{
		{"inside a window, the next change is its end", "Mon-Fri 08:00-18:00 UTC", "2024-06-03T10:00:00Z", "2024-06-03T18:00:00Z"},
		{"after Friday's window, the next change is Monday's start", "Mon-Fri 08:00-18:00 UTC", "2024-06-07T18:00:00Z", "2024-06-10T08:00:00Z"},
		{"exactly at a start, the next change is the end", "Mon-Fri 08:00-18:00 UTC", "2024-06-03T08:00:00Z", "2024-06-03T18:00:00Z"},
		{"a fraction of a second before a start, the start", "Mon-Fri 08:00-18:00 UTC", "2024-06-03T07:59:59.5Z", "2024-06-03T08:00:00Z"},
		{"consecutive whole days merge into one stretch", "Mon-Fri 00:00-24:00 UTC", "2024-06-05T12:00:00Z", "2024-06-08T00:00:00Z"},
		{"a reversed window ends the morning after", "Mon-Fri 20:00-08:00 UTC", "2024-06-08T07:00:00Z", "2024-06-08T08:00:00Z"},
		{"after Saturday morning the reversed window starts Monday evening", "Mon-Fri 20:00-08:00 UTC", "2024-06-08T08:00:00Z", "2024-06-10T20:00:00Z"},
		{"overlapping elements end at the later end", "Mon-Fri 08:00-18:00 UTC, Mon-Fri 17:00-20:00 UTC", "2024-06-03T10:00:00Z", "2024-06-03T20:00:00Z"},
		{"a whole week never changes", "Mon-Sun 00:00-24:00 Europe/Berlin", "2024-06-03T10:00:00Z", ""},
		{"two elements covering the week never change", "Mon-Fri 00:00-24:00 UTC, Sat-Sun 00:00-24:00 UTC", "2024-06-03T10:00:00Z", ""},
		{"always never changes", "always", "2024-06-03T10:00:00Z", ""},
		{"never never changes", "never", "2024-06-03T10:00:00Z", ""},
		{"before an absolute range, its start", "2024-11-01T22:00:00Z-2024-11-22T05:00:00Z", "2024-06-03T10:00:00Z", "2024-11-01T22:00:00Z"},
		{"inside an absolute range, its end", "2024-11-01T22:00:00Z-2024-11-22T05:00:00Z", "2024-11-10T10:00:00Z", "2024-11-22T05:00:00Z"},
		{"after an absolute range, never", "2024-11-01T22:00:00Z-2024-11-22T05:00:00Z", "2024-11-22T05:00:00Z", ""},
		{"until changes once", "until 2025-01-01T00:00:00Z", "2024-06-03T10:00:00Z", "2025-01-01T00:00:00Z"},
		{"touching ranges are one range", "2024-11-02T00:00:00Z-2024-11-03T00:00:00Z, 2024-11-01T00:00:00Z-2024-11-02T00:00:00Z", "2024-11-01T10:00:00Z", "2024-11-03T00:00:00Z"},
		{"a range inside another ends with the outer one", "2024-11-01T00:00:00Z-2024-11-10T00:00:00Z, 2024-11-02T00:00:00Z-2024-11-03T00:00:00Z", "2024-11-02T10:00:00Z", "2024-11-10T00:00:00Z"},
		{"an until and a from that overlap cover all time", "until 2025-01-01T00:00:00Z, from 2024-06-01T00:00:00Z", "2024-06-03T10:00:00Z", ""},
		{"an until and a later from leave a gap", "until 2024-06-01T00:00:00Z, from 2025-01-01T00:00:00Z", "2024-05-03T10:00:00Z", "2024-06-01T00:00:00Z"},
		{"a holiday range bridges the weekend and ends at its end", "Mon-Fri 08:00-18:00 UTC, 2024-01-06T00:00:00Z-2024-01-08T00:00:00Z", "2024-01-06T00:00:00Z", "2024-01-08T00:00:00Z"},
		{"working hours then a holiday range: the evening end first", "Mon-Fri 08:00-18:00 UTC, 2024-01-06T00:00:00Z-2024-01-08T00:00:00Z", "2024-01-05T17:00:00Z", "2024-01-05T18:00:00Z"},
		{"an open-ended from range covering the rest of time never changes", "Mon-Sun 08:00-18:00 UTC, from 2024-01-05T17:00:00Z", "2024-01-05T10:00:00Z", ""},
		{"Berlin spring gap: a 02:30 start happens at the jump", "Mon-Sun 02:30-04:00 Europe/Berlin", "2024-03-31T00:00:00Z", "2024-03-31T01:00:00Z"},
		{"Berlin spring gap: a window inside the gap is skipped that night", "Mon-Sun 02:00-03:00 Europe/Berlin", "2024-03-30T02:00:00Z", "2024-04-01T00:00:00Z"},
		{"Berlin fall fold: turning the clock back leaves the window", "Sun 02:30-03:00 Europe/Berlin", "2024-10-27T00:40:00Z", "2024-10-27T01:00:00Z"},
		{"Berlin fall fold: the repeated 02:30 enters it again", "Sun 02:30-03:00 Europe/Berlin", "2024-10-27T01:00:00Z", "2024-10-27T01:30:00Z"},
		{"Berlin fall fold: and 03:00 CET leaves it", "Sun 02:30-03:00 Europe/Berlin", "2024-10-27T01:30:00Z", "2024-10-27T02:00:00Z"},
		{"New York fall fold: a window containing the fold lasts two hours", "Mon-Sun 01:00-02:00 America/New_York", "2024-11-03T05:30:00Z", "2024-11-03T07:00:00Z"},
		{"New York spring gap: a window inside the gap waits a day", "Mon-Sun 02:00-02:30 America/New_York", "2024-03-10T06:00:00Z", "2024-03-11T06:00:00Z"},
		{"elements in two zones that hand over to each other all year never change", "Mon-Sun 00:00-13:00 Europe/Berlin, Mon-Sun 10:00-24:00 UTC, from 9999-01-01T00:00:00Z", "2024-01-15T10:00:00Z", ""},
		{"a Berlin and a UTC element leave a gap only in summer", "Mon-Sun 00:00-12:00 Europe/Berlin, Mon-Sun 11:00-24:00 UTC", "2024-01-15T10:00:00Z", "2024-03-31T10:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, Defaults{})
			if err != nil {
				t.Fatalf("Parse(%q): %v", c.spec, err)
			}
			got := s.Next(at(t, c.from))
			if c.want == "" {
				if !got.IsZero() {
					t.Errorf("Next(%s) = %s, want never", c.from, got.UTC().Format(time.RFC3339Nano))
				}
				return
			}
			if want := at(t, c.want); !got.Equal(want) {
				t.Errorf("Next(%s) = %s, want %s", c.from, got.UTC().Format(time.RFC3339Nano), c.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name     string
		spec     string
		defaults Defaults
		// want are substrings of the error: the element and the reason.
		want []string
	}{
		{"an empty schedule", "", Defaults{}, []string{"empty"}},
		{"a blank schedule", "   ", Defaults{}, []string{"empty"}},
		{"a trailing comma", "Mon-Fri 07:30-20:30 Europe/Berlin,", Defaults{}, []string{`element 2 ""`, "empty element"}},
		{"a leading comma", ",always", Defaults{}, []string{"element 1", "empty element"}},
		{"a one-digit hour", "Mon-Fri 8:00-18:00 UTC", Defaults{}, []string{`"8:00" is not HH:MM`}},
		{"a missing end time", "Mon-Fri 08:00 UTC", Defaults{}, []string{"expected HH:MM-HH:MM"}},
		{"a misspelt weekday", "Mon-Fry 08:00-18:00 UTC", Defaults{}, []string{`unknown weekday "Fry"`}},
		{"a full weekday name", "Monday-Friday 08:00-18:00 UTC", Defaults{}, []string{`unknown weekday "Monday"`}},
		{"a weekday list instead of a range", "Mon,Wed 08:00-18:00 UTC", Defaults{}, []string{`element 1 "Mon"`, "not a schedule element"}},
		{"an unknown zone", "Mon-Fri 08:00-18:00 Mars/Olympus", Defaults{}, []string{`unknown time zone "Mars/Olympus"`}},
		{"a lower-case zone", "Mon-Fri 08:00-18:00 europe/berlin", Defaults{}, []string{"unknown time zone"}},
		{"no zone and no default zone", "Mon-Fri 08:00-18:00", Defaults{}, []string{"no time zone given"}},
		{"no weekdays and no default week frame", "08:00-18:00 UTC", Defaults{}, []string{"no weekdays given"}},
		{"a bad default week frame", "08:00-18:00 UTC", Defaults{Weekdays: "Mon-Fry"}, []string{"default week frame", `"Fry"`}},
		{"a bad default zone", "Mon-Fri 08:00-18:00", Defaults{TimeZone: "Nowhere"}, []string{"default", `"Nowhere"`}},
		{"something after the zone", "Mon-Fri 08:00-18:00 Europe/Berlin extra", Defaults{}, []string{`unexpected "extra"`}},
		{"something before the weekdays", "weekdays Mon-Fri 08:00-18:00 UTC", Defaults{}, []string{`unexpected "weekdays"`}},
		{"a word that is no element", "sometimes", Defaults{}, []string{`"sometimes"`, "not a schedule element"}},
		{"an absolute range without an end", "2024-11-01T22:00:00+00:00", Defaults{}, []string{"not an absolute range"}},
		{"month 13", "2024-13-01T00:00:00Z-2024-12-01T00:00:00Z", Defaults{}, []string{"start", "month out of range"}},
		{"February 30", "until 2024-02-30T00:00:00Z", Defaults{}, []string{"day out of range"}},
		{"a space instead of T", "2024-11-01 22:00:00Z-2024-11-22T05:00:00Z", Defaults{}, []string{"not an absolute range"}},
		{"an offset without colon", "2024-11-01T22:00:00+0000-2024-11-22T05:00:00+0000", Defaults{}, []string{"not an absolute range"}},
		{"from without a time", "from", Defaults{}, []string{"missing time"}},
		{"from with a word", "from tomorrow", Defaults{}, []string{`"tomorrow" is not an RFC 3339 time`}},
		{"until with a date only", "until 2025-01-01", Defaults{}, []string{"not an RFC 3339 time"}},
		{"three-digit minutes", "Mon-Fri 08:000-18:00 UTC", Defaults{}, []string{`"08:000" is not HH:MM`}},
		{"a bad element after one that matches everything is still an error", "always, Mon-Fry 08:00-18:00 UTC", Defaults{}, []string{"element 2", `unknown weekday "Fry"`}},
		{"every bad element is reported", "Mon-Fri 8:00-18:00 UTC, Sat-Sun 00:00-24:00 Nowhere", Defaults{}, []string{"element 1", `"8:00"`, "element 2", `"Nowhere"`}},
		{"too many elements", strings.Repeat("always,", MaxElements) + "always", Defaults{}, []string{"too many elements"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, c.defaults)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", c.spec, s)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error %q does not mention %q", c.spec, err, w)
				}
			}
		})
	}
}

// TestParseReadsWhatPeersAccept covers what the strict reading rejects but
// kube-downscaler or GoKubeDownscaler accept: it is read as they read it, and a warning
// names the element and says how.
func TestParseReadsWhatPeersAccept(t *testing.T) {
	cases := []struct {
		name string
		spec string
		// inside and outside are instants the schedule must and must not contain.
		inside, outside []string
		// warning are substrings of the one warning.
		warning []string
	}{
		{"a zero-length window never matches, in both peers", "Mon-Fri 19:00-19:00 UTC",
			nil, []string{"2024-06-03T19:00:00Z", "2024-06-03T18:59:00Z", "2024-06-04T12:00:00Z"},
			[]string{`element 1 "Mon-Fri 19:00-19:00 UTC"`, "never matches", "kube-downscaler and GoKubeDownscaler read it", "the window is empty"}},
		{"an hour past 24 as a start never matches, as kube-downscaler compares minutes of the day", "Mon-Fri 25:00-08:00 UTC",
			nil, []string{"2024-06-03T01:00:00Z", "2024-06-03T07:00:00Z", "2024-06-03T23:59:00Z"},
			[]string{"25:00-08:00 never matches", "as kube-downscaler reads it", "hour 25 of the start is out of range 0-23"}},
		{"an hour past 24 as an end runs to midnight in kube-downscaler", "Mon-Fri 20:00-26:00 UTC",
			[]string{"2024-06-03T23:59:00Z"}, []string{"2024-06-04T00:30:00Z", "2024-06-03T19:59:00Z"},
			[]string{"is 20:00-24:00 on the listed days", "as kube-downscaler reads it", "hour 26 of the end"}},
		{"minute 75 is 15 minutes into the next hour in kube-downscaler", "Mon-Fri 08:75-10:00 UTC",
			[]string{"2024-06-03T09:15:00Z"}, []string{"2024-06-03T09:14:00Z"},
			[]string{"is 09:15-10:00", "minute 75 of the start"}},
		{"24:30 as an end is midnight, in both peers", "Mon-Fri 20:00-24:30 UTC",
			[]string{"2024-06-03T23:59:00Z"}, []string{"2024-06-04T00:15:00Z"},
			[]string{"is 20:00-24:00", "an end hour of 24 is only valid as 24:00"}},
		{"24:00 as a start is midnight of the listed day, as GoKubeDownscaler wraps it", "Mon-Fri 24:00-08:00 UTC",
			[]string{"2024-06-03T07:00:00Z"}, []string{"2024-06-04T08:00:00Z", "2024-06-08T07:00:00Z"},
			[]string{"is 00:00-08:00 on the listed days", "as GoKubeDownscaler reads it", "24:00 is the end of the day"}},
		{"an absolute range that ends before it starts never matches, in both peers", "2024-11-22T05:00:00Z-2024-11-01T22:00:00Z",
			nil, []string{"2024-11-10T00:00:00Z", "2024-11-22T05:00:00Z"},
			[]string{`element 1 "2024-11-22T05:00:00Z-2024-11-01T22:00:00Z"`, "never matches"}},
		{"an absolute range of zero length never matches", "2024-11-01T22:00:00Z-2024-11-01T22:00:00Z",
			nil, []string{"2024-11-01T22:00:00Z"}, []string{"the end is not after the start"}},
		{"the Local zone is UTC, as in GoKubeDownscaler's image", "Mon-Fri 08:00-18:00 Local",
			[]string{"2024-06-03T08:00:00Z"}, []string{"2024-06-03T07:59:00Z"}, []string{`time zone "Local" is read as UTC`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, Defaults{})
			if err != nil {
				t.Fatalf("Parse(%q): %v, want it read as the peers read it", c.spec, err)
			}
			for _, in := range c.inside {
				if !s.Contains(at(t, in)) {
					t.Errorf("Parse(%q) does not contain %s", c.spec, in)
				}
			}
			for _, out := range c.outside {
				if s.Contains(at(t, out)) {
					t.Errorf("Parse(%q) contains %s", c.spec, out)
				}
			}
			if len(s.Warnings()) != 1 {
				t.Fatalf("warnings %q, want one", s.Warnings())
			}
			for _, w := range c.warning {
				if !strings.Contains(s.Warnings()[0], w) {
					t.Errorf("warning %q does not say %q", s.Warnings()[0], w)
				}
			}
		})
	}
	if s, err := Parse("Mon-Fri 08:00-18:00 UTC, Mon-Fri 20:00-08:00 UTC", Defaults{}); err != nil || len(s.Warnings()) != 0 {
		t.Errorf("a schedule the strict reading accepts: warnings %q, error %v; want none", s.Warnings(), err)
	}
}

func TestNilScheduleContainsNothing(t *testing.T) {
	var s *Schedule
	if s.Contains(time.Now()) || !s.Next(time.Now()).IsZero() {
		t.Fatal("a nil schedule must contain nothing and never change")
	}
}

// TestNextAgreesWithAMinuteScan compares Next with the obvious slow answer on random
// schedules over zones with ordinary, half-hour and 45-minute offsets and DST rules.
func TestNextAgreesWithAMinuteScan(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham", "America/Santiago"}
	days := []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // a fixed seed makes failures reproducible; nothing here is secret
	hhmm := func() string {
		h, m := rng.IntN(25), []int{0, 15, 30, 45}[rng.IntN(4)]
		if h == 24 {
			m = 0
		}
		return fmt.Sprintf("%02d:%02d", h, m)
	}
	base := at(t, "2024-03-01T00:00:00Z")
	for i := range 300 {
		var parts []string
		for range 1 + rng.IntN(3) {
			if rng.IntN(5) == 0 {
				start := base.Add(time.Duration(rng.IntN(400*24)) * time.Hour)
				end := start.Add(time.Duration(1+rng.IntN(72)) * time.Hour)
				parts = append(parts, start.Format(time.RFC3339)+"-"+end.Format(time.RFC3339))
				continue
			}
			from, to := hhmm(), hhmm()
			if from == to || from == "24:00" {
				continue
			}
			parts = append(parts, days[rng.IntN(7)]+"-"+days[rng.IntN(7)]+" "+from+"-"+to+" "+zones[rng.IntN(len(zones))])
		}
		if len(parts) == 0 {
			continue
		}
		spec := strings.Join(parts, ", ")
		s, err := Parse(spec, Defaults{})
		if err != nil {
			t.Fatalf("case %d: Parse(%q): %v", i, spec, err)
		}
		from := base.Add(time.Duration(rng.IntN(400*24*60)) * time.Minute)
		got := s.Next(from)
		want := scanNext(s, from, 15*24*time.Hour)
		if want.IsZero() {
			if !got.IsZero() && got.Sub(from) <= 15*24*time.Hour {
				t.Errorf("case %d: Parse(%q).Next(%s) = %s, but a minute scan finds no change within 15 days",
					i, spec, from.Format(time.RFC3339), got.Format(time.RFC3339))
			}
			continue
		}
		if !got.Equal(want) {
			t.Errorf("case %d: Parse(%q).Next(%s) = %s, minute scan says %s",
				i, spec, from.Format(time.RFC3339), got.Format(time.RFC3339), want.Format(time.RFC3339))
		}
	}
}

// scanNext steps minute by minute: every boundary in these schedules falls on a whole
// UTC minute, since every offset involved is a whole number of minutes.
func scanNext(s *Schedule, from time.Time, limit time.Duration) time.Time {
	current := s.Contains(from)
	for u := from.Truncate(time.Minute).Add(time.Minute); u.Sub(from) <= limit; u = u.Add(time.Minute) {
		if s.Contains(u) != current {
			return u
		}
	}
	return time.Time{}
}

func BenchmarkNext(b *testing.B) {
	s, err := Parse("Mon-Fri 07:30-20:30 Europe/Berlin, 2024-12-24T00:00:00+01:00-2024-12-27T00:00:00+01:00", Defaults{})
	if err != nil {
		b.Fatal(err)
	}
	t := time.Date(2024, 6, 7, 21, 0, 0, 0, time.UTC)
	for b.Loop() {
		s.Next(t)
	}
}

func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := Parse("Mon-Fri 07:30-20:30 Europe/Berlin, Sat-Sun 00:00-24:00 Europe/Berlin", Defaults{}); err != nil {
			b.Fatal(err)
		}
	}
}
