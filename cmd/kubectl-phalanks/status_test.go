package main

import (
	"bytes"
	"context"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// TestTheSavingsAreSummedFromWhatEachWorkloadHoldsDown: now, the replicas held down and
// what their pods requested; over time, each workload from when it was scaled down.
func TestTheSavingsAreSummedFromWhatEachWorkloadHoldsDown(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const mi = 1 << 20
	web := scaling.Status{Name: "web", ReplicasDown: 3, CPUMilli: 250, MemoryBytes: 128 * mi, DownSince: now.Add(-2 * time.Hour)}
	cases := []struct {
		name     string
		statuses []scaling.Status
		want     string
	}{
		{"nothing held down", []scaling.Status{{Name: "api"}},
			"\nScaled down now: 0 replicas of 0 workloads, requesting 0.00 CPU and 0.00 GiB of memory.\n" +
				"Saved since each was scaled down: 0.0 pod-hours, 0.00 CPU-hours, 0.00 GiB-hours of memory requests.\n"},
		{"one workload, for two hours", []scaling.Status{web, {Name: "api"}},
			"\nScaled down now: 3 replicas of 1 workload, requesting 0.75 CPU and 0.38 GiB of memory.\n" +
				"Saved since each was scaled down: 6.0 pod-hours, 1.50 CPU-hours, 0.75 GiB-hours of memory requests.\n"},
		{"a workload without requests counts its pods only", []scaling.Status{web,
			{Name: "batch", ReplicasDown: 1, DownSince: now.Add(-30 * time.Minute)}},
			"\nScaled down now: 4 replicas of 2 workloads, requesting 0.75 CPU and 0.38 GiB of memory.\n" +
				"Saved since each was scaled down: 6.5 pod-hours, 1.50 CPU-hours, 0.75 GiB-hours of memory requests.\n"},
		{"a scale-down recorded ahead of this clock saves nothing over time yet", []scaling.Status{
			{Name: "one", ReplicasDown: 1, CPUMilli: 2000, MemoryBytes: 1 << 30, DownSince: now.Add(time.Minute)}},
			"\nScaled down now: 1 replica of 1 workload, requesting 2.00 CPU and 1.00 GiB of memory.\n" +
				"Saved since each was scaled down: 0.0 pod-hours, 0.00 CPU-hours, 0.00 GiB-hours of memory requests.\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			printSavings(&printer{w: &out}, c.statuses, now)
			if out.String() != c.want {
				t.Errorf("printed\n%s\nwant\n%s", out.String(), c.want)
			}
		})
	}
}

// TestStatusRowsShowTheNextTransitionInTheUsersZone prints a row per object, with the
// namespace only across namespaces.
func TestStatusRowsShowTheNextTransitionInTheUsersZone(t *testing.T) {
	inZone(t, "Asia/Tokyo")
	now := time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC)
	statuses := []scaling.Status{
		{Kind: "Deployment", Namespace: "team", Name: "web", State: "down", Level: 0, Saved: ptr.To[int32](3),
			Next: time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC), Why: "downtime (schedule of the object); 3 to restore"},
		{Kind: "CronJob", Namespace: "team", Name: "report", State: "excluded", Level: 1, Why: "excluded (exclude or exclude-until)"},
	}
	var out bytes.Buffer
	printStatuses(&printer{w: &out}, statuses, false, now)
	want := "" +
		"KIND        NAME    STATE     REPLICAS  SAVED  NEXT TRANSITION                      WHY\n" +
		"Deployment  web     down      0         3      Sat 2026-11-28 08:00 JST (in 12h0m)  downtime (schedule of the object); 3 to restore\n" +
		"CronJob     report  excluded  1         -      -                                    excluded (exclude or exclude-until)\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}

	out.Reset()
	printStatuses(&printer{w: &out}, statuses[:1], true, now)
	if rows := lines(out.String()); len(rows) != 2 || !strings.HasPrefix(rows[0], "NAMESPACE  KIND") || !strings.HasPrefix(rows[1], "team       Deployment") {
		t.Errorf("across namespaces, printed\n%s", out.String())
	}
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// TestTheOperatorsFlagsAreReadFromItsContainer: the plugin decides with the flags of the
// operator's manager container, and those given to the plugin win.
func TestTheOperatorsFlagsAreReadFromItsContainer(t *testing.T) {
	container := corev1.Container{Name: "manager", Command: []string{"/manager", "--leader-elect"},
		Args: []string{"--metrics-bind-address", ":8443", "--scaling-time-zone=Europe/Berlin", "--scaling-grace-period", "5m",
			"--scaling-dry-run", "--scaling-exclude-namespaces=kube-system,ops", "--default-downtime-replicas", "1"}}
	args := containerArgs(container)
	if args[0] != "--leader-elect" || len(args) != 1+len(container.Args) {
		t.Fatalf("container args = %q: want the command's flags, then the args", args)
	}
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	var o scaling.Options
	o.BindFlags(fs)
	applyArgs(fs, args)
	if o.TimeZone != "Europe/Berlin" || o.GracePeriod != 5*time.Minute || !o.DryRun || o.DefaultDowntimeReplicas != 1 ||
		!slices.Equal(o.ExcludeNamespaces, []string{"kube-system", "ops"}) {
		t.Errorf("options = %+v", o)
	}

	// Flags given to the plugin, on top; without a client nothing is read.
	var s settingsFlags
	plugin := flag.NewFlagSet("status", flag.ContinueOnError)
	s.bind(plugin)
	if err := plugin.Parse([]string{"--scaling-time-zone=Asia/Tokyo", "--scaling-grace-period=0s"}); err != nil {
		t.Fatal(err)
	}
	got, note := s.options(context.Background(), nil, "phalanks-system")
	if got.TimeZone != "Asia/Tokyo" || got.GracePeriod != 0 || note != "" {
		t.Errorf("options = %+v, note %q", got, note)
	}
	if !slices.Equal(got.ExcludeNamespaces, scaling.DefaultExcludeNamespaces("phalanks-system")) || !slices.Contains(got.ExcludeNamespaces, "phalanks-system") ||
		got.CalendarNamespace != "phalanks-system" {
		t.Errorf("the operator's namespace is excluded and holds the calendars by default: %+v", got)
	}
	if plugin.Lookup("scaling-dry-run") != nil || plugin.Lookup("scaling-concurrency") != nil {
		t.Error("the plugin takes flags that change nothing it shows")
	}
}

// TestAKindIsNamedAsKubectlUsersTypeIt resolves short names, plurals and resources to a
// kind the operator scales.
func TestAKindIsNamedAsKubectlUsersTypeIt(t *testing.T) {
	rollouts := schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"}
	o := scaling.Options{Resources: append(slices.Clone(scaling.DefaultResources), "rollouts.argoproj.io")}
	insp, err := scaling.NewInspector(nil, o, time.Now(), true, map[string]schema.GroupVersionKind{"rollouts.argoproj.io": rollouts})
	if err != nil {
		t.Fatal(err)
	}
	for typed, want := range map[string]string{
		"deploy": "Deployment", "Deployments": "Deployment", "deployments.apps": "Deployment",
		"sts": "StatefulSet", "cj": "CronJob", "ds": "DaemonSet", "hpa": "HorizontalPodAutoscaler", "so": "ScaledObject",
		"rollout": "Rollout", "rollouts": "Rollout", "rollouts.argoproj.io": "Rollout",
	} {
		if got, err := kindName(insp, typed); err != nil || got != want {
			t.Errorf("kindName(%q) = %q, %v; want %q", typed, got, err, want)
		}
	}
	if _, err := kindName(insp, "pods"); err == nil || !strings.Contains(err.Error(), "scheduled scaling does not scale pods (kinds: Deployment, ") {
		t.Errorf("kindName(pods): %v", err)
	}
}
