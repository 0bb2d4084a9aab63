package storagebucket

import (
	"testing"
	"time"

	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// An endpoint's circuit breaker lasts while a bucket uses the endpoint, also when that
// bucket is its only one: storing the bucket's state after each pass must not drop the
// endpoint (a store used to leave the endpoint and join it again, which forgot the
// breaker of an endpoint with one bucket on every pass).
func TestTheBreakerOfAnEndpointOutlivesItsOnlyBucketsPasses(t *testing.T) {
	const endpoint = "https://s3.example.com:443"
	m := newMemory()
	b := key(1)
	down := taxonomy.NewFailure(taxonomy.ReasonTimeout, nil, "no answer")
	now := t0
	for range breakerOpensAfter {
		st := m.state(b.UID)
		if st == nil {
			st = &bucketState{key: b.Key}
		}
		st.endpoint = endpoint
		m.report(endpoint, b.UID, down, now, time.Minute)
		m.store(b.UID, st)
	}
	if admitted, _ := m.admit(endpoint, b.UID, now, time.Minute); admitted {
		t.Fatalf("the breaker is closed after %d unanswered probes and a store each", breakerOpensAfter)
	}
	if admitted, _ := m.admit(endpoint, b.UID, now.Add(breakerFirstBackoff), time.Minute); !admitted {
		t.Error("the bucket is not the trial once the backoff passed")
	}
	m.forget(b.UID)
	if admitted, _ := m.admit(endpoint, b.UID, now, time.Minute); !admitted {
		t.Error("the breaker outlived the endpoint's last bucket")
	}
}
