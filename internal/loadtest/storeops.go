package loadtest

import (
	"sync"
	"time"
)

// storeOps is the run's state.Observer: the latency of each kind of store
// operation (claim, put, update, sync, delete, …), so that a report says
// where durability's cost goes on the disk it ran on. Only successful
// operations count; a lost claim or a conflict is a result, not a cost.
type storeOps struct {
	mu  sync.Mutex
	ops map[string]*histogram
}

func newStoreOps() *storeOps { return &storeOps{ops: map[string]*histogram{}} }

func (s *storeOps) StoreOp(op string, d time.Duration, err error) {
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.ops[op]
	if h == nil {
		h = new(histogram)
		s.ops[op] = h
	}
	h.record(d.Nanoseconds())
}

func (*storeOps) Claimed(bool)        {}
func (*storeOps) Adopted(string, int) {}
func (*storeOps) LeaseRenewed(error)  {}

// reset forgets what was measured so far: the report covers the measured
// window only, not opening the store.
func (s *storeOps) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.ops)
}

// percentiles returns each operation's latency; nil when none ran.
func (s *storeOps) percentiles() map[string]Percentiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ops) == 0 {
		return nil
	}
	m := make(map[string]Percentiles, len(s.ops))
	for op, h := range s.ops {
		m[op] = h.percentiles()
	}
	return m
}
