package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/clocktest"
)

// deciderPolicy fulfils every call and says it evaluates n decisions at
// once (Evaluators), as the fulfiller's policy step does: the Loop asks
// it on its own deciders.
type deciderPolicy int

func (p deciderPolicy) Evaluators() int { return int(p) }
func (deciderPolicy) Decide(_ context.Context, d Decide) Decided {
	return Decided{ID: d.ID, Decision: Decision{Action: Fulfill, Target: "fs"}}
}

// seenJournal is a Journal whose lines are only observed (Immediate),
// as the fulfiller's with no decision log.
type seenJournal struct{ nopJournal }

func (seenJournal) Immediate(e Effect) bool { _, ok := e.(Log); return ok }

// goroutineRuns estimates how many times goroutines were put to run
// after waiting (woken by a channel, a lock or a timer, or after a
// syscall): the runtime's scheduling latencies are sampled in one of
// every 8 transitions of each goroutine (runtime's gTrackingPeriod), so
// their count times 8. This is the wake-ups' count, which no load on the
// machine moves, where their cost in time is lost in the noise.
func goroutineRuns() float64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return 8 * float64(n)
}

// BenchmarkLoopWakeups is BenchmarkLoop as the fulfiller runs it with no
// store (--state none) and no decision log: the store's writes and
// the lines Immediate, the policy asked on
// two deciders (Evaluators). Beside the goroutine hand-offs it reports
// the goroutine runs per proposal (goroutineRuns), those of the
// benchmark's own proposer and tool owner included: what a hand-off
// costs in wake-ups.
func BenchmarkLoopWakeups(b *testing.B) {
	core := New(Config{Member: "m1", MaxPending: 1 << 20, MaxInflight: 1 << 20, PendingTTL: time.Hour, FulfillTimeout: time.Hour,
		RetryAfter: time.Second, Alone: true}, &counterIDs{})
	store := &benchStore{revs: map[string]uint64{}, ended: make(chan string, 64), now: true}
	wire := make(benchWire, 64)
	loop := NewLoop(core, clocktest.New(t0), store, wire, deciderPolicy(2), seenJournal{}, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() { cancel(); <-done }()
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
	h0, p0 := loop.Handoffs()
	runs0 := goroutineRuns()
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
	runs := goroutineRuns() - runs0
	h, p := loop.Handoffs()
	b.ReportMetric(float64(h-h0)/float64(p-p0), "handoffs/proposal")
	b.ReportMetric(runs/float64(b.N), "runs/proposal")
}
