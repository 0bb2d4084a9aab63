package main

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inZone makes the plugin's local time zone (time.Local, from TZ) name until the test
// ends.
func inZone(t *testing.T, name string) {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	saved := time.Local
	time.Local = loc
	t.Cleanup(func() { time.Local = saved })
}

// noCluster leaves the plugin without a kubeconfig or an in-cluster configuration.
func noCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

// TestTheExitStatusSaysWhatWentWrong runs commands that end before any request to a
// cluster (there is none), as main would: wrong usage is 2 with the usage text, a
// failure 1, success and -h 0.
func TestTheExitStatusSaysWhatWentWrong(t *testing.T) {
	noCluster(t)
	inZone(t, "Europe/Berlin")
	now := time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC)
	cases := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"no command", nil, 2, "", "error: no command\n"},
		{"an unknown command", []string{"frobnicate"}, 2, "", `error: unknown command "frobnicate"`},
		{"help", []string{"help"}, 0, "Commands:", ""},
		{"a command's -h lists its flags", []string{"wake", "-h"}, 0, "", "-for duration"},
		{"an unknown flag", []string{"status", "--no-such-flag"}, 2, "", "error: flag provided but not defined: -no-such-flag"},
		{"status with an argument", []string{"status", "team"}, 2, "", `error: status takes no arguments, got ["team"]`},
		{"status without a cluster", []string{"status", "-n", "team"}, 1, "", "error: load the kubeconfig: "},
		{"wake without a target", []string{"wake"}, 2, "", "error: wake takes one target, NAMESPACE or NAMESPACE/KIND/NAME"},
		{"wake with two targets", []string{"wake", "a", "b"}, 2, "", "error: wake takes one target"},
		{"a target of two parts", []string{"wake", "team/web"}, 2, "", `error: target "team/web": want NAMESPACE or NAMESPACE/KIND/NAME`},
		{"a target with an empty part", []string{"sleep", "team//web"}, 2, "", `error: target "team//web"`},
		{"a negative --for", []string{"sleep", "team", "--for", "-1h"}, 2, "", "error: --for must be positive"},
		{"a --for that is no duration", []string{"sleep", "team", "--for", "soon"}, 2, "", `error: invalid value "soon" for flag -for`},
		{"a cancel needs no --for", []string{"sleep", "team", "--for", "0s", "--cancel"}, 1, "", "error: load the kubeconfig: "},
		{"an operator flag with a value it would refuse", []string{"status", "--scaling-grace-period", "soon"}, 2, "", `invalid value "soon" for flag -scaling-grace-period`},
		{"explain without a schedule", []string{"explain"}, 2, "", "error: explain takes one schedule, quoted"},
		{"explain with --count 0", []string{"explain", "always", "--count", "0"}, 2, "", "error: --count must be at least 1"},
		{"explain --from that is no instant", []string{"explain", "always", "--from", "yesterday"}, 2, "", "error: --from: "},
		{"explain of an invalid schedule, without a cluster", []string{"explain", "Mon-Fri 8:00-18:00 Europe/Berlin"}, 1, "",
			`error: invalid schedule: element 1 "Mon-Fri 8:00-18:00 Europe/Berlin": start "8:00" is not HH:MM`},
		{"explain needs no cluster for a schedule without calendars", []string{"explain", "Mon-Fri 08:00-18:00 Europe/Berlin", "--count", "1"}, 0,
			"Now (Fri 2026-11-27 12:00 CET): inside\nNext transitions:\n  Fri 2026-11-27 18:00 CET       leaves\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := exitCode(run(context.Background(), c.args, &stdout, &stderr, now), &stderr)
			if code != c.code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), c.stdout) {
				t.Errorf("stdout does not say %q:\n%s", c.stdout, stdout.String())
			}
			if !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("stderr does not say %q:\n%s", c.stderr, stderr.String())
			}
			if usage := strings.Contains(stderr.String(), "Commands:"); usage != (c.code == 2) {
				t.Errorf("usage text on stderr: %v, want it with exit status 2 only", usage)
			}
		})
	}
}

// TestFlagsAndArgumentsComeInAnyOrder: kubectl users put flags after the target.
func TestFlagsAndArgumentsComeInAnyOrder(t *testing.T) {
	cases := []struct {
		name string
		args []string
		pos  []string
		dur  time.Duration
		all  bool
	}{
		{"flags first", []string{"--for", "2h", "team/deploy/web"}, []string{"team/deploy/web"}, 2 * time.Hour, false},
		{"flags last", []string{"team/deploy/web", "--for=30m", "-A"}, []string{"team/deploy/web"}, 30 * time.Minute, true},
		{"flags between", []string{"a", "-A", "b"}, []string{"a", "b"}, time.Hour, true},
		{"after --, everything is an argument", []string{"--", "-A"}, []string{"-A"}, time.Hour, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			d := fs.Duration("for", time.Hour, "")
			all := fs.Bool("A", false, "")
			pos, err := parse(fs, c.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(pos, " ") != strings.Join(c.pos, " ") || *d != c.dur || *all != c.all {
				t.Errorf("parse(%q) = %q, --for %s, -A %v; want %q, %s, %v", c.args, pos, *d, *all, c.pos, c.dur, c.all)
			}
		})
	}
}

// TestTimesAreShownInTheUsersZone: status, wake, sleep and explain print instants in
// the zone TZ names, with the weekday and the zone's abbreviation (summer time
// included), and how far ahead.
func TestTimesAreShownInTheUsersZone(t *testing.T) {
	now := time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC)
	cases := []struct {
		zone string
		t    time.Time
		want string
	}{
		{"Europe/Berlin", time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC), "Fri 2026-11-27 20:00 CET (in 8h0m)"},
		{"Europe/Berlin", time.Date(2027, 7, 1, 6, 30, 0, 0, time.UTC), "Thu 2027-07-01 08:30 CEST (in 215d19h)"},
		{"Asia/Tokyo", time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC), "Sat 2026-11-28 04:00 JST (in 8h0m)"},
		{"America/New_York", time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC), "Fri 2026-11-27 14:00 EST (in 8h0m)"},
		{"UTC", time.Date(2026, 11, 27, 11, 0, 30, 0, time.UTC), "Fri 2026-11-27 11:00 UTC (in <1m)"},
		{"Europe/Berlin", time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), "Fri 2026-11-27 11:00 CET"},
		{"Europe/Berlin", time.Time{}, "-"},
	}
	for _, c := range cases {
		t.Run(c.zone+" "+c.want, func(t *testing.T) {
			inZone(t, c.zone)
			if got := local(c.t, now); got != c.want {
				t.Errorf("local(%s) in %s = %q, want %q", c.t, c.zone, got, c.want)
			}
		})
	}
}

func TestHowFarAheadIsRoughlyToTheMinuteOrTheHour(t *testing.T) {
	for d, want := range map[time.Duration]string{
		59 * time.Second:                "<1m",
		time.Minute + 59*time.Second:    "1m",
		2*time.Hour + 5*time.Minute + 1: "2h5m",
		23*time.Hour + 59*time.Minute:   "23h59m",
		24 * time.Hour:                  "1d0h",
		50*time.Hour + 59*time.Minute:   "2d2h",
	} {
		if got := roughly(d); got != want {
			t.Errorf("roughly(%s) = %q, want %q", d, got, want)
		}
	}
}
