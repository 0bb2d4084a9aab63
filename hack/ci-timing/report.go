package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An entry is one timed piece of the run.
type entry struct {
	kind string // "tools", "step", "test" or "suite"
	name string
	// at is when the line reporting it appeared; took is its own duration.
	at, took time.Duration
	failed   bool
}

type report struct {
	command   []string
	cpus      int
	cold      bool
	reference time.Duration
	entries   []entry
	total     time.Duration
	load      loadSummary
	exit      int
	// step is the .ci/run step under way, which a Ginkgo summary belongs to.
	step string
}

var (
	// hack/tools/build.sh: "tools: [2/8] kube built in 4m40s" (the bracket also says
	// "background" for sets built while suites run).
	toolsBuilt = regexp.MustCompile(`^tools: \[[^\]]*\] (\S+) built in (\S+)$`)
	// .ci/run: "ci: ── make test ──" and "ci: ── make test passed in 1185s ──".
	stepStart = regexp.MustCompile(`^ci: ── (.+) ──$`)
	stepDone  = regexp.MustCompile(`^ci: ── (.+) passed in (\d+)s ──$`)
	// go test: "ok  \tgithub.com/…/controllers/storagebucket\t98.123s", "FAIL\t…\t12.3s".
	testDone = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)\s+([0-9.]+)s`)
	// A Ginkgo test binary run directly (the OLM suites): "Ran 13 of 13 Specs in 297.1 seconds".
	ginkgoDone = regexp.MustCompile(`^Ran \d+ of \d+ Specs in ([0-9.]+) seconds$`)
)

const modulePrefix = "github.com/phalanks/phalanks-operator"

// observe records what line reports, seen at elapsed time at.
func (r *report) observe(at time.Duration, line string) {
	line = strings.TrimRight(line, "\r")
	switch {
	case strings.HasPrefix(line, "tools: [background] "):
		// Counted from the background builds' own log (observeBackground).
	case toolsBuilt.MatchString(line):
		m := toolsBuilt.FindStringSubmatch(line)
		if d, err := parseBuildDuration(m[2]); err == nil {
			r.entries = append(r.entries, entry{kind: "tools", name: m[1], at: at, took: d})
		}
	case stepDone.MatchString(line):
		m := stepDone.FindStringSubmatch(line)
		s, _ := strconv.Atoi(m[2])
		r.entries = append(r.entries, entry{kind: "step", name: m[1], at: at, took: time.Duration(s) * time.Second})
		r.step = ""
	case stepStart.MatchString(line):
		r.step = stepStart.FindStringSubmatch(line)[1]
	case testDone.MatchString(line):
		m := testDone.FindStringSubmatch(line)
		sec, _ := strconv.ParseFloat(m[3], 64)
		name := m[2]
		if rest, ok := strings.CutPrefix(name, modulePrefix); ok {
			name = "." + rest
			if name == "." {
				name = "./"
			}
		}
		r.entries = append(r.entries, entry{kind: "test", name: name, at: at,
			took: time.Duration(sec * float64(time.Second)), failed: m[1] == "FAIL"})
	case ginkgoDone.MatchString(line):
		sec, _ := strconv.ParseFloat(ginkgoDone.FindStringSubmatch(line)[1], 64)
		name := r.step
		if name == "" {
			name = "(a Ginkgo suite)"
		}
		r.entries = append(r.entries, entry{kind: "suite", name: name, at: at, took: time.Duration(sec * float64(time.Second))})
	}
}

// observeBackground records the sets the background builds' log says were built. The
// line a foreground command prints when it takes up such a set ("tools: [background] …")
// is not counted again.
func (r *report) observeBackground(log string) {
	for line := range strings.Lines(log) {
		m := toolsBuilt.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		if d, err := parseBuildDuration(m[2]); err == nil {
			r.entries = append(r.entries, entry{kind: "tools (background)", name: m[1], at: r.total, took: d})
		}
	}
}

// parseBuildDuration reads build.sh's durations: "1m24s", "38s".
func parseBuildDuration(s string) (time.Duration, error) { return time.ParseDuration(s) }

func seconds(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }

// markdown is the report: the machine, then every entry in the order it finished.
func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## ci-timing: %s\n\n", strings.Join(r.command, " "))
	caches := "the machine's caches"
	if r.cold {
		caches = "empty Go build, module and tool caches"
	}
	fmt.Fprintf(&b, "- run: %s, exit %d, %s in all (%.1f min), from %s\n", time.Now().UTC().Format("2006-01-02"), r.exit,
		seconds(r.total), r.total.Minutes(), caches)
	if r.reference > 0 {
		fmt.Fprintf(&b, "- machine: %d CPUs; reference (go build std from an empty build cache) %s\n", r.cpus, seconds(r.reference))
	} else {
		fmt.Fprintf(&b, "- machine: %d CPUs; no reference build\n", r.cpus)
	}
	if r.load.samples > 0 {
		fmt.Fprintf(&b, "- load while it ran: 1-min load average mean %.1f, max %.1f; CPUs %.0f %% busy\n",
			r.load.mean, r.load.max, 100*r.load.busy)
	}
	var tools, tests time.Duration
	for _, e := range r.entries {
		switch e.kind {
		case "tools", "tools (background)":
			tools += e.took
		case "test":
			tests += e.took
		}
	}
	fmt.Fprintf(&b, "- tool set builds: %s in all (%.1f min); test packages: %s summed (they run in parallel)\n\n",
		seconds(tools), tools.Minutes(), seconds(tests))
	b.WriteString("| at (min) | kind | what | took |\n|---:|---|---|---:|\n")
	for _, e := range r.entries {
		what := e.name
		if e.failed {
			what += " (FAILED)"
		}
		fmt.Fprintf(&b, "| %.1f | %s | %s | %s |\n", e.at.Minutes(), e.kind, what, seconds(e.took))
	}
	return b.String()
}

// loadSummary is the machine's load while the command ran: the mean and largest 1-minute
// load average of the samples, and the share of CPU time that was not idle.
type loadSummary struct {
	samples   int
	mean, max float64
	busy      float64
}

type loadSampler struct {
	mu    sync.Mutex
	sum   loadSummary
	stopc chan struct{}
	idle0 uint64
	all0  uint64
}

func startLoadSampler(every time.Duration) *loadSampler {
	s := &loadSampler{stopc: make(chan struct{})}
	s.idle0, s.all0 = cpuTimes()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-t.C:
				if l, err := loadavg(); err == nil {
					s.mu.Lock()
					s.sum.samples++
					s.sum.mean += l
					s.sum.max = max(s.sum.max, l)
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

func (s *loadSampler) stop() loadSummary {
	close(s.stopc)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sum
	if out.samples > 0 {
		out.mean /= float64(out.samples)
	}
	idle1, all1 := cpuTimes()
	if all1 > s.all0 {
		out.busy = 1 - float64(idle1-s.idle0)/float64(all1-s.all0)
	}
	return out
}

func loadavg() (float64, error) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty /proc/loadavg")
	}
	return strconv.ParseFloat(f[0], 64)
}

// cpuTimes returns the idle (idle + iowait) and total jiffies of /proc/stat's cpu line.
func cpuTimes() (idle, total uint64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return idle, total
}
