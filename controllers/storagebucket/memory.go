package storagebucket

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/sharding"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// memory is everything this process remembers about StorageBuckets between passes, in
// one place: the state of each bucket, keyed by UID (a StorageBucket deleted and created
// again under the same name is a new object and starts unknown), and the state of each
// endpoint those buckets are on (its circuit breaker), kept while a bucket uses it.
//
// Memory is a cache of the world, never its only record: a new leader starts with none
// and rebuilds it from the status and the next probes. Whatever must survive a restart
// (the record that this StorageBucket creates its bucket) is in the status.
type memory struct {
	mu      sync.Mutex
	buckets map[types.UID]*bucketState
	// names maps each live StorageBucket's name to its UID, to find the state of a
	// StorageBucket that is gone (the request names it; the object is not there to tell
	// its UID) and the predecessor of a re-created one; keys is the other way round, so
	// forgetting a UID costs the same with one StorageBucket or 50,000.
	names map[types.NamespacedName]types.UID
	keys  map[types.UID]types.NamespacedName
	// endpoints holds the endpoints that failed to answer, keyed by endpoint key
	// (scheme://host:port); users counts the buckets in memory on each endpoint.
	endpoints map[string]*endpointState
	users     map[string]int
}

func newMemory() *memory {
	return &memory{
		buckets:   map[types.UID]*bucketState{},
		names:     map[types.NamespacedName]types.UID{},
		keys:      map[types.UID]types.NamespacedName{},
		endpoints: map[string]*endpointState{},
		users:     map[string]int{},
	}
}

// bucketState is what this process remembers about one StorageBucket between probes.
type bucketState struct {
	key types.NamespacedName
	// generation and fingerprint are the spec and inputs the last probe used.
	generation  int64
	fingerprint fingerprint
	// ownedFor is the ownershipKey for which ownership was confirmed, if any.
	ownedFor     *ownership
	endpoint     string
	endpointDown bool
	// lockCheckedFor is the ownershipKey for which object lock was checked, and
	// objectLock what the check found.
	lockCheckedFor *ownership
	objectLock     bool
	// createRecordedFor is the placement (endpoint and region) for which the status is
	// known to record that this StorageBucket creates its bucket.
	createRecordedFor string
	obs               statusInput
	// probed is set once a probe's result is recorded, and ready is whether it found
	// the bucket Ready: with obs.failures, the bucket's series (bucketSeries).
	probed, ready bool
	// inputs are the last probing pass's inputs (Reconciler.inputsFor).
	inputs inputs
	// check and checks are the last pass's check input and the conditions made of it:
	// a pass that learns the same reuses them; checksVersion counts the rebuilds.
	check         checkInput
	checks        []metav1.Condition
	checksVersion uint64
	// shown is the last status found to show the observation already (nothing to
	// write): while the StorageBucket and the observation stay the same and no
	// heartbeat is due, the status is not computed again.
	shown shownStatus
}

// shownStatus identifies a status that shows an observation.
type shownStatus struct {
	resourceVersion string
	checksVersion   uint64
	generation      int64
	certNotAfter    int64
	created         bool
	region          string
}

// shownKey identifies the status of sb against the newest observation.
func (st *bucketState) shownKey(sb *phalanksv1beta1.StorageBucket) shownStatus {
	k := shownStatus{resourceVersion: sb.ResourceVersion, checksVersion: st.checksVersion, generation: st.obs.generation,
		created: st.obs.createdBucket != nil, region: st.obs.region}
	if !st.obs.certNotAfter.IsZero() {
		k.certNotAfter = st.obs.certNotAfter.Unix()
	}
	return k
}

// conditionsFor returns the conditions of a check input: those of the last pass when
// it learned the same.
func (st *bucketState) conditionsFor(in checkInput) []metav1.Condition {
	if st.checks != nil && in.same(st.check) {
		return st.checks
	}
	st.check, st.checks = in, checkConditions(in)
	st.checksVersion++
	return st.checks
}

// ownership is the spec and inputs for which something about the bucket was found out
// (that it is ours, whether it has object lock): a change of either asks again.
type ownership struct {
	generation int64
	inputs     fingerprint
}

func (st *bucketState) ownershipKey() *ownership {
	return &ownership{generation: st.generation, inputs: st.fingerprint}
}

// confirmedFor reports whether a finding holds for the bucket's spec and inputs now.
func (st *bucketState) confirmedFor(o *ownership) bool {
	return o != nil && *o == ownership{generation: st.generation, inputs: st.fingerprint}
}

// bucketRef names a bucket for the scheduler: by UID, with the name its requests carry.
type bucketRef struct {
	UID types.UID
	Key types.NamespacedName
}

// track records that key names uid now, and returns the UID it named before, if another.
func (m *memory) track(uid types.UID, key types.NamespacedName) (types.UID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.names[key]
	if ok && prev == uid {
		return uid, false // known already: every pass but the first
	}
	m.names[key], m.keys[uid] = uid, key
	return prev, ok
}

// uidOf returns the UID key names.
func (m *memory) uidOf(key types.NamespacedName) (types.UID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uid, ok := m.names[key]
	return uid, ok
}

// state returns a copy of the bucket's state, or nil for a bucket not probed yet. The
// pass works on the copy and stores it when it reports; a pass that stops without a
// result leaves the state as it was.
func (m *memory) state(uid types.UID) *bucketState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.buckets[uid]; ok {
		cp := spareStates.Get().(*bucketState)
		*cp = *st
		return cp
	}
	return nil
}

// spareStates holds the states that store replaced, for the copies of later passes: a
// state is some 600 bytes, copied on every pass. A replaced state is no one's: the
// passes of a StorageBucket run one at a time, and the one that stored it has ended
// before the next one copies it.
var spareStates = sync.Pool{New: func() any { return new(bucketState) }}

// store keeps the bucket's state.
func (m *memory) store(uid types.UID, st *bucketState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.buckets[uid]
	m.buckets[uid] = st
	switch {
	case !ok:
		m.users[st.endpoint]++
		return
	case old == st:
		return
	case old.endpoint != st.endpoint: // else the same endpoint's user still
		m.leaveLocked(old.endpoint)
		m.users[st.endpoint]++
	}
	*old = bucketState{}
	spareStates.Put(old)
}

// forget drops the bucket's state and returns its name; an endpoint no bucket uses any
// more is dropped with it.
func (m *memory) forget(uid types.UID) (types.NamespacedName, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, found := m.keys[uid]
	if st, ok := m.buckets[uid]; ok {
		key, found = st.key, true
		m.leaveLocked(st.endpoint)
		delete(m.buckets, uid)
	}
	delete(m.keys, uid)
	if m.names[key] == uid {
		delete(m.names, key)
	}
	return key, found
}

// seriesValue is what one bucket's series show.
type seriesValue struct {
	key      types.NamespacedName
	ready    bool
	failures int32
}

// series appends the series of every bucket whose probe result is recorded to out. A
// state is not changed once stored but for what writing the status records (a pass
// works on a copy), so reading it under the lock is safe. A state whose name now names
// another object (a pass of a StorageBucket replaced under its name that ended after
// the replacement stored it again) is left out: the name's series are its successor's.
func (m *memory) series(out []seriesValue) []seriesValue {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, st := range m.buckets {
		if !st.probed {
			continue
		}
		if named, ok := m.names[st.key]; ok && named != uid {
			continue
		}
		out = append(out, seriesValue{key: st.key, ready: st.ready, failures: st.obs.failures})
	}
	return out
}

// uidsIn returns the UIDs this memory holds anything for whose slot is in slots.
func (m *memory) uidsIn(slots sharding.Set) []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []types.UID
	for uid := range m.keys {
		if slots.Has(sharding.SlotOf(uid)) {
			out = append(out, uid)
		}
	}
	for uid := range m.buckets {
		if _, named := m.keys[uid]; !named && slots.Has(sharding.SlotOf(uid)) {
			out = append(out, uid)
		}
	}
	return out
}

func (m *memory) leaveLocked(endpoint string) {
	m.users[endpoint]--
	if m.users[endpoint] <= 0 {
		delete(m.users, endpoint)
		delete(m.endpoints, endpoint)
	}
}

// The circuit breaker of an endpoint that does not answer. After breakerOpensAfter
// unanswered probes in a row (from any of its buckets) it opens: from then on one bucket
// at a time probes the endpoint (the trial), no sooner than a backoff after the last
// failed trial, and every other bucket that comes due meanwhile is marked with the last
// trial's result instead of spending a worker on a probe that would time out. The first
// answer closes it, and every bucket marked meanwhile is probed at once.
const (
	breakerOpensAfter   = 2
	breakerFirstBackoff = time.Second
	breakerMaxBackoff   = 30 * time.Second
)

// endpointState is the circuit breaker of one endpoint.
type endpointState struct {
	failures int
	open     bool
	// last is the newest unanswered probe's failure, which marks the other buckets.
	last *taxonomy.Failure
	// trial is the bucket probing the endpoint while it is open, until trialUntil (a
	// trial whose pass never reports ends with its pass budget).
	trial      types.UID
	trialUntil time.Time
	nextTrial  time.Time
	backoff    time.Duration
}

// admit decides whether a bucket on an endpoint is probed now. It returns the failure
// to mark the bucket with when it is not.
func (m *memory) admit(endpoint string, uid types.UID, now time.Time, budget time.Duration) (bool, *taxonomy.Failure) {
	m.mu.Lock()
	defer m.mu.Unlock()
	es := m.endpoints[endpoint]
	if es == nil || !es.open {
		return true, nil
	}
	if (es.trial != "" && now.Before(es.trialUntil)) || now.Before(es.nextTrial) {
		return false, es.last
	}
	es.trial, es.trialUntil = uid, now.Add(budget)
	return true, nil
}

// report records a probe's result for its endpoint. When the endpoint answered after it
// had not, it returns the other buckets on it that were down, to probe at once.
func (m *memory) report(endpoint string, uid types.UID, f *taxonomy.Failure, now time.Time, interval time.Duration) []bucketRef {
	m.mu.Lock()
	defer m.mu.Unlock()
	es := m.endpoints[endpoint]
	if es != nil && es.trial == uid {
		es.trial = ""
	}
	switch {
	case f != nil && taxonomy.EndpointDown(f.Reason):
		if es == nil {
			es = &endpointState{}
			m.endpoints[endpoint] = es
		}
		es.failures++
		es.last = f
		switch {
		case es.open:
			es.backoff = min(max(2*es.backoff, breakerFirstBackoff), breakerMaxBackoff, max(interval, breakerFirstBackoff))
			es.nextTrial = now.Add(es.backoff)
		case es.failures >= breakerOpensAfter:
			es.open, es.backoff, es.nextTrial = true, breakerFirstBackoff, now.Add(breakerFirstBackoff)
		}
		return nil
	case answered(f) && es != nil:
		delete(m.endpoints, endpoint)
		var again []bucketRef
		for u, other := range m.buckets {
			if u != uid && other.endpoint == endpoint && other.endpointDown {
				again = append(again, bucketRef{UID: u, Key: other.key})
			}
		}
		return again
	}
	return nil
}

// answered reports whether a probe result shows the endpoint answering: a success, or
// a failure that needed an answer (credentials, bucket, TLS certificate).
func answered(f *taxonomy.Failure) bool {
	if f == nil {
		return true
	}
	switch f.Reason {
	case taxonomy.ReasonCABundleNotFound, taxonomy.ReasonInvalidCABundle, taxonomy.ReasonUnclassified,
		taxonomy.ReasonEndpointNotAllowed:
		return false
	}
	return !taxonomy.EndpointDown(f.Reason)
}
