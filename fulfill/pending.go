package fulfill

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"
)

// pendingStore holds the proposals that still wait for something, keyed by
// proposal id, in an expirable LRU, and remembers recently finished ids so a
// replayed proposal is recognised, each with the decision that governed it
// so that the replay's ignored line joins that decision (rule 10).
//
// golang-lru v2.0.7's expirable cache calls its eviction callback with its
// lock held, also for Remove, and its sweep goroutine never stops. So:
// the callback only reads the proposal's atomic state and, for a live
// entry, appends it to an unbounded-but-naturally-bounded queue (each live
// entry can be evicted once, and at most max-pending are live); the
// Fulfiller drains that queue on its own goroutine. A store is made once per
// Fulfiller, which a process makes once.
type pendingStore struct {
	cache *expirable.LRU[string, *proposal]
	seen  *lru.Cache[string, governing]
	// ended are the ids of proposals this process ended (seen also holds
	// those it left to another member): a record of one of them read
	// later is stale, never work to resume.
	ended *lru.Cache[string, struct{}]
	max   int
	ttl   time.Duration

	mu      sync.Mutex
	evicted []eviction
	signal  chan struct{} // capacity 1: "the evicted queue is not empty"
}

// eviction is a live proposal the cache let go of.
type eviction struct {
	p       *proposal
	expired bool // by TTL; otherwise pushed out by size (should not happen: we refuse new work when full)
}

func newPendingStore(max int, ttl time.Duration) *pendingStore {
	s := &pendingStore{max: max, ttl: ttl, signal: make(chan struct{}, 1)}
	// The cache is one larger than max so that the refuse-when-full check
	// in the Fulfiller, not LRU eviction, is what bounds pending work.
	s.cache = expirable.NewLRU[string, *proposal](max+1, s.onEvict, ttl)
	seenSize := 4 * max
	if seenSize < 1<<16 {
		seenSize = 1 << 16
	}
	s.seen, _ = lru.New[string, governing](seenSize)
	s.ended, _ = lru.New[string, struct{}](seenSize)
	return s
}

// onEvict runs under the cache lock: no cache calls, no Fulfiller lock.
func (s *pendingStore) onEvict(_ string, p *proposal) {
	if p.State().Terminal() {
		return // our own Remove after the proposal ended
	}
	if p.removing.Load() {
		return
	}
	expired := time.Since(time.Unix(0, p.cachedAt.Load())) >= s.ttl
	s.mu.Lock()
	s.evicted = append(s.evicted, eviction{p: p, expired: expired})
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// drain takes the queued evictions.
func (s *pendingStore) drain() []eviction {
	s.mu.Lock()
	out := s.evicted
	s.evicted = nil
	s.mu.Unlock()
	return out
}

// known reports whether a proposal id is pending or was seen recently, and
// the decision that governs it: a pending proposal's current one, a
// finished proposal's last.
func (s *pendingStore) known(id string) (governing, bool) {
	if p, ok := s.cache.Peek(id); ok {
		return *p.governor(), true
	}
	return s.seen.Get(id)
}

// markSeen remembers p's id, and the decision governing p now, for rule 5.
func (s *pendingStore) markSeen(p *proposal) {
	s.seen.Add(p.env.ID, *p.governor())
}

func (s *pendingStore) add(p *proposal) {
	s.markSeen(p)
	p.cachedAt.Store(time.Now().UnixNano())
	s.cache.Add(p.env.ID, p)
}

// readd puts back a proposal whose TTL ran out but which must live on (an
// open human prompt before its deadline, an in-flight fulfilment).
func (s *pendingStore) readd(p *proposal) {
	p.cachedAt.Store(time.Now().UnixNano())
	s.cache.Add(p.env.ID, p)
}

func (s *pendingStore) get(id string) (*proposal, bool) {
	return s.cache.Peek(id)
}

// remove drops a proposal that has ended. Its id stays in the seen set,
// now with the decision that governed its end (a re-evaluation after an
// edit replaces the first).
func (s *pendingStore) remove(p *proposal) {
	p.removing.Store(true)
	s.markSeen(p)
	s.cache.Remove(p.env.ID)
}

func (s *pendingStore) all() []*proposal {
	return s.cache.Values()
}

// markEnded remembers that this process answered (or saw withdrawn) the
// proposal id: not one it left to another member, which may come back.
func (s *pendingStore) markEnded(id string) {
	s.ended.Add(id, struct{}{})
}

// unmarkEnded forgets markEnded(id): an end that did not happen after
// all (an operator's cancel whose take was refused).
func (s *pendingStore) unmarkEnded(id string) {
	s.ended.Remove(id)
}

// endedHere reports whether this process ended the proposal id.
func (s *pendingStore) endedHere(id string) bool {
	return s.ended.Contains(id)
}
