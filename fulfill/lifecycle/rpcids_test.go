package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/clocktest"
)

// With Config.ReserveIDs the core asks for JSON-RPC ids ahead and never
// waits for one in Step: a fulfilment due before any are reserved waits
// in the queue of the fulfilment slots and starts with the first id that
// comes; the reservation is topped up once half are used, one out at a
// time.
func TestRequestWaitsForReservedIDs(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.ReserveIDs = 4; cfg.MaxInflight = 4; cfg.StatusChats = true })
	fulfil := func(id string) Write {
		t.Helper()
		claim := only[Write](t, c.Step(t0, Proposed{ID: id, From: "coder"}))
		c.Step(t0, Stored{ID: id, Seq: claim.Seq, Rev: 1})
		return only[Write](t, c.Step(t0, Decided{ID: id, Decision: Decision{Action: Fulfill, Target: "fs"}}))
	}
	effs := c.Step(t0, Proposed{ID: "p1", From: "coder"})
	if r := only[ReserveIDs](t, effs); r.N != 4 {
		t.Fatalf("reserved %d ids, want 4", r.N)
	}
	c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 1})
	effs = c.Step(t0, Decided{ID: "p1", Decision: Decision{Action: Fulfill, Target: "fs"}})
	same(t, kinds(effs), []string{"write queued"})
	for _, e := range effs {
		if l, ok := e.(Log); ok && l.Line.Stage == "queued" {
			t.Fatal("a wait for ids logged as a wait for a slot")
		}
	}
	if effs := c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 2}); len(effs) != 0 {
		t.Fatalf("then %v, want nothing (no status chat: no slot is waited for)", kinds(effs))
	}

	effs = c.Step(t0, IDsReserved{IDs: []int64{101, 102, 103, 104}})
	same(t, kinds(effs), []string{"write fulfilling"})
	w := only[Write](t, effs)
	if r := w.Record.Request; r == nil || r.RPCID != 101 {
		t.Fatalf("committed %+v, want the request with id 101", r)
	}
	effs = c.Step(t0, Stored{ID: "p1", Seq: w.Seq, Rev: 3})
	if r := only[SendRequest](t, effs); r.RPCID != 101 {
		t.Fatalf("sent id %d, want 101", r.RPCID)
	}

	// p2 takes 102: two left, half of four, so more are asked for, once.
	if w := fulfil("p2"); w.Record.Request == nil || w.Record.Request.RPCID != 102 {
		t.Fatalf("p2 committed %+v, want id 102", w.Record.Request)
	}
	var asked int
	for _, id := range []string{"p3", "p4"} {
		effs := c.Step(t0, Proposed{ID: id, From: "coder"})
		for _, e := range effs {
			if _, ok := e.(ReserveIDs); ok {
				asked++
			}
		}
		c.Step(t0, Stored{ID: id, Seq: only[Write](t, effs).Seq, Rev: 1})
		c.Step(t0, Decided{ID: id, Decision: Decision{Action: Fulfill, Target: "fs"}})
	}
	if asked != 0 || !c.reserving {
		t.Fatalf("asked again %d times while a reservation is out (reserving %v), want one out, asked once", asked, c.reserving)
	}
	if got := c.props["p4"].p.Request; got == nil || got.RPCID != 104 {
		t.Fatalf("p4 committed %+v, want id 104", got)
	}
}

// A fulfilment queued for want of ids is still the proposal's own to
// end: its deadline rejects it "timeout", and the ids that come later
// start nothing for it.
func TestWaitingForIDsEndsAtTheDeadline(t *testing.T) {
	c := testCore(func(cfg *Config) { cfg.ReserveIDs = 4 })
	effs := c.Step(t0, Proposed{ID: "p1", From: "coder"})
	c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 1})
	effs = c.Step(t0, Decided{ID: "p1", Decision: Decision{Action: Fulfill, Target: "fs"}})
	c.Step(t0, Stored{ID: "p1", Seq: only[Write](t, effs).Seq, Rev: 2})
	deadline := t0.Add(time.Minute)
	effs = c.Step(deadline, Fired{ID: "p1", At: deadline, Kind: TimerDeadline})
	w := only[Write](t, effs)
	if w.Record.Reject == nil || w.Record.Reject.Reason != "timeout" {
		t.Fatalf("recorded %+v, want the reject timeout", w.Record.Reject)
	}
	same(t, kinds(c.Step(deadline, IDsReserved{IDs: []int64{1, 2, 3, 4}})), nil)
}

// reservingWire is a chanWire that reserves ids from a counter, the
// first reservation failing once, and reports each request's id.
type reservingWire struct {
	*chanWire
	mu     sync.Mutex
	next   int64
	tries  atomic.Int32
	failed bool
}

func (w *reservingWire) ReserveIDs(_ context.Context, n int) ([]int64, error) {
	w.tries.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.failed {
		w.failed = true
		return nil, errors.New("store unavailable")
	}
	var ids []int64
	for range n {
		w.next++
		ids = append(ids, w.next)
	}
	return ids, nil
}

func (w *reservingWire) SendRequest(_ context.Context, r SendRequest) error {
	w.sent <- fmt.Sprintf("request %d", r.RPCID)
	return nil
}

// Through the Loop: the ids are reserved on a worker (a failed
// reservation tried again), every request goes out with an id from them,
// each once, and the core asked for more before it ran out.
func TestLoopReservesIDsAhead(t *testing.T) {
	core := New(Config{Member: "m1", MaxPending: 10, MaxInflight: 10, PendingTTL: time.Minute, FulfillTimeout: 30 * time.Second,
		RetryAfter: time.Millisecond, ReserveIDs: 4}, &counterIDs{})
	wire := &reservingWire{chanWire: &chanWire{sent: make(chan string, 16)}, next: 1000}
	loop := NewLoop(core, clocktest.New(t0), newMemStore("m1"), wire,
		policyFunc(func(x Decide) Decided { return Decided{ID: x.ID, Decision: Decision{Action: Fulfill, Target: "fs"}} }), nopJournal{}, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() { cancel(); <-done }()
	seen := map[string]bool{}
	for i := range 6 {
		if err := loop.Post(ctx, Proposed{ID: fmt.Sprintf("p%d", i), From: "coder"}); err != nil {
			t.Fatal(err)
		}
		got := next(t, wire.sent)
		if seen[got] {
			t.Fatalf("%q sent twice", got)
		}
		seen[got] = true
	}
	for want := int64(1001); want <= 1006; want++ {
		if !seen[fmt.Sprintf("request %d", want)] {
			t.Fatalf("sent %v, want requests 1001 to 1006", seen)
		}
	}
	if n := wire.tries.Load(); n < 3 {
		t.Fatalf("%d reservations tried, want the failed one, its retry and a top-up", n)
	}
}
