package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/internal/schedule"
)

func explain(ctx context.Context, args []string, out, errOut *printer, now time.Time) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	var c common
	c.bind(fs)
	count := fs.Int("count", 6, "How many transitions to show.")
	from := fs.String("from", "", "Start from this RFC 3339 instant instead of now.")
	pos, err := parse(fs, args, errOut)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("explain takes one schedule, quoted, such as \"Mon-Fri 07:30-20:30 Europe/Berlin\"")
	}
	if *count < 1 {
		return usagef("--count must be at least 1")
	}
	if *from != "" {
		if now, err = time.Parse(time.RFC3339, *from); err != nil {
			return usagef("--from: %v", err)
		}
	}
	spec := pos[0]
	d, note := c.defaults(ctx, spec)
	s, err := schedule.Parse(spec, d)
	if err != nil {
		if note != "" {
			errOut.ln("note:", note)
		}
		return fmt.Errorf("invalid schedule: %w", err)
	}
	out.f("Schedule: %s\n", spec)
	for _, w := range s.Warnings() {
		out.f("Read as the peers read it: %s\n", w)
	}
	inside := "outside"
	if s.Contains(now) {
		inside = "inside"
	}
	out.f("Now (%s): %s\n", local(now, now), inside)
	printTransitions(out, s, now, *count)

	readings, err := schedule.PeerReadings(spec, d)
	if err != nil {
		return err
	}
	for _, r := range readings {
		out.f("\n%s reads it differently:\n", r.Peer)
		for _, n := range r.Notes {
			out.f("  %s\n", n)
		}
		if r.Rejected {
			out.f("  so %s rejects the schedule\n", r.Peer)
			continue
		}
		peer, err := schedule.Parse(r.Spec, d)
		if err != nil {
			return fmt.Errorf("%s's reading %q: %w", r.Peer, r.Spec, err)
		}
		out.f("  as: %s\n", r.Spec)
		printTransitions(out, peer, now, *count)
	}
	return nil
}

func printTransitions(w *printer, s *schedule.Schedule, now time.Time, count int) {
	w.ln("Next transitions:")
	t := now
	for range count {
		next := s.Next(t)
		if next.IsZero() {
			if t.Equal(now) {
				w.ln("  none: it never changes")
			}
			return
		}
		what := "leaves"
		if s.Contains(next) {
			what = "enters"
		}
		w.f("  %-30s %s\n", next.In(time.Local).Format("Mon 2006-01-02 15:04 MST"), what)
		t = next
	}
}

// defaults are the schedule defaults explain parses with: the operator's zone and week
// frame, and its calendars when the schedule names any. It needs the cluster only for
// those; without one the plugin's own flags give them.
func (c *common) defaults(ctx context.Context, spec string) (schedule.Defaults, string) {
	var o scaling.Options
	note := ""
	cfg, ns, err := c.restConfig()
	if err == nil {
		cl, cerr := newClient(cfg)
		if cerr == nil {
			o, note = c.settings.options(ctx, cl, c.operatorNamespace)
			d := schedule.Defaults{TimeZone: o.TimeZone, Weekdays: o.Weekdays}
			if len(schedule.References(spec)) > 0 {
				// The calendars the Namespace lets its own shadow, if the user may read it.
				var shadow []string
				namespace := &corev1.Namespace{}
				if cl.Get(ctx, client.ObjectKey{Name: ns}, namespace) == nil {
					shadow = scaling.ShadowCalendars(namespace)
				}
				d.Calendars = scaling.NewCalendars(cl, o.CalendarNamespace, d).In(ctx, ns, shadow)
			}
			return d, note
		}
		err = cerr
	}
	o, _ = c.settings.options(ctx, nil, "")
	note = "no cluster (" + strings.TrimSpace(err.Error()) + "): holiday calendars cannot be read"
	return schedule.Defaults{TimeZone: o.TimeZone, Weekdays: o.Weekdays}, note
}
