package sharding

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// stalledRenewals hands out the real Leases client, except that once stall is closed an
// Update blocks until its request is cancelled, as a renewal stuck on a slow API server
// does when the member is stopped.
type stalledRenewals struct {
	coordinationclient.LeasesGetter
	stall   chan struct{}
	blocked chan struct{} // closed when an Update is blocked
}

func (s *stalledRenewals) Leases(namespace string) coordinationclient.LeaseInterface {
	return stalledLeases{s.LeasesGetter.Leases(namespace), s}
}

type stalledLeases struct {
	coordinationclient.LeaseInterface
	s *stalledRenewals
}

func (l stalledLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	select {
	case <-l.s.stall:
		select {
		case <-l.s.blocked:
		default:
			close(l.s.blocked)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	default:
		return l.LeaseInterface.Update(ctx, lease, opts)
	}
}

// A member stopped while a renewal is in flight still deletes its Lease on the way out,
// so the others take its slots over within two renew periods rather than the lease
// duration. (It used to forget its Lease when the cancelled renewal failed, and left it
// to expire: the ring test saw takeovers with the lease duration's window after a
// graceful leave on a loaded machine.)
func TestLeaveDeletesTheLeaseAlsoWhenARenewalWasInFlight(t *testing.T) {
	env := startAPIServer(t, false)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	const ns = "ring"
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := &stalledRenewals{LeasesGetter: cs.CoordinationV1(), stall: make(chan struct{}), blocked: make(chan struct{})}
	m := &Member{Leases: leases, Namespace: ns, Ring: "test", Identity: "member-1",
		LeaseDuration: 10 * time.Second, RenewPeriod: 100 * time.Millisecond, Log: testr.New(t)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = m.Start(ctx); close(done) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), m.LeaseName(), metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the member created no Lease within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(leases.stall)
	select {
	case <-leases.blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal within 30s")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the member did not stop within 30s")
	}
	_, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), m.LeaseName(), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("after leaving, Get of the member's Lease = %v; want NotFound: it was left to expire", err)
	}
}
