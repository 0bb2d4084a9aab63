package main

import (
	"strings"
	"testing"
	"time"
)

func TestReportReadsEveryTimedLineOfACIRun(t *testing.T) {
	lines := []string{
		"ci: ── env DEMO_ONESHOT=1 make demo ──",
		"tools: [1/8] building gen into /root/.cache/phalanks-operator/tools/gen-6410879ba670a5b4",
		"tools: [1/8] gen built in 1m24s",
		"tools: [background] kube-1.29 built in 38s",
		"demo: all 5 samples reached their expected state",
		"ci: ── env DEMO_ONESHOT=1 make demo passed in 750s ──",
		"ci: ── make test ──",
		"ok  \tgithub.com/phalanks/phalanks-operator/controllers/storagebucket\t98.123s",
		"FAIL\tgithub.com/phalanks/phalanks-operator/test/e2e/realnode\t463.9s",
		"ok  \tgithub.com/phalanks/phalanks-operator/hack/olm/validate\t1.5s",
		"ok  \tgithub.com/phalanks/phalanks-operator/internal/schedule\t(cached)",
		"ci: ── make test passed in 1185s ──",
		"ci: ── make test-olm ──",
		"Ran 13 of 13 Specs in 297.134 seconds",
		"ci: ── make test-olm passed in 320s ──",
	}
	var r report
	for i, l := range lines {
		r.observe(time.Duration(i)*time.Minute, l)
	}
	r.observeBackground("tools: background build of krew kube-1.29 started 2026-11-27T22:36:05Z\n" +
		"tools: [2/2] kube-1.29 built in 38s\n")
	want := []entry{
		{kind: "tools", name: "gen", took: 84 * time.Second},
		{kind: "step", name: "env DEMO_ONESHOT=1 make demo", took: 750 * time.Second},
		{kind: "test", name: "./controllers/storagebucket", took: 98123 * time.Millisecond},
		{kind: "test", name: "./test/e2e/realnode", took: 463900 * time.Millisecond, failed: true},
		{kind: "test", name: "./hack/olm/validate", took: 1500 * time.Millisecond},
		{kind: "step", name: "make test", took: 1185 * time.Second},
		{kind: "suite", name: "make test-olm", took: 297134 * time.Millisecond},
		{kind: "step", name: "make test-olm", took: 320 * time.Second},
		{kind: "tools (background)", name: "kube-1.29", took: 38 * time.Second},
	}
	if len(r.entries) != len(want) {
		t.Fatalf("got %d entries, want %d:\n%+v", len(r.entries), len(want), r.entries)
	}
	for i, w := range want {
		g := r.entries[i]
		if g.kind != w.kind || g.name != w.name || g.failed != w.failed ||
			(g.took-w.took).Abs() > time.Millisecond {
			t.Errorf("entry %d: got %+v, want %+v", i, g, w)
		}
	}
	md := r.markdown()
	for _, s := range []string{"| tools | gen | 84 s |", "./test/e2e/realnode (FAILED)", "tool set builds: 122 s"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q:\n%s", s, md)
		}
	}
}
