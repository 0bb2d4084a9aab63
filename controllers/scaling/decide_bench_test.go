package scaling

import (
	"archive/zip"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// parsedCalendars hands out calendars parsed beforehand, as the operator's Calendars
// do between changes of their ConfigMaps.
type parsedCalendars map[string]*schedule.Schedule

func (c parsedCalendars) Calendar(name string) (*schedule.Schedule, error) {
	if s, ok := c[name]; ok {
		return s, nil
	}
	return nil, errors.New("unknown holiday calendar " + name)
}

// hourly returns n touching absolute ranges of an hour each from start.
func hourly(start time.Time, n int) string {
	parts := make([]string, n)
	for i := range parts {
		a := start.Add(time.Duration(i) * time.Hour)
		parts[i] = a.Format(time.RFC3339) + "-" + a.Add(time.Hour).Format(time.RFC3339)
	}
	return strings.Join(parts, ", ")
}

// zoneNames lists the zones of Go's zone database, which the toolchain that runs the
// benchmark keeps in $GOROOT/lib/time.
func zoneNames(b *testing.B) []string {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Fatal(err)
	}
	r, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	var out []string
	for _, f := range r.File {
		if !strings.HasSuffix(f.Name, "/") && f.Name != "Local" && !strings.HasPrefix(f.Name, "posix") && !strings.HasPrefix(f.Name, "right") {
			out = append(out, f.Name)
		}
	}
	return out
}

// BenchmarkDecideTheLargestAcceptedSchedules decides workloads whose schedules are as
// large as the operator accepts (schedule.MaxElements elements per object, calendars
// included), in the shapes that cost the most: a calendar of touching hourly ranges
// (a tenant's ConfigMap of every hour), as many absolute ranges in an annotation, as
// many recurring elements spread over every zone, and two zones that hand over to each
// other for years (the search for a change that never comes). Every decision must take
// well under a millisecond: the decision budget bounds the last two.
func BenchmarkDecideTheLargestAcceptedSchedules(b *testing.B) {
	now := time.Date(2026, 6, 3, 20, 0, 0, 0, time.UTC)
	start := now.Add(-time.Hour)
	everyHour, err := schedule.ParseCalendar("every-hour", map[string]string{"hours": hourly(start, schedule.MaxElements-1)}, schedule.Defaults{})
	if err != nil {
		b.Fatal(err)
	}
	zones := zoneNames(b)
	var recurring []string
	for i := range schedule.MaxElements {
		recurring = append(recurring, fmt.Sprintf("Mon-Sun %02d:%02d-%02d:%02d %s", i%24, i%60, (i+1)%24, (i+7)%60, zones[i%len(zones)]))
	}
	cases := []struct {
		name        string
		annotations map[string]string
	}{
		{"a calendar of touching hourly ranges, downtime from now on", map[string]string{
			AnnotationUptime: "Mon-Fri 08:00-18:00 UTC", AnnotationDowntime: "holidays:every-hour"}},
		{"absolute ranges written in the annotation", map[string]string{AnnotationDowntime: hourly(start, schedule.MaxElements)}},
		{fmt.Sprintf("recurring elements over %d zones", min(len(zones), schedule.MaxElements)), map[string]string{
			AnnotationDowntime: strings.Join(recurring, ", ")}},
		{"two zones handing over to each other for years", map[string]string{
			AnnotationUptime: "Mon-Sun 00:00-13:00 Europe/Berlin, Mon-Sun 10:00-24:00 UTC, from 2099-01-01T00:00:00Z"}},
	}
	for _, c := range cases {
		in := inputs{now: now, kind: deployments.traits, grace: 15 * time.Minute,
			workload: workloadView{level: 3, created: now.Add(-24 * time.Hour), annotations: c.annotations},
			defaults: schedule.Defaults{Calendars: parsedCalendars{"every-hour": everyHour}}}
		d := decide(in)
		if d.state == stateInvalid {
			b.Fatalf("%s: %+v", c.name, d.events)
		}
		b.Run(c.name, func(b *testing.B) {
			loopWithCPU(b, func() { decide(in) })
		})
	}
}
