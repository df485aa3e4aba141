package fulfill

import (
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
)

// pendingStore holds the proposals that still wait for something, keyed by
// proposal id, in an LRU bounded by --max-pending, and remembers recently
// finished ids so a replayed proposal is recognised, each with the decision
// that governed it so that the replay's ignored line joins that decision
// (rule 10). The pending TTL is not the cache's: each proposal has its own
// timer on the Fulfiller's clock (armTTLLocked), so that tests control it
// and an entry never expires under the cache's lock.
//
// The cache is one larger than max so that the Fulfiller's refuse-when-
// full check (rule 3), not eviction, bounds pending work; an entry pushed
// out all the same (adopted work beyond the limit) is queued for a "busy"
// reject rather than dropped silently: golang-lru calls the eviction
// callback outside its lock, but on the caller's goroutine, which may hold
// Fulfiller.mu, so the Fulfiller answers it from its own (drainEvictions).
type pendingStore struct {
	cache *lru.Cache[string, *proposal]
	seen  *lru.Cache[string, governing]
	// ended are the ids of proposals this process ended (seen also holds
	// those it left to another member): a record of one of them read
	// later is stale, never work to resume.
	ended *lru.Cache[string, struct{}]

	mu      sync.Mutex
	evicted []*proposal
	signal  chan struct{} // capacity 1: "the evicted queue is not empty"
}

func newPendingStore(max int) *pendingStore {
	s := &pendingStore{signal: make(chan struct{}, 1)}
	s.cache, _ = lru.NewWithEvict[string, *proposal](max+1, s.onEvict)
	seenSize := 4 * max
	if seenSize < 1<<16 {
		seenSize = 1 << 16
	}
	s.seen, _ = lru.New[string, governing](seenSize)
	s.ended, _ = lru.New[string, struct{}](seenSize)
	return s
}

// onEvict queues a live proposal the cache pushed out.
func (s *pendingStore) onEvict(_ string, p *proposal) {
	if p.State().Terminal() || p.removing.Load() {
		return // our own Remove after the proposal ended
	}
	s.mu.Lock()
	s.evicted = append(s.evicted, p)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// drain takes the queued evictions.
func (s *pendingStore) drain() []*proposal {
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
