package storagebucket_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
)

// s3Log records every request the managers send to MinIO, through a proxy in front of
// it, with the manager process each came from (found through /proc by the client
// end of its connection). StorageBuckets under test point at the proxy's URL.
type s3Log struct {
	proxy *minio.Proxy
	addr  netip.AddrPort

	mu        sync.Mutex
	exchanges []s3Exchange
	// managers names the processes by PID; owners caches which one holds each client
	// address.
	managers map[int]string
	owners   map[string]string
	// slow, when set, says how long to hold the answer of a request; held counts, per
	// manager and kind of request, the answers being held now (of requests served).
	slow func(x s3Exchange) time.Duration
	held map[string]int
}

// s3Exchange is one request, the bucket and key it named, and who sent it.
type s3Exchange struct {
	minio.Exchange
	bucket, key, manager string
}

func startS3Log(s3 *minio.Server) *s3Log {
	GinkgoHelper()
	l := &s3Log{proxy: s3.StartProxyForTest(GinkgoT()), managers: map[int]string{}, owners: map[string]string{}, held: map[string]int{}}
	l.addr = netip.MustParseAddrPort(l.proxy.Endpoint)
	l.proxy.Record(l.record)
	l.proxy.HoldAnswers(l.hold)
	return l
}

// slowDown holds the answers of the requests for which slow returns a duration that long
// (nil answers everything at once again): the requests take effect at once, and their
// senders wait for the answers.
func (l *s3Log) slowDown(slow func(x s3Exchange) time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slow = slow
}

// hold says how long to hold the answer of an arriving request, as slowDown says.
func (l *s3Log) hold(r *http.Request) time.Duration {
	l.mu.Lock()
	slow := l.slow
	l.mu.Unlock()
	if slow == nil {
		return 0
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return slow(s3Exchange{Exchange: minio.Exchange{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery}, bucket: bucket, key: key})
}

// holding returns how many answers to requests of a kind (see s3Exchange.kind) from a
// manager are being held now.
func (l *s3Log) holding(manager, kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[manager+" "+kind]
}

// URL is where StorageBuckets reach MinIO through the log.
func (l *s3Log) URL() string { return l.proxy.URL }

// track attributes the connections of a manager process from now on.
func (l *s3Log) track(m *manager) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.managers[m.proc.PID()] = m.proc.Name
}

// untrack stops attributing to a manager that ended: its client ports may be reused by
// another process.
func (l *s3Log) untrack(m *manager) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.managers, m.proc.PID())
	for remote, name := range l.owners {
		if name == m.proc.Name {
			delete(l.owners, remote)
		}
	}
}

// record logs an exchange once the server answered it. An answer held from then on
// counts as held until it is sent: the request was whole and took effect, and only
// its sender is kept waiting (a pause now leaves nothing half sent).
func (l *s3Log) record(e minio.Exchange) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(e.Path, "/"), "/")
	x := s3Exchange{Exchange: e, bucket: bucket, key: key, manager: l.ownerOf(e.Remote)}
	l.mu.Lock()
	l.exchanges = append(l.exchanges, x)
	l.mu.Unlock()
	if e.Held <= 0 || e.Aborted {
		return
	}
	kind := x.manager + " " + x.kind()
	l.mu.Lock()
	l.held[kind]++
	l.mu.Unlock()
	time.AfterFunc(e.Held, func() {
		l.mu.Lock()
		l.held[kind]--
		l.mu.Unlock()
	})
}

func (l *s3Log) ownerOf(remote string) string {
	l.mu.Lock()
	if name, ok := l.owners[remote]; ok {
		l.mu.Unlock()
		return name
	}
	pids := make([]int, 0, len(l.managers))
	for pid := range l.managers {
		pids = append(pids, pid)
	}
	l.mu.Unlock()
	name := "unknown"
	if addr, err := netip.ParseAddrPort(remote); err == nil {
		if pid, err := process.SocketOwner(addr, l.addr, pids); err == nil && pid != 0 {
			l.mu.Lock()
			name = l.managers[pid]
			l.owners[remote] = name
			l.mu.Unlock()
		}
	}
	return name
}

// snapshot returns the exchanges so far.
func (l *s3Log) snapshot() []s3Exchange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]s3Exchange(nil), l.exchanges...)
}

// activityGap joins one manager's requests for one bucket into one window of activity
// when they come less than this apart (a ReadWrite probe's put, get and delete).
const activityGap = 300 * time.Millisecond

type window struct {
	manager    string
	start, end time.Time
	// requests says what the window's first requests were, for the failure message.
	requests []string
}

// add joins x to the window.
func (w *window) add(x s3Exchange) {
	w.end = maxTime(w.end, x.End)
	if len(w.requests) < 6 {
		w.requests = append(w.requests, fmt.Sprintf("%s %s?%s %s–%s %d", x.Method, x.Path, x.Query,
			x.Start.Format("05.000"), x.End.Format("05.000"), x.Status))
	}
}

// overlaps returns, for the first bucket found, two managers' windows of activity on
// one bucket that overlap in time: two replicas probing or managing one bucket at once.
// A request its sender gave up half way through sending (Aborted: a process paused in
// the middle of sending it, which cancels it when it continues) never reached MinIO
// whole and did nothing, so it is no activity.
func overlaps(exchanges []s3Exchange) error {
	perBucket := map[string]map[string][]window{}
	sort.Slice(exchanges, func(i, j int) bool { return exchanges[i].Start.Before(exchanges[j].Start) })
	for _, x := range exchanges {
		if x.bucket == "" || x.Aborted {
			continue
		}
		byManager := perBucket[x.bucket]
		if byManager == nil {
			byManager = map[string][]window{}
			perBucket[x.bucket] = byManager
		}
		ws := byManager[x.manager]
		if n := len(ws); n > 0 && x.Start.Sub(ws[n-1].end) < activityGap {
			ws[n-1].add(x)
		} else {
			w := window{manager: x.manager, start: x.Start, end: x.End}
			w.add(x)
			ws = append(ws, w)
		}
		byManager[x.manager] = ws
	}
	for bucket, byManager := range perBucket {
		var all []window
		for _, ws := range byManager {
			all = append(all, ws...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
		var active []window // windows not ended when the current one starts
		for _, b := range all {
			kept := active[:0]
			for _, a := range active {
				if a.end.After(b.start) {
					kept = append(kept, a)
				}
			}
			active = kept
			for _, a := range active {
				if a.manager != b.manager {
					return &overlapError{bucket: bucket, a: a, b: b}
				}
			}
			active = append(active, b)
		}
	}
	return nil
}

var _ = Describe("Two replicas on one bucket (overlaps)", func() {
	at := func(s float64) time.Time { return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second))) }
	exchange := func(manager string, from, to float64, aborted bool) s3Exchange {
		return s3Exchange{Exchange: minio.Exchange{Method: http.MethodPost, Path: "/b/", Query: "delete=",
			Start: at(from), End: at(to), Aborted: aborted}, bucket: "b", manager: manager}
	}
	It("finds a replica's request on a bucket while another's is under way", func() {
		Expect(overlaps([]s3Exchange{exchange("r1", 0, 8, false), exchange("r2", 5, 6, false)})).
			To(MatchError(ContainSubstring("bucket b: r1 worked on it")))
	})
	It("counts no request its sender abandoned half way: MinIO never got it whole", func() {
		Expect(overlaps([]s3Exchange{exchange("r1", 0, 8, true), exchange("r2", 5, 6, false)})).To(Succeed())
		Expect(overlaps([]s3Exchange{exchange("r1", 0, 1, false), exchange("r1", 1.1, 8, true), exchange("r2", 5, 6, false)})).To(Succeed())
	})
})

// overlapError is two managers' windows of activity on one bucket that overlap.
type overlapError struct {
	bucket string
	a, b   window
}

func (e *overlapError) Error() string {
	return fmt.Sprintf("bucket %s: %s worked on it %s–%s while %s did %s–%s (%s: %s; %s: %s)", e.bucket,
		e.a.manager, e.a.start.Format("15:04:05.000"), e.a.end.Format("15:04:05.000"),
		e.b.manager, e.b.start.Format("15:04:05.000"), e.b.end.Format("15:04:05.000"),
		e.a.manager, strings.Join(e.a.requests, ", "), e.b.manager, strings.Join(e.b.requests, ", "))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// isProbe reports whether an exchange is the probe request of its depth: the
// HeadBucket of a HeadBucket probe, the canary put of a ReadWrite probe.
func (x s3Exchange) isProbe() bool {
	switch {
	case x.Method == http.MethodHead && x.key == "":
		return true
	case x.Method == http.MethodPut && strings.HasPrefix(x.key, phalanksv1beta1.CanaryPrefix):
		return true
	}
	return false
}

// kind names what an exchange does, for slowDown's rules: "canary-read", "empty" (a
// multi-object delete), "write" (any other request that changes something) or "read".
func (x s3Exchange) kind() string {
	_, multiDelete := parseQuery(x.Query)["delete"]
	switch {
	case x.Method == http.MethodGet && strings.HasPrefix(x.key, phalanksv1beta1.CanaryPrefix):
		return "canary-read"
	case x.Method == http.MethodPost && multiDelete:
		return "empty"
	case x.isWrite():
		return "write"
	}
	return "read"
}

// isWrite reports whether an exchange asked to change something: create, tag or
// delete a bucket, put or delete an object.
func (x s3Exchange) isWrite() bool {
	return x.Method == http.MethodPut || x.Method == http.MethodPost || x.Method == http.MethodDelete
}

func parseQuery(raw string) url.Values {
	v, _ := url.ParseQuery(raw)
	return v
}

// deletedBucket reports whether an exchange deleted a bucket.
func (x s3Exchange) deletedBucket() bool {
	return x.Method == http.MethodDelete && x.key == "" && x.Query == "" && x.Status/100 == 2
}
