package schedule

import (
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that every rejection says why, and that
// Next and Contains agree for whatever parses: Next(t) is after t, the schedule differs
// there from t, and nothing changes in between.
//
//	go test -run '^$' -fuzz FuzzParse -fuzztime 10m ./internal/schedule
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"Mon-Fri 07:30-20:30 Europe/Berlin",
		"Sat-Mon 22:00-06:00 America/New_York, 2024-12-24T00:00:00+01:00-2024-12-27T00:00:00+01:00",
		"Mon-Fri 20:00-08:00 UTC",
		"Sun 02:30-03:00 Europe/Berlin",
		"07:30-20:30",
		"Mon-Fri 07:30-24:00",
		"2024-11-01T22:00:00Z - 2024-11-22T05:00:00Z",
		"from 2025-01-01T00:00:00Z, until-2024-01-01T00:00:00+05:30",
		"always",
		"NEVER, false, True",
		"Mon-Fri 25:00-08:00 UTC",
		",,",
		"Mon-Sun 00:00-12:00 Europe/Berlin, Mon-Sun 11:00-24:00 UTC",
		"*-12-25, *-12-26, easter-2, easter+1 Europe/Vienna, 2026-12-24..2026-12-31",
		"easter+60 America/Santiago, *-09-03 Asia/Beirut, *-03-31 America/Havana",
		"2024-1, 2024-11-01.., *-, easter+",
	} {
		f.Add(seed, int64(1717236000))
	}
	defaults := Defaults{TimeZone: "Europe/Berlin", Weekdays: "Mon-Fri"}
	f.Fuzz(func(t *testing.T, spec string, unix int64) {
		s, err := Parse(spec, defaults)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("Parse(%q) failed without saying why", spec)
			}
			return
		}
		// Instants between 1970 and about 2100, where zone rules are known.
		const span = 130 * 365 * 24 * 3600
		from := time.Unix(((unix%span)+span)%span, 0)
		current := s.Contains(from)
		next := s.Next(from)
		if next.IsZero() {
			for _, d := range []time.Duration{time.Minute, time.Hour, 25 * time.Hour, 7 * 24 * time.Hour, 100 * 24 * time.Hour} {
				if s.Contains(from.Add(d)) != current {
					t.Fatalf("Parse(%q).Next(%s) says never, but Contains changes by %s", spec, from, from.Add(d))
				}
			}
			return
		}
		if !next.After(from) {
			t.Fatalf("Parse(%q).Next(%s) = %s is not after it", spec, from, next)
		}
		if s.Contains(next) == current {
			t.Fatalf("Parse(%q).Next(%s) = %s, but Contains is %v on both", spec, from, next, current)
		}
		for _, u := range []time.Time{next.Add(-time.Nanosecond), from.Add(next.Sub(from) / 2), from.Add(next.Sub(from) / 3)} {
			if u.After(from) && s.Contains(u) != current {
				t.Fatalf("Parse(%q).Next(%s) = %s, but Contains already changes by %s", spec, from, next, u)
			}
		}
	})
}
