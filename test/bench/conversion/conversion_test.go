// Package conversion_test measures what the conversion webhook costs a client that lists
// StorageBuckets in v1alpha1, against listing the same objects in the stored v1beta1.
package conversion_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/webhooks"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

const (
	objects = 5000
	rounds  = 9
)

// BenchmarkListV1alpha1VsV1beta1 lists 5,000 StorageBuckets as v1alpha1 (every object
// through the conversion webhook) and as v1beta1 (none), alternating, and reports the
// median of each and their ratio.
func BenchmarkListV1alpha1VsV1beta1(b *testing.B) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	ctrl.SetLogger(logr.Discard())
	env, err := envtest.Start(envtest.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	mgr, err := env.NewManager()
	if err != nil {
		b.Fatal(err)
	}
	if err := webhooks.Setup(mgr); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go func() { _ = mgr.Start(ctx) }()

	ns := "bench"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	createAll(ctx, b, env.Client, ns)

	var alpha, beta []time.Duration
	for b.Loop() {
		for range rounds {
			beta = append(beta, timeList(ctx, b, env.Client, &phalanksv1beta1.StorageBucketList{}, ns))
			alpha = append(alpha, timeList(ctx, b, env.Client, &phalanksv1alpha1.StorageBucketList{}, ns))
		}
	}
	ma, mb := median(alpha), median(beta)
	b.ReportMetric(ma.Seconds(), "v1alpha1-list-s")
	b.ReportMetric(mb.Seconds(), "v1beta1-list-s")
	b.ReportMetric(ma.Seconds()/mb.Seconds(), "v1alpha1/v1beta1")
}

func createAll(ctx context.Context, b *testing.B, c client.Client, ns string) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, objects)
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				errs <- c.Create(ctx, &phalanksv1beta1.StorageBucket{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("bucket-%05d", i)},
					Spec: phalanksv1beta1.StorageBucketSpec{
						BucketName: fmt.Sprintf("bucket-%05d", i), Endpoint: "https://s3.eu-central-1.amazonaws.com",
						Region:               "eu-central-1",
						CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "creds"},
						ManagementPolicy:     phalanksv1beta1.ManagementManage,
						HealthCheck: phalanksv1beta1.HealthCheck{
							Interval: &metav1.Duration{Duration: time.Minute}, Timeout: &metav1.Duration{Duration: 5 * time.Second},
							Depth: phalanksv1beta1.ProbeHeadBucket,
						},
					},
				})
			}
		})
	}
	for i := range objects {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func timeList(ctx context.Context, b *testing.B, c client.Client, list client.ObjectList, ns string) time.Duration {
	b.Helper()
	start := time.Now()
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	if n := len(listItems(list)); n != objects {
		b.Fatalf("listed %d objects, want %d", n, objects)
	}
	return d
}

func listItems(list client.ObjectList) []any {
	switch l := list.(type) {
	case *phalanksv1alpha1.StorageBucketList:
		return make([]any, len(l.Items))
	case *phalanksv1beta1.StorageBucketList:
		return make([]any, len(l.Items))
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
