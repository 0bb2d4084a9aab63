package scaling_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/kubeconfig"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// pluginBinary builds kubectl-phalanks once for the run.
var pluginBinary = func() func(t *testing.T) string {
	var once sync.Once
	var bin string
	var err error
	return func(t *testing.T) string {
		t.Helper()
		once.Do(func() { bin, err = tools.BuildCommand(workDir, "./cmd/kubectl-phalanks") })
		expect(t).Expect(err).NotTo(HaveOccurred())
		return bin
	}
}()

// plugin runs the built kubectl-phalanks binary as kubectl would, and returns its
// output and exit status.
type plugin struct {
	bin, kubeconfig string
}

type result struct {
	stdout, stderr string
	code           int
}

func (p plugin) run(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+p.kubeconfig, "TZ=Europe/Berlin")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl-phalanks %s → %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// TestKubectlPhalanks runs the plugin binary as a tenant with the edit role in one
// namespace, as most users of a shared cluster are, and as an administrator: status,
// wake and sleep with their effect on the operator, explain, and the exit status of
// each, including a conflict with an annotation someone else set, a sleep that cannot
// take effect and wrong usage.
func TestKubectlPhalanks(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	dir := t.TempDir()
	bin := pluginBinary(t)
	asAdmin := plugin{bin: bin, kubeconfig: local.Kubeconfig}
	tenantConfig := filepath.Join(dir, "tenant.kubeconfig")
	g.Expect(kubeconfig.Impersonating(local.Kubeconfig, tenantConfig, "tenant")).To(Succeed())
	asTenant := plugin{bin: bin, kubeconfig: tenantConfig}

	team := newNamespace(t, nil)
	grantEdit(t, team, "tenant")
	// The operator's Deployment, as config/manager makes it (not run here: the operator
	// runs in the test), which an administrator's plugin reads its flags from.
	operatorNS := newNamespace(t, nil)
	operatorDeployment(t, operatorNS, "--leader-elect", "--scaling-time-zone=Europe/Berlin")
	startOperator(t, scaling.Options{TimeZone: "Europe/Berlin"})

	web := newDeploymentWith(t, team, "web", 3, map[string]string{scaling.AnnotationDowntime: "always"}, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	})
	newDeployment(t, team, "api", 2, map[string]string{scaling.AnnotationUptime: "always"})
	pinned := newDeployment(t, team, "pinned", 1, map[string]string{scaling.AnnotationUptime: "always", scaling.AnnotationForceUptime: "true"})
	legacy := newDeployment(t, team, "legacy", 1, map[string]string{scaling.AnnotationUptime: "always", scaling.AnnotationExcludeUntil: "2020-01-01T00:00:00Z"})
	// No zone: valid only with the operator's --scaling-time-zone.
	zoneless := newDeployment(t, team, "local", 1, map[string]string{scaling.AnnotationDowntime: "Mon-Sun 00:00-24:00"})
	report := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "report", Annotations: map[string]string{scaling.AnnotationDowntime: "always"}},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: podTemplate("report").Spec.Containers}}}}},
	}
	g.Expect(admin.Create(ctx, report)).To(Succeed())
	// A budget: not a kind the plugin lists, and no error either.
	budget(t, team, "api", 1)
	// What a thousand replicas save grows fast against the plugin's rounding (0.1
	// pod-hours, 0.01 CPU- and GiB-hours): a workload paused before its first rollout,
	// so that the Deployment controller starts none of its pods.
	savingsNS := newNamespace(t, nil)
	newDeploymentWith(t, savingsNS, "fleet", 1000, map[string]string{scaling.AnnotationDowntime: "always"}, func(d *appsv1.Deployment) {
		d.Spec.Paused = true
		d.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	})
	webReplicas := func(g Gomega) int32 { return ptr.Deref(live(web)(g).Spec.Replicas, -1) }
	g.Eventually(webReplicas).WithTimeout(timeout).Should(BeEquivalentTo(0))
	g.Eventually(func(g Gomega) int32 { return ptr.Deref(live(zoneless)(g).Spec.Replicas, -1) }).WithTimeout(timeout).Should(BeEquivalentTo(0),
		"the operator, with its time zone, scales it down")

	t.Run("status, as a tenant who cannot read the operator's settings", func(t *testing.T) {
		g := expect(t)
		r := asTenant.run(t, "status", "-n", team, "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stderr).To(ContainSubstring("note: could not read the operator's Deployment in namespace " + operatorNS + " (Forbidden)"))
		g.Expect(r.stdout).To(HavePrefix("KIND "))
		g.Expect(lines(r.stdout)).To(ContainElements(
			MatchRegexp(`^Deployment +web +down +0 +3 +- +downtime \(schedule of the object\); 3 to restore$`),
			MatchRegexp(`^Deployment +api +up +2 +- +- +uptime \(schedule of the object\)$`),
			MatchRegexp(`^CronJob +report +down +0 +1 +- +downtime \(schedule of the object\); suspended`),
			MatchRegexp(`^Deployment +local +invalid +\d +\S+ +- +not scaled: phalanks.io/downtime: element 1 "Mon-Sun 00:00-24:00": no time zone given`),
		))
		// web's 3 replicas of 250m and 128Mi. Without the operator's time zone local's
		// schedule reads as invalid, which counts as none: the tenant's view expects
		// its restore, so its replica is not counted.
		g.Expect(r.stdout).To(ContainSubstring("Scaled down now: 3 replicas of 1 workload, requesting 0.75 CPU and 0.38 GiB of memory."))
		g.Expect(r.stdout).To(MatchRegexp(`Saved since each was scaled down: \d+\.\d pod-hours`))
	})

	t.Run("status, as an administrator, with the operator's flags and across namespaces", func(t *testing.T) {
		g := expect(t)
		r := asAdmin.run(t, "status", "-A", "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stderr).NotTo(ContainSubstring("note:"))
		g.Expect(lines(r.stdout)).To(ContainElement(MatchRegexp(`^` + team + ` +Deployment +local +down +`)))

		r = asTenant.run(t, "status", "-A", "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stderr).To(ContainSubstring("warning: cannot list deployments.apps in any namespace: Forbidden"))
	})

	t.Run("status, as an administrator, finds the operator OLM installed without --operator-namespace", func(t *testing.T) {
		g := expect(t)
		r := asAdmin.run(t, "status", "-n", team)
		g.Expect(r.stderr).To(ContainSubstring("found no phalanks-operator Deployment in namespace phalanks-system"))
		g.Expect(r.stderr).To(ContainSubstring("found no phalanks-operator Deployment in namespace phalanks-operator"))
		g.Expect(lines(r.stdout)).To(ContainElement(MatchRegexp(`^Deployment +local +invalid +`)), "without the operator's time zone")

		// OLM's suggested namespace, with the operator's Deployment as the bundle makes it.
		olmNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "phalanks-operator"}}
		g.Expect(admin.Create(ctx, olmNS)).To(Succeed())
		t.Cleanup(func() { _ = admin.Delete(context.Background(), olmNS) })
		operatorDeployment(t, olmNS.Name, "--leader-elect", "--scaling-time-zone=Europe/Berlin")
		r = asAdmin.run(t, "status", "-n", team)
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stderr).NotTo(ContainSubstring("note:"))
		g.Expect(lines(r.stdout)).To(ContainElement(MatchRegexp(`^Deployment +local +down +`)), "with the time zone of the operator in phalanks-operator")
	})

	t.Run("the savings the status prints are the operator's metrics", func(t *testing.T) {
		g := expect(t)
		// The tenant's status above said 4 replicas held down in team.
		g.Eventually(func() float64 { return metric(g, "phalanks_scaling_replicas_scaled_down", team, "Deployment") }).Should(Equal(4.0))
		g.Expect(live(web)(g).Annotations).To(And(
			HaveKeyWithValue(scaling.AnnotationPodRequests, "cpu=250m,memory=128Mi"), HaveKey(scaling.AnnotationScaledDownAt)))

		// fleet's 1,000 replicas of 0.5 CPU and 1 GiB, per second held down.
		series := []struct {
			metric              string
			perSecond, halfUnit float64
		}{
			{"phalanks_scaling_pod_seconds_saved_total", 1000, 0.05},
			{"phalanks_scaling_cpu_request_core_seconds_saved_total", 500, 0.005},
			{"phalanks_scaling_memory_request_byte_seconds_saved_total", 1000 << 30, 0.005 * (1 << 30)},
		}
		read := func() []float64 {
			var out []float64
			for _, s := range series {
				out = append(out, metric(g, s.metric, savingsNS, "Deployment"))
			}
			return out
		}
		// 20 s held down: a factor wrong in either count shows beyond the slack.
		g.Eventually(func() float64 { return read()[0] }).WithTimeout(timeout).Should(BeNumerically(">=", 20*series[0].perSecond))
		before := read()
		r := asAdmin.run(t, "status", "-n", savingsNS, "--operator-namespace", operatorNS)
		after := read()
		g.Expect(r.code).To(Equal(0))
		g.Expect(metric(g, "phalanks_scaling_replicas_scaled_down", savingsNS, "Deployment")).To(Equal(1000.0))
		g.Expect(r.stdout).To(ContainSubstring("Scaled down now: 1000 replicas of 1 workload, requesting 500.00 CPU and 1000.00 GiB of memory."))
		m := regexp.MustCompile(`Saved since each was scaled down: (\d+\.\d) pod-hours, (\d+\.\d\d) CPU-hours, (\d+\.\d\d) GiB-hours of memory requests\.`).
			FindStringSubmatch(r.stdout)
		g.Expect(m).To(HaveLen(4), "the savings line")
		// The plugin's instant lies between the two reads of the metrics. It counts from
		// scaled-down-at, which the operator stamps (to the second) when it decides; the
		// metrics count from when it has written the scale-down: a few seconds at most.
		const recordSlack = 5 * time.Second
		for i, s := range series {
			printed, err := strconv.ParseFloat(m[i+1], 64)
			g.Expect(err).NotTo(HaveOccurred())
			if i == 2 {
				printed *= 1 << 30 // GiB-hours
			}
			g.Expect(printed*3600).To(BeNumerically(">=", before[i]-s.halfUnit*3600), "%s: status printed %s, the metric said %.0f before", s.metric, m[i+1], before[i])
			g.Expect(printed*3600).To(BeNumerically("<=", after[i]+s.halfUnit*3600+s.perSecond*recordSlack.Seconds()),
				"%s: status printed %s, the metric said %.0f after", s.metric, m[i+1], after[i])
		}
	})

	t.Run("status shows overrides, grace periods, exclusions and next transitions in TZ's zone", func(t *testing.T) {
		g := expect(t)
		ns := newNamespace(t, nil)
		grantEdit(t, ns, "tenant")
		now := time.Now()
		spec, end := downtimeForAnHour()
		downtimeEnd, err := time.Parse(time.RFC3339, end)
		g.Expect(err).NotTo(HaveOccurred())

		held := newDeployment(t, ns, "held", 3, map[string]string{scaling.AnnotationDowntime: spec})
		g.Eventually(func(g Gomega) *appsv1.Deployment { return live(held)(g) }).WithTimeout(timeout).Should(And(
			HaveField("Spec.Replicas", HaveValue(BeEquivalentTo(0))),
			HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, end))))
		g.Expect(admin.SubResource("scale").Patch(ctx, held, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`)),
			client.WithSubResourceBody(&autoscalingv1.Scale{}), client.FieldOwner("kubectl"))).To(Succeed())
		g.Eventually(notes(held, scaling.ReasonManualOverride)).WithTimeout(timeout).ShouldNot(BeEmpty())

		newDeployment(t, ns, "fresh", 2, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationGracePeriod: "1h"})
		exclusionEnd := now.Add(3 * time.Hour).UTC().Truncate(time.Second)
		newDeployment(t, ns, "exempt", 2, map[string]string{scaling.AnnotationDowntime: spec,
			scaling.AnnotationExcludeUntil: exclusionEnd.Format(time.RFC3339)})
		// A one-minute downtime in Tokyo three hours from now: the plugin, in Berlin, shows
		// its start in Berlin's time.
		tokyo, err := time.LoadLocation("Asia/Tokyo")
		g.Expect(err).NotTo(HaveOccurred())
		downtimeStart := now.Add(3 * time.Hour).Truncate(time.Minute)
		from, to := downtimeStart.In(tokyo).Format("15:04"), downtimeStart.Add(time.Minute).In(tokyo).Format("15:04")
		if to == "00:00" {
			to = "24:00"
		}
		newDeployment(t, ns, "tokyo", 1, map[string]string{scaling.AnnotationDowntime: "Mon-Sun " + from + "-" + to + " Asia/Tokyo"})

		berlin, err := time.LoadLocation("Europe/Berlin")
		g.Expect(err).NotTo(HaveOccurred())
		inBerlin := func(t time.Time) string { return regexp.QuoteMeta(t.In(berlin).Format("Mon 2006-01-02 15:04 MST")) }
		r := asTenant.run(t, "status", "-n", ns, "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(0))
		g.Expect(lines(r.stdout)).To(ContainElements(
			MatchRegexp(`^Deployment +held +override +2 +3 +`+inBerlin(downtimeEnd)+` \(in \d+m\) +`+
				`replicas changed to 2 during the downtime: kept until the next transition at `+end+`, then 3 are restored$`),
			MatchRegexp(`^Deployment +fresh +grace +2 +- +`+inBerlin(downtimeEnd)+` \(in \d+m\) +`+
				`in downtime, but created less than 1h0m0s ago; scaling down at \S+ at the earliest$`),
			MatchRegexp(`^Deployment +exempt +excluded +2 +- +`+inBerlin(exclusionEnd)+` \(in 2h\d+m\) +excluded \(exclude or exclude-until\)$`),
			MatchRegexp(`^Deployment +tokyo +up +1 +- +`+inBerlin(downtimeStart)+` \(in 2h\d+m\) +uptime \(schedule of the object\)$`),
		))
	})

	t.Run("wake one workload, then sleep it, then end the sleep", func(t *testing.T) {
		g := expect(t)
		r := asTenant.run(t, "wake", team+"/deploy/web", "--for", "2h", "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stdout).To(ContainSubstring(team + "/Deployment/web: awake until "))
		g.Eventually(webReplicas).WithTimeout(timeout).Should(BeEquivalentTo(3), "the operator restores it")
		g.Expect(live(web)(g).Annotations).To(HaveKey(scaling.AnnotationExcludeUntil))
		g.Expect(writtenBy("kubectl-phalanks")(live(web)(g))).To(BeTrue())

		// The operator here runs without a grace period; a tenant who cannot read its
		// flags gives them (the plugin's default is the operator's, 15m).
		r = asTenant.run(t, "sleep", team+"/Deployment/web", "--for", "30m", "--operator-namespace", operatorNS, "--scaling-grace-period=0s")
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stdout).To(ContainSubstring(team + "/Deployment/web: asleep until "))
		g.Eventually(webReplicas).WithTimeout(timeout).Should(BeEquivalentTo(0))
		a := live(web)(g).Annotations
		g.Expect(a).NotTo(HaveKey(scaling.AnnotationExcludeUntil), "the sleep replaces the wake")
		g.Expect(a[scaling.AnnotationForceDowntime]).To(HavePrefix("until "))

		r = asTenant.run(t, "sleep", team+"/deployments/web", "--cancel", "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stdout).To(ContainSubstring("sleep ended; now down: downtime (schedule of the object)"))
		g.Expect(live(web)(g).Annotations).NotTo(HaveKey(scaling.AnnotationForceDowntime), "nothing is left to clean up")
	})

	t.Run("wake a namespace", func(t *testing.T) {
		g := expect(t)
		r := asTenant.run(t, "wake", team, "--for", "1h", "--operator-namespace", operatorNS)
		// legacy's exclude-until is someone else's: not changed, and the exit status says so.
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stdout).To(ContainSubstring(team + "/CronJob/report: awake until"))
		g.Expect(r.stdout).To(ContainSubstring(team + "/Deployment/web: awake until"))
		g.Expect(r.stderr).To(ContainSubstring(team + "/Deployment/legacy: not changed: someone else set the annotation"))
		g.Expect(r.stderr).To(ContainSubstring(team + "/Deployment/local: set, but it has no effect: invalid"))
		g.Expect(r.stderr).To(ContainSubstring("error: wake: 2 of 6 not done"))
		g.Expect(live(legacy)(g).Annotations).To(HaveKeyWithValue(scaling.AnnotationExcludeUntil, "2020-01-01T00:00:00Z"))
		g.Eventually(webReplicas).WithTimeout(timeout).Should(BeEquivalentTo(3))
		g.Eventually(func(g Gomega) bool { return ptr.Deref(live(report)(g).Spec.Suspend, true) }).WithTimeout(timeout).Should(BeFalse())
	})

	t.Run("a sleep of a workload in its grace period says when it takes effect", func(t *testing.T) {
		g := expect(t)
		newDeployment(t, team, "fresh", 1, map[string]string{scaling.AnnotationUptime: "always", scaling.AnnotationGracePeriod: "1h"})
		r := asTenant.run(t, "sleep", team+"/deploy/fresh", "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stdout).To(MatchRegexp(team + `/Deployment/fresh: asleep until .*, once its grace period is over: in downtime, but created less than 1h0m0s ago`))
	})

	t.Run("a sleep that force-uptime overrides fails and says why", func(t *testing.T) {
		g := expect(t)
		r := asTenant.run(t, "sleep", team+"/deploy/pinned", "--operator-namespace", operatorNS)
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stderr).To(ContainSubstring(team + "/Deployment/pinned: set, but it has no effect: up"))
		g.Expect(live(pinned)(g).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
	})

	t.Run("explain", func(t *testing.T) {
		g := expect(t)
		// Friday noon in Berlin.
		r := asTenant.run(t, "explain", "Mon-Fri 20:00-08:00 Europe/Berlin", "--from", "2026-11-27T12:00:00+01:00", "--count", "2")
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stdout).To(Equal(`Schedule: Mon-Fri 20:00-08:00 Europe/Berlin
Now (Fri 2026-11-27 12:00 CET): outside
Next transitions:
  Fri 2026-11-27 20:00 CET       enters
  Sat 2026-11-28 08:00 CET       leaves

kube-downscaler reads it differently:
  element 1 "Mon-Fri 20:00-08:00 Europe/Berlin": kube-downscaler never matches a window that ends before it starts
  as: never
Next transitions:
  none: it never changes

GoKubeDownscaler reads it differently:
  element 1 "Mon-Fri 20:00-08:00 Europe/Berlin": GoKubeDownscaler counts the part after midnight to the day it falls on: Mon-Fri 20:00-24:00 Europe/Berlin, Mon-Fri 00:00-08:00 Europe/Berlin
  as: Mon-Fri 20:00-24:00 Europe/Berlin, Mon-Fri 00:00-08:00 Europe/Berlin
Next transitions:
  Fri 2026-11-27 20:00 CET       enters
  Sat 2026-11-28 00:00 CET       leaves
`))

		calendar(t, team, "xmas", map[string]string{"2026": "2026-12-24T00:00:00+01:00-2026-12-27T00:00:00+01:00"}, true)
		r = asTenant.run(t, "explain", "holidays:xmas", "-n", team, "--from", "2026-11-27T12:00:00+01:00", "--count", "2")
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stdout).To(ContainSubstring("  Thu 2026-12-24 00:00 CET       enters\n  Sun 2026-12-27 00:00 CET       leaves\n"))
		g.Expect(r.stdout).To(ContainSubstring("so kube-downscaler rejects the schedule"))

		r = asTenant.run(t, "explain", "Mon-Fri 8:00-18:00 Europe/Berlin")
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stderr).To(ContainSubstring(`error: invalid schedule: element 1 "Mon-Fri 8:00-18:00 Europe/Berlin": start "8:00" is not HH:MM`))
	})

	t.Run("wrong usage", func(t *testing.T) {
		g := expect(t)
		for _, args := range [][]string{{}, {"wake"}, {"wake", "a/b"}, {"sleep", team, "--for", "-1h"}, {"frobnicate"}, {"status", "--no-such-flag"}} {
			r := asTenant.run(t, args...)
			g.Expect(r.code).To(Equal(2), "kubectl-phalanks %v", args)
			g.Expect(r.stderr).To(ContainSubstring("Commands:"))
		}
		r := asTenant.run(t, "wake", team+"/deploy/nosuch")
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stderr).To(ContainSubstring("Deployment " + team + "/nosuch not found"))
	})
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// grantEdit binds the built-in edit role to user in namespace.
func grantEdit(t *testing.T, namespace, user string) {
	t.Helper()
	expect(t).Expect(admin.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})).To(Succeed())
}

// operatorDeployment creates the operator's Deployment with args, at no replicas.
func operatorDeployment(t *testing.T, namespace string, args ...string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "phalanks-operator", "control-plane": "controller-manager"}
	expect(t).Expect(admin.Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "phalanks-controller-manager"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "manager", Image: "quay.io/phalanks/phalanks-operator:v0.2.0", Command: []string{"/manager"}, Args: args},
			}}},
		},
	})).To(Succeed())
}

// newDeploymentWith creates a Deployment as newDeployment does, changed by change first.
func newDeploymentWith(t *testing.T, ns, name string, replicas int32, annotations map[string]string, change func(*appsv1.Deployment)) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name),
		},
	}
	change(d)
	expect(t).Expect(admin.Create(context.Background(), d)).To(Succeed())
	return d
}

// metric reads one series of the operator's metrics (it runs in this process).
func metric(g Gomega, name, namespace, kind string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["workload_namespace"] == namespace && labels["kind"] == kind {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestAWakeNeverWritesAnObjectDeletedSinceItWasRead runs kubectl phalanks wake against
// the API server through a proxy that deletes the object after the plugin read it and
// before its write arrives. A custom resource whose schema takes any spec would be
// re-created by a server-side apply of the annotation alone; the write carries the UID
// read, so the API server refuses it, and the plugin says so.
func TestAWakeNeverWritesAnObjectDeletedSinceItWasRead(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	dir := t.TempDir()
	bin := pluginBinary(t)
	widgets, err := crds.Load(filepath.Join("testdata"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(crds.Install(ctx, admin, widgets, nil)).To(Succeed())
	ns := newNamespace(t, nil)
	shop := newWidget(t, ns, "shop", 2, map[string]string{scaling.AnnotationDowntime: "always"})

	// The proxy passes every request on with the administrator's credentials; the
	// first write to the widget waits until the widget is gone.
	transport, err := rest.TransportFor(local.Config)
	g.Expect(err).NotTo(HaveOccurred())
	upstream, err := url.Parse(local.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	var deleted atomic.Bool
	proxy := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Header.Del("Authorization")
		},
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/widgets/shop") && !deleted.Swap(true) {
			if err := admin.Delete(r.Context(), shop); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	config := filepath.Join(dir, "proxied.kubeconfig")
	g.Expect(kubeconfig.Write(config, kubeconfig.Config{Server: server.URL, User: "proxied", Token: "replaced-by-the-proxy"})).To(Succeed())

	r := plugin{bin: bin, kubeconfig: config}.run(t, "wake", ns+"/widgets/shop", "--operator-namespace", ns,
		"--scaling-resources=deployments.apps,widgets.scaling.e2e.phalanks.io")
	g.Expect(deleted.Load()).To(BeTrue(), "the plugin wrote to the widget")
	g.Expect(r.code).To(Equal(1))
	g.Expect(r.stderr).To(ContainSubstring(ns + "/Widget/shop: not changed: it was deleted or replaced since it was read"))
	err = admin.Get(ctx, client.ObjectKeyFromObject(shop), shop.DeepCopy())
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no widget was made of the annotation alone: %v", err)
}
