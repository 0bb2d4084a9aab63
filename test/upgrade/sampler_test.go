package upgrade_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// The documented handover bound of a rolling update (docs/storagebucket.md, "Fault
// model"): one interval plus about two renew periods for a replica that stops, with the
// chaos suite's 3 s of slack for a loaded machine. The renew period is the operator's
// default.
const (
	renewPeriod = 5 * time.Second
	gapBound    = probeInterval + 2*renewPeriod + 3*time.Second
	// settle is how long sampling goes on after the rollout: the new pods' first full
	// intervals are part of the upgrade.
	settle = 2*probeInterval + 2*renewPeriod
)

// operatorReporters are the operator's event reporters (reportingController): the
// Warning events of other controllers (an autoscaler without metrics) are not the
// operator's to announce.
var operatorReporters = []string{"storagebucket-controller", "foo-controller", "phalanks-scaler"}

// probeLog holds the time of every request the proxy forwarded, by bucket: path-style
// requests name the bucket in the path's first segment.
type probeLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (p *probeLog) add(e minio.Exchange) {
	bucket, _, _ := strings.Cut(strings.TrimPrefix(e.Path, "/"), "/")
	if bucket == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[string][]time.Time{}
	}
	p.at[bucket] = append(p.at[bucket], e.Start)
}

// longestGap returns the longest time between two requests for bucket that reaches into
// [from, to], counting from the last request before from and to to (or the first after
// it).
func (p *probeLog) longestGap(bucket string, from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var longest time.Duration
	prev := time.Time{}
	for _, at := range p.at[bucket] {
		if at.Before(from) {
			prev = at
			continue
		}
		if !prev.IsZero() {
			longest = max(longest, at.Sub(prev))
		}
		prev = at
		if at.After(to) {
			return longest
		}
	}
	if !prev.IsZero() {
		longest = max(longest, to.Sub(prev))
	}
	return longest
}

// sampler reads the fleet every second while an upgrade runs and records every change
// the upgrade must not make.
type sampler struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples int
	// conversions counts the conversion checks; slowest is the longest one took.
	conversions int
	slowest     time.Duration
	ready       map[string]string // StorageBucket: "Status/Reason" last seen
	transitions []string
	conversion  []string
	foos        map[string]string // Foo's Deployment: "uid generation"
	fooChanges  []string
	workloads   workloadState
	moved       []string
}

// startSampling takes the fleet's state as it is now as the baseline and samples it
// every second until stop.
func startSampling() *sampler {
	GinkgoHelper()
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), ready: map[string]string{}, foos: map[string]string{}}
	Expect(s.sample(true)).To(Succeed())
	var wg sync.WaitGroup
	every := func(f func()) {
		wg.Go(func() {
			defer GinkgoRecover()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-tick.C:
					f()
				}
			}
		})
	}
	every(func() { _ = s.sample(false) })
	// Conversions on a loop of their own: one may wait for the API server's webhook
	// timeout, and the other reads must not wait with it.
	every(s.convert)
	go func() { wg.Wait(); close(s.done) }()
	return s
}

func (s *sampler) finish() {
	close(s.stop)
	<-s.done
}

// convertTimeout is the API server's own timeout for a conversion webhook call.
const convertTimeout = 30 * time.Second

func (s *sampler) convert() {
	cctx, cancel := context.WithTimeout(ctx, convertTimeout)
	defer cancel()
	start := time.Now()
	err := convert(cctx)
	took := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conversions++
	s.slowest = max(s.slowest, took)
	if err != nil {
		s.conversion = append(s.conversion, fmt.Sprintf("%s (after %s) %s", start.Format("15:04:05"), took.Round(time.Millisecond), err))
	}
}

// sample reads once; with baseline it records what later samples compare with.
func (s *sampler) sample(baseline bool) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := time.Now().Format("15:04:05")
	var sbs phalanksv1beta1.StorageBucketList
	if err := k8s.List(sctx, &sbs, client.InNamespace(fleetNamespace)); err != nil {
		return err
	}
	foos := map[string]string{}
	for name := range fleetFoos {
		dep := &appsv1.Deployment{}
		err := k8s.Get(sctx, client.ObjectKey{Namespace: fleetNamespace, Name: name}, dep)
		switch {
		case apierrors.IsNotFound(err):
			foos[name] = "deleted"
		case err != nil:
			continue // a read that failed tells nothing about the Deployment
		default:
			foos[name] = fmt.Sprintf("uid %s generation %d", dep.UID, dep.Generation)
		}
	}
	workloads, werr := readWorkloads()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for _, sb := range sbs.Items {
		state := "absent"
		if c := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady); c != nil {
			state = string(c.Status) + "/" + c.Reason
		}
		if before, ok := s.ready[sb.Name]; ok && before != state && !baseline {
			s.transitions = append(s.transitions, fmt.Sprintf("%s %s: %s -> %s", now, sb.Name, before, state))
		}
		s.ready[sb.Name] = state
	}
	for name, state := range foos {
		if before, ok := s.foos[name]; ok && before != state && !baseline {
			s.fooChanges = append(s.fooChanges, fmt.Sprintf("%s Foo %s's Deployment: %s -> %s", now, name, before, state))
			continue
		}
		s.foos[name] = state
	}
	switch {
	case werr != nil:
	case baseline:
		s.workloads = workloads
	default:
		for k, v := range workloads {
			if s.workloads[k] != v {
				s.moved = append(s.moved, fmt.Sprintf("%s %s: %s -> %s", now, k, s.workloads[k], v))
				s.workloads[k] = v
			}
		}
	}
	return nil
}

// convert reads and writes through the conversion webhook as a v1alpha1 client does: a
// get of a StorageBucket stored as v1beta1 (from etcd, converted on the way out), and a
// dry-run create of a v1alpha1 one (converted to v1beta1 for storage, and back). A list
// would not do: the API server serves it from its watch cache of the version, whose
// objects it converted when they were last written.
func convert(ctx context.Context) error {
	got := &phalanksv1alpha1.StorageBucket{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: fleetNamespace, Name: "head"}, got); err != nil {
		return fmt.Errorf("get as v1alpha1: %w", err)
	}
	probe := &phalanksv1alpha1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, GenerateName: "conversion-"},
		Spec:       phalanksv1alpha1.StorageBucketSpec{BucketName: "conversion-check", Endpoint: proxy.Endpoint, Insecure: true},
	}
	if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
		return fmt.Errorf("create as v1alpha1 (dry run): %w", err)
	}
	return nil
}

// pathResult is what an upgrade path measured.
type pathResult struct {
	path       string
	rollout    time.Duration
	longestGap time.Duration
	gapBucket  string
	samples    int
	// conversions counts the conversion checks, slowestConversion is the longest.
	conversions       int
	slowestConversion time.Duration
	transitions       []string
	conversion        []string
	fooChanges        []string
	moved             []string
	warnings          []string
	perBucketGap      map[string]time.Duration
}

// evaluate ends sampling and checks every invariant over [from, to].
func (s *sampler) evaluate(path string, from, to time.Time, rollout time.Duration) {
	GinkgoHelper()
	r := s.measure(path, from, to, rollout)
	results = append(results, r)
	printResult(GinkgoWriter, r)

	Expect(r.samples).To(BeNumerically(">=", int(to.Sub(from)/time.Second)/2), "too few samples: the machine is too loaded to sample every second")
	Expect(r.transitions).To(BeEmpty(), "a StorageBucket's Ready condition changed during the upgrade")
	Expect(r.conversion).To(BeEmpty(), "a v1alpha1 read failed during the upgrade")
	Expect(r.fooChanges).To(BeEmpty(), "a Foo's Deployment was re-created or rolled")
	Expect(r.moved).To(BeEmpty(), "a scheduled workload moved during the upgrade")
	Expect(r.warnings).To(BeEmpty(), "Warning events CHANGELOG.md does not announce")
	for bucket, gap := range r.perBucketGap {
		Expect(gap).To(BeNumerically("<=", gapBound), "StorageBucket %s went %s without a probe (bound %s)", bucket, gap, gapBound)
	}
}

// measure ends sampling and returns what it saw over [from, to].
func (s *sampler) measure(path string, from, to time.Time, rollout time.Duration) pathResult {
	GinkgoHelper()
	s.finish()
	s.mu.Lock()
	r := pathResult{path: path, rollout: rollout, samples: s.samples, transitions: s.transitions, conversion: s.conversion,
		conversions: s.conversions, slowestConversion: s.slowest, fooChanges: s.fooChanges, moved: s.moved,
		perBucketGap: map[string]time.Duration{}}
	s.mu.Unlock()
	for _, b := range fleetBuckets {
		if !b.observed {
			continue
		}
		gap := probes.longestGap(b.name, from, to)
		r.perBucketGap[b.name] = gap
		if gap > r.longestGap {
			r.longestGap, r.gapBucket = gap, b.name
		}
	}
	r.warnings = unannouncedWarnings(from)
	return r
}

// unannouncedWarnings returns the operator's Warning events since from whose reason
// CHANGELOG.md does not announce.
func unannouncedWarnings(from time.Time) []string {
	GinkgoHelper()
	announced := announcedWarnings()
	var list eventsv1.EventList
	Expect(k8s.List(ctx, &list)).To(Succeed())
	var out []string
	for _, e := range list.Items {
		last := e.EventTime.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		}
		if e.Type != "Warning" || last.Before(from) || !slices.Contains(operatorReporters, e.ReportingController) {
			continue
		}
		if !slices.Contains(announced, e.Reason) {
			out = append(out, fmt.Sprintf("%s %s/%s %s: %s", last.Format("15:04:05"), e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note))
		}
	}
	return out
}

// announcedWarnings are the event reasons CHANGELOG.md's Warning events entry names.
func announcedWarnings() []string {
	GinkgoHelper()
	root, err := tools.RepoRoot()
	check(err)
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	check(err)
	text := string(data)
	start := strings.Index(text, "- Warning events")
	Expect(start).To(BeNumerically(">=", 0), "CHANGELOG.md announces no Warning events")
	entry := text[start:]
	if end := strings.Index(entry[1:], "\n- "); end >= 0 {
		entry = entry[:end+1]
	}
	var out []string
	for _, m := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(entry, -1) {
		out = append(out, m[1])
	}
	return out
}

func printResult(w io.Writer, r pathResult) {
	_, _ = fmt.Fprintf(w, "%s: rollout %s, longest probe gap %s (%s; bound %s), %d samples, %d conversion checks (slowest %s)\n",
		r.path, r.rollout.Round(100*time.Millisecond), r.longestGap.Round(100*time.Millisecond), r.gapBucket, gapBound, r.samples,
		r.conversions, r.slowestConversion.Round(time.Millisecond))
	names := make([]string, 0, len(r.perBucketGap))
	for n := range r.perBucketGap {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		_, _ = fmt.Fprintf(w, "  gap %-22s %s\n", n, r.perBucketGap[n].Round(100*time.Millisecond))
	}
	for what, list := range map[string][]string{"Ready transitions": r.transitions, "failed v1alpha1 reads": r.conversion,
		"Foo Deployment changes": r.fooChanges, "workloads moved": r.moved, "unannounced Warning events": r.warnings} {
		_, _ = fmt.Fprintf(w, "  %s: %d\n", what, len(list))
		for _, l := range list {
			_, _ = fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

func printResults(w io.Writer) {
	if len(results) == 0 {
		return
	}
	_, _ = fmt.Fprintln(w, "test/upgrade: per path")
	for _, r := range results {
		printResult(w, r)
	}
}

// countSince returns how many requests for bucket started at or after since.
func (p *probeLog) countSince(bucket string, since time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.at[bucket] {
		if !at.Before(since) {
			n++
		}
	}
	return n
}
