package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/clocktest"
)

// benchStore is a Store in memory that reports each deleted record (the
// proposal's end) on ended; with now set its writes are Immediate, as
// the in-process store's are.
type benchStore struct {
	mu    sync.Mutex
	revs  map[string]uint64
	rev   uint64
	ended chan string
	now   bool
}

func (s *benchStore) Write(_ context.Context, w Write) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.Create {
		if _, ok := s.revs[w.ID]; ok {
			return 0, ErrExists
		}
	} else if s.revs[w.ID] != w.Rev {
		return 0, ErrConflict
	}
	s.rev++
	if w.Record == nil {
		delete(s.revs, w.ID)
		s.ended <- w.ID
		return s.rev, nil
	}
	s.revs[w.ID] = s.rev
	return s.rev, nil
}

func (s *benchStore) Read(context.Context, string) (*Proposal, error)  { return nil, nil }
func (s *benchStore) Owned(context.Context) ([]Proposal, error)        { return nil, nil }
func (s *benchStore) Immediate(e Effect) bool                          { _, ok := e.(Write); return ok && s.now }
func (benchWire) SendReject(context.Context, SendReject) error         { return nil }
func (benchWire) SendRelay(context.Context, SendRelay) error           { return nil }
func (benchWire) SendCancel(context.Context, SendCancel)               {}
func (benchWire) Status(context.Context, Status)                       {}
func (benchWire) CancelAsk(context.Context, CancelAsk)                 {}
func (benchWire) FollowTask(context.Context, FollowTask, func(Event))  {}
func (benchWire) CancelTask(context.Context, CancelTask)               {}
func (w benchWire) SendRequest(_ context.Context, r SendRequest) error { w <- r; return nil }

// benchWire hands each request to the tool owner's goroutine.
type benchWire chan SendRequest

// BenchmarkLoop runs whole proposals (read, claimed, decided, recorded,
// requested, answered, deleted) through the Loop with up to 64 at once:
// what the shell costs per proposal, beside the core's Step, over a store
// that waits (a worker carries its writes out) and one that does not
// (Immediate). It reports the goroutine hand-offs per proposal.
func BenchmarkLoop(b *testing.B) {
	for _, now := range []bool{false, true} {
		b.Run(fmt.Sprintf("immediate=%v", now), func(b *testing.B) {
			core := New(Config{Member: "m1", MaxPending: 1 << 20, MaxInflight: 1 << 20, PendingTTL: time.Hour, FulfillTimeout: time.Hour,
				RetryAfter: time.Second, Alone: true}, &counterIDs{})
			store := &benchStore{revs: map[string]uint64{}, ended: make(chan string, 64), now: now}
			wire := make(benchWire, 64)
			fulfil := policyFunc(func(d Decide) Decided {
				return Decided{ID: d.ID, Decision: Decision{Action: Fulfill, Target: "fs"}}
			})
			loop := NewLoop(core, clocktest.New(t0), store, wire, fulfil, nopJournal{}, time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- loop.Run(ctx) }()
			defer func() { cancel(); <-done }()
			// The tool owner answers every request.
			go func() {
				result := json.RawMessage(`{"content":[]}`)
				for {
					select {
					case r := <-wire:
						_ = loop.Post(ctx, Responded{RequestID: r.EnvelopeID, From: "fs", HasRPCID: true, RPCID: r.RPCID, Result: result})
					case <-ctx.Done():
						return
					}
				}
			}()
			window := make(chan struct{}, 64)
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for i := range b.N {
					window <- struct{}{}
					_ = loop.Post(ctx, Proposed{ID: fmt.Sprintf("p%d", i), From: "coder", Method: "tools/call", Tool: "write", Addressee: "fs"})
				}
			}()
			for range b.N {
				<-store.ended
				<-window
			}
			b.StopTimer()
			h, p := loop.Handoffs()
			b.ReportMetric(float64(h)/float64(p), "handoffs/proposal")
		})
	}
}
