package storagebucket_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// The black-hole scenario: 1,000 StorageBuckets on an endpoint that accepts connections
// and never answers, and 200 on a healthy MinIO, every 30 s with a 5 s timeout, at the
// operator's default concurrency. Probing every black-holed bucket would take 1,000 × 5 s
// of worker time per 30 s, five times what 32 workers have.
const (
	blackHoled      = 1000
	healthy         = 200
	bhInterval      = 30 * time.Second
	bhTimeout       = 5 * time.Second
	bhConcurrency   = 32
	bhWindows       = 2
	bhEarlyTolerant = 100 * time.Millisecond
)

// BenchmarkBlackHoledEndpoint measures whether the healthy buckets' probes stay on time
// while a black-holed endpoint has many buckets. Lateness is measured where the probes
// arrive, at a proxy in front of the healthy MinIO, against each bucket's due times (its
// grid, see nextDue in controllers/storagebucket), so it holds for any design. With
// PHALANKS_BENCH_BASELINE_REF=<git ref>, the manager built from that ref runs the same
// scenario afterwards, in the same run, for comparison.
func BenchmarkBlackHoledEndpoint(b *testing.B) {
	for range b.N {
		runBlackHole(b)
	}
}

func runBlackHole(b *testing.B) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	env, err := envtest.Start(envtest.Options{Scheme: scheme})
	must(b, err)
	b.Cleanup(func() { _ = env.Stop() })
	sc := &scenario{env: env, k8s: env.Client, dir: b.TempDir()}
	sc.s3, err = minio.Start(minio.Options{Dir: b.TempDir()})
	must(b, err)
	b.Cleanup(func() { _ = sc.s3.Stop() })
	proxy, err := sc.s3.StartProxy()
	must(b, err)
	b.Cleanup(proxy.Close)
	arrivals := &arrivalLog{byBucket: map[string][]time.Time{}}
	proxy.Observe(arrivals.record)
	hole, holeConns := blackHoleListener(b)

	builds := map[string]string{"operator": "."}
	if ref := os.Getenv("PHALANKS_BENCH_BASELINE_REF"); ref != "" {
		builds["baseline "+ref] = ref
	}
	bins := buildManagers(b, sc.dir, builds)
	kc, err := env.KubeconfigUser(controllerUser, "system:masters")
	must(b, err)
	sc.kubeconfig = filepath.Join(sc.dir, "kubeconfig")
	must(b, os.WriteFile(sc.kubeconfig, kc, 0o600))

	progress("setup: %d black-holed and %d healthy StorageBuckets", blackHoled, healthy)
	for _, ns := range []string{namespace, "phalanks-system"} {
		must(b, sc.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	must(b, sc.k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "s3", Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": sc.s3.AccessKey, "AWS_SECRET_ACCESS_KEY": sc.s3.SecretKey},
	}))
	var names []string
	for i := range blackHoled + healthy {
		names = append(names, fmt.Sprintf("bh-%04d", i))
	}
	var mu sync.Mutex
	uids := map[string]types.UID{}
	parallel(b, names, func(name string) error {
		i, _ := strconv.Atoi(strings.TrimPrefix(name, "bh-"))
		endpoint := hole
		if i >= blackHoled {
			endpoint = proxy.URL
			if err := sc.s3.MakeBucket(ctx, name, miniogo.MakeBucketOptions{}); err != nil {
				return err
			}
		}
		sb := &phalanksv1beta1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: phalanksv1beta1.StorageBucketSpec{
				BucketName: name, Endpoint: endpoint, InsecureAllowHTTP: true, Region: sc.s3.Region,
				CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3"},
				HealthCheck: phalanksv1beta1.HealthCheck{
					Interval: &metav1.Duration{Duration: bhInterval}, Timeout: &metav1.Duration{Duration: bhTimeout},
					Depth: phalanksv1beta1.ProbeHeadBucket,
				},
			},
		}
		if err := sc.k8s.Create(ctx, sb); err != nil {
			return err
		}
		if i >= blackHoled {
			mu.Lock()
			uids[name] = sb.UID
			mu.Unlock()
		}
		return nil
	})

	var order []string
	for name := range builds {
		order = append(order, name)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] == "operator" || (order[j] != "operator" && order[i] < order[j]) })
	fmt.Printf("\n%d StorageBuckets on a black-holed endpoint and %d on a healthy MinIO, HeadBucket every %s, timeout %s, concurrency %d; %d intervals measured\n\n",
		blackHoled, healthy, bhInterval, bhTimeout, bhConcurrency, bhWindows)
	fmt.Println("| manager | healthy probes due | on time (≤ 1 s late) | missed (none within the interval) | p50 lateness | p99 lateness | black-hole connections/s |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, name := range order {
		args := []string{"--leader-elect", "--leader-elect-namespace", "phalanks-system",
			"--storagebucket-concurrency", strconv.Itoa(bhConcurrency), "--metrics-secure=false"}
		if name == "operator" {
			// The endpoints listen on loopback; the baseline predates the policy.
			args = append(args, "--storagebucket-endpoint-allow-cidrs=127.0.0.1/32")
		}
		progress("%s: starting", name)
		op := sc.start(b, "manager", bins[name], args...)
		waitFor(b, "every healthy bucket Ready", 10*time.Minute, func() bool {
			return op.metric("phalanks_storagebucket_up", nil) >= healthy
		})
		progress("%s: healthy buckets Ready; warming up for one interval", name)
		time.Sleep(bhInterval)
		from, conns0 := time.Now(), holeConns.Load()
		time.Sleep(bhWindows * bhInterval)
		to, conns1 := time.Now(), holeConns.Load()
		// Probes due in the window may arrive up to one interval later.
		time.Sleep(bhInterval)
		res := arrivals.lateness(uids, from, to)
		op.stop()
		connRate := float64(conns1-conns0) / to.Sub(from).Seconds()
		fmt.Printf("| %s | %d | %.2f %% | %d | %s | %s | %.2f |\n", name, res.due, 100*res.onTimeShare(), res.missed,
			lateText(res.quantile(0.5)), lateText(res.quantile(0.99)), connRate)
		if name == "operator" {
			b.ReportMetric(100*res.onTimeShare(), "healthy_ontime_%")
			b.ReportMetric(ms(res.quantile(0.5)), "healthy_p50_late_ms")
			b.ReportMetric(ms(res.quantile(0.99)), "healthy_p99_late_ms")
			b.ReportMetric(connRate, "blackhole_conns/s")
		} else {
			b.ReportMetric(100*res.onTimeShare(), "baseline_healthy_ontime_%")
			b.ReportMetric(ms(res.quantile(0.99)), "baseline_healthy_p99_late_ms")
		}
	}
	fmt.Println()
}

// lateText prints a lateness; a missed probe's is only known to be an interval or more.
func lateText(d time.Duration) string {
	if d >= bhInterval {
		return "≥ " + bhInterval.String() + " (missed)"
	}
	return d.Round(time.Millisecond).String()
}

// buildManagers builds the manager of each named source: "." is the working tree,
// anything else a git ref, exported with git archive (the repository is not touched).
func buildManagers(b *testing.B, dir string, builds map[string]string) map[string]string {
	root, err := tools.RepoRoot()
	must(b, err)
	out := map[string]string{}
	for name, src := range builds {
		bin := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(name))
		srcDir := root
		if src != "." {
			srcDir = filepath.Join(dir, "src-"+filepath.Base(bin))
			must(b, os.MkdirAll(srcDir, 0o700))
			archive := exec.Command("sh", "-c", "git -C \"$1\" archive \"$2\" | tar -x -C \"$3\"", "sh", root, src, srcDir)
			if o, err := archive.CombinedOutput(); err != nil {
				b.Fatalf("git archive %s: %v\n%s", src, err, o)
			}
		}
		progress("setup: building the manager of %s", name)
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = srcDir
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", name, err, o)
		}
		out[name] = bin
	}
	return out
}

// blackHoleListener accepts connections on loopback and never answers.
func blackHoleListener(b *testing.B) (string, *atomic.Int64) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	var n atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	b.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + l.Addr().String(), &n
}

// arrivalLog records when each bucket's HeadBucket request reached the healthy MinIO.
type arrivalLog struct {
	mu       sync.Mutex
	byBucket map[string][]time.Time
}

func (a *arrivalLog) record(r *http.Request) {
	if r.Method != http.MethodHead {
		return
	}
	bucket := strings.Trim(r.URL.Path, "/")
	now := time.Now()
	a.mu.Lock()
	a.byBucket[bucket] = append(a.byBucket[bucket], now)
	a.mu.Unlock()
}

// latenessResult holds the lateness of every due probe in a window.
type latenessResult struct {
	due    int
	missed int
	late   []time.Duration // sorted; a missed probe counts as one interval late
}

func (r latenessResult) onTimeShare() float64 {
	n := sort.Search(len(r.late), func(i int) bool { return r.late[i] > onTime })
	return float64(n) / float64(max(r.due, 1))
}

func (r latenessResult) quantile(q float64) time.Duration {
	if len(r.late) == 0 {
		return 0
	}
	return r.late[min(len(r.late)-1, int(q*float64(len(r.late))))]
}

// lateness finds, for every due time of every healthy bucket in [from, to), the first
// probe that arrived from just before it until the next due time.
func (a *arrivalLog) lateness(uids map[string]types.UID, from, to time.Time) latenessResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	var res latenessResult
	for name, uid := range uids {
		arrivals := a.byBucket[name]
		for d := firstDue(uid, bhInterval, from); d.Before(to); d = d.Add(bhInterval) {
			res.due++
			late := bhInterval
			for _, t := range arrivals {
				if !t.Before(d.Add(-bhEarlyTolerant)) && t.Before(d.Add(bhInterval)) {
					late = max(t.Sub(d), 0)
					break
				}
			}
			if late == bhInterval {
				res.missed++
			}
			res.late = append(res.late, late)
		}
	}
	sort.Slice(res.late, func(i, j int) bool { return res.late[i] < res.late[j] })
	return res
}

// firstDue is the bucket's first due time at or after t: its grid is phase + k·interval,
// the phase a hash of its UID (controllers/storagebucket nextDue).
func firstDue(uid types.UID, interval time.Duration, t time.Time) time.Time {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	phase := int64(h.Sum64() % uint64(interval)) //nolint:gosec // G115: below interval
	n := t.UnixNano() - phase
	k := n / int64(interval)
	if n%int64(interval) != 0 {
		k++
	}
	return time.Unix(0, phase+k*int64(interval))
}
