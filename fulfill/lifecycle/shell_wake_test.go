package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/clocktest"
)

// gatedPolicy evaluates one decision at once (Evaluators) and reports
// each proposal it is asked about on asked, then waits for proceed (or
// the Loop's end).
type gatedPolicy struct {
	asked   chan string
	proceed chan struct{}
}

func (p *gatedPolicy) Evaluators() int { return 1 }
func (p *gatedPolicy) Decide(ctx context.Context, d Decide) Decided {
	p.asked <- d.ID
	select {
	case <-p.proceed:
	case <-ctx.Done(): // the test failed: the Loop stops
	}
	return Decided{ID: d.ID, Decision: Decision{Action: Fulfill, Target: "fs"}}
}

// A decider hands its Decided to Run without waiting for Run to take
// it (Loop.result): while Run is busy, the one decider goes on to the
// next proposal's evaluation, rather than parking until Run is free and
// being woken again. Both proposals are then fulfilled, their Decided
// applied once Run is free.
func TestLoopDeciderDoesNotWaitForRun(t *testing.T) {
	core := New(Config{Member: "m1", MaxPending: 100, MaxInflight: 100, PendingTTL: time.Hour, FulfillTimeout: time.Hour,
		RetryAfter: time.Second, Alone: true}, &counterIDs{})
	store := &benchStore{revs: map[string]uint64{}, ended: make(chan string, 16), now: true}
	wire := make(benchWire, 16)
	policy := &gatedPolicy{asked: make(chan string, 16), proceed: make(chan struct{})}
	loop := NewLoop(core, clocktest.New(t0), store, wire, policy, seenJournal{}, time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for _, id := range []string{"p1", "p2"} {
		if err := loop.Post(ctx, Proposed{ID: id, From: "coder", Method: "tools/call", Tool: "write", Addressee: "fs"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := <-policy.asked; got != "p1" {
		t.Fatalf("the decider was asked about %s first, want p1", got)
	}
	// Hold Run: the Match is taken after both proposals' steps, so p2's
	// Decide waits for the decider.
	inRun, free := make(chan struct{}), make(chan struct{})
	if err := loop.Match(ctx, func(*Core) []Event { close(inRun); <-free; return nil }); err != nil {
		t.Fatal(err)
	}
	<-inRun
	policy.proceed <- struct{}{} // p1 decided while Run is held
	select {
	case got := <-policy.asked:
		if got != "p2" {
			t.Fatalf("the decider was asked about %s second, want p2", got)
		}
	case <-time.After(10 * time.Second):
		close(free)
		t.Fatal("the decider was not asked about p2 while Run was busy: it waited for Run to take p1's Decided")
	}
	close(free)
	policy.proceed <- struct{}{}

	for range 2 {
		select {
		case r := <-wire:
			if err := loop.Post(ctx, Responded{RequestID: r.EnvelopeID, From: "fs", HasRPCID: true, RPCID: r.RPCID, Result: json.RawMessage(`{}`)}); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a decided proposal's request was not sent")
		}
	}
	got := map[string]bool{}
	for range 2 {
		got[<-store.ended] = true
	}
	if !got["p1"] || !got["p2"] {
		t.Fatalf("records deleted %v, want p1 and p2 fulfilled", got)
	}
}

// immediateWire is benchWire whose sends are Immediate (as the MCP front
// end's are: they hand the message to a goroutine of their own), and
// which notes whether each request was sent on the Loop's goroutine.
type immediateWire struct {
	benchWire
	onLoop chan bool
	loop   *Loop
}

func (w immediateWire) Immediate(e Effect) bool {
	_, ok := e.(SendRequest)
	return ok
}

func (w immediateWire) SendRequest(ctx context.Context, r SendRequest) error {
	// Run cannot take a Match while it carries the send out itself.
	mctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	w.onLoop <- w.loop.Match(mctx, func(*Core) []Event { return nil }) != nil
	return w.benchWire.SendRequest(ctx, r)
}

// A Wire's Immediate sends are carried out on the Loop's goroutine,
// their Sent applied at once: an allowed call is then four hand-offs
// (posted, the decider's trip and its Decided, the response posted),
// not six (the request's trip to a worker and its Sent back). A Wire
// without Immediate keeps its sends on workers.
func TestLoopImmediateWireSendsOnItsGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		now      bool
		handoffs int64
	}{{"immediate", true, 4}, {"worker", false, 6}} {
		t.Run(tc.name, func(t *testing.T) {
			core := New(Config{Member: "m1", MaxPending: 100, MaxInflight: 100, PendingTTL: time.Hour, FulfillTimeout: time.Hour,
				RetryAfter: time.Second, Alone: true}, &counterIDs{})
			store := &benchStore{revs: map[string]uint64{}, ended: make(chan string, 16), now: true}
			bw := make(benchWire, 16)
			var w Wire = bw
			var nw *immediateWire
			if tc.now {
				nw = &immediateWire{benchWire: bw, onLoop: make(chan bool, 16)}
				w = nw
			}
			loop := NewLoop(core, clocktest.New(t0), store, w, deciderPolicy(1), seenJournal{}, time.Second)
			if nw != nil {
				nw.loop = loop
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- loop.Run(ctx) }()
			defer func() { cancel(); <-done }()

			const n = 3
			for i := range n {
				if err := loop.Post(ctx, Proposed{ID: fmt.Sprintf("p%d", i), From: "coder", Method: "tools/call", Tool: "write", Addressee: "fs"}); err != nil {
					t.Fatal(err)
				}
				r := <-bw
				if nw != nil && !<-nw.onLoop {
					t.Fatalf("request %s was sent on another goroutine than the Loop's", r.ID)
				}
				if err := loop.Post(ctx, Responded{RequestID: r.EnvelopeID, From: "fs", HasRPCID: true, RPCID: r.RPCID, Result: json.RawMessage(`{}`)}); err != nil {
					t.Fatal(err)
				}
				if got := <-store.ended; got != r.ID {
					t.Fatalf("record %s deleted, want %s's", got, r.ID)
				}
			}
			// Sent reaches Run after the response in the worker's case:
			// wait until every hand-off of the last proposal is counted,
			// and the one of the records read at start (Resumed).
			want := tc.handoffs*n + 1
			deadline := time.Now().Add(10 * time.Second)
			for {
				h, p := loop.Handoffs()
				if p != n {
					t.Fatalf("%d proposals read, want %d", p, n)
				}
				if h == want {
					break
				}
				if h > want || time.Now().After(deadline) {
					t.Fatalf("%d hand-offs for %d proposals, want %d each and one at start", h, n, tc.handoffs)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
