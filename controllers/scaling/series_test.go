package scaling_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

var _ = Describe("Scheduled scaling's metrics", func() {
	It("drops a namespace's savings series with its last workload, over a thousand namespaces that come and go", func() {
		ctx := context.Background()
		clock := newStepClock(upcoming(time.Friday, 17, 59, 30))
		runOperator(scaling.Options{Clock: clock, Concurrency: 10})
		const n = 1000
		names := make([]string, n)
		By("creating a thousand namespaces with a workload each")
		inParallel(n, func(i int) {
			names[i] = newNamespace(nil)
			newDeployment(names[i], "preview", 1, map[string]string{scaling.AnnotationDowntime: "always"})
		})
		By("waiting until each saves a replica")
		Eventually(savingsSeries(names)).WithTimeout(3*time.Minute).Should(Equal(n), "every preview namespace saves a replica")

		// envtest runs no namespace controller: the test deletes each workload with its
		// namespace, as that controller would.
		By("deleting them")
		inParallel(n, func(i int) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: names[i], Name: "preview"}}
			Expect(k8s.Delete(ctx, d)).To(Succeed())
			Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i]}})).To(Succeed())
		})
		By("waiting until their series are gone")
		Eventually(savingsSeries(names)).WithTimeout(3*time.Minute).Should(BeZero(), "no series outlives the last workload of its namespace")
	})
})

// inParallel runs f for 0..n-1 on a few goroutines.
func inParallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// savingsSeries counts the series of phalanks_scaling_pod_seconds_saved_total of the
// namespaces given.
func savingsSeries(namespaces []string) func(Gomega) int {
	want := map[string]bool{}
	for _, ns := range namespaces {
		want[ns] = true
	}
	return func(g Gomega) int {
		families, err := metrics.Registry.Gather()
		g.Expect(err).NotTo(HaveOccurred())
		n := 0
		for _, f := range families {
			if f.GetName() != "phalanks_scaling_pod_seconds_saved_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "workload_namespace" && want[l.GetValue()] {
						n++
					}
				}
			}
		}
		return n
	}
}
