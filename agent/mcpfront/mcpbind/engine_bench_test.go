package mcpbind

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/policies"
)

// instantFront is mcpfront.Effects with an upstream that answers at
// once: SendRequest hands the call to a goroutine of its own that reports
// the upstream's result (Engine.Responded), as the *Front does around its
// session's CallTool, and Answer hands the client's answer to the
// waiting call (the *Front's buffered channel to the held handler).
// Everything else is what an allowed call never needs.
type instantFront struct {
	ctx     context.Context
	b       *Binding
	answers chan mcpfront.Answer
	sent    atomic.Int64
}

var instantResult = json.RawMessage(`{"content":[{"type":"text","text":"3"}]}`)

func (f *instantFront) SendRequest(_ context.Context, r mcpfront.Request) error {
	f.sent.Add(1)
	go func() {
		_ = f.b.Responded(f.ctx, mcpfront.Response{ProposalID: r.ProposalID, Result: instantResult})
	}()
	return nil
}

func (f *instantFront) Answer(_ context.Context, a mcpfront.Answer) error {
	f.answers <- a
	return nil
}

func (f *instantFront) SendCancel(context.Context, mcpfront.Cancel) {}
func (f *instantFront) Status(context.Context, mcpfront.Status)     {}
func (f *instantFront) SendPrompt(context.Context, mcpfront.Prompt) error {
	return mcpfront.ErrNoElicitation
}
func (f *instantFront) CancelPrompt(context.Context, mcpfront.CancelPrompt) {}
func (allowAll) Decide(context.Context, *policies.Input) decision.Decision {
	return decision.Decision{Action: decision.Fulfill}
}
func (f *instantFront) answer(ctx context.Context) (mcpfront.Answer, error) {
	return recvAnswer(ctx, f.answers)
}
func recvAnswer(ctx context.Context, c chan mcpfront.Answer) (mcpfront.Answer, error) {
	select {
	case a := <-c:
		return a, nil
	case <-ctx.Done():
		return mcpfront.Answer{}, ctx.Err()
	}
}

// allowAll is a policy that allows every call: the benchmark measures
// the engine, not a policy's evaluation.
type allowAll struct{}

// instantEngine is the real engine (fulfill.Engine: its core, Loop,
// policy step with its deciders, journal and in-process store, as
// `fulfiller mcp` runs it without a decision log) over a Binding, with a
// front end whose upstream answers at once (instantFront). call makes
// one allowed call and checks its answer.
type instantEngine struct {
	eng  *fulfill.Engine
	call func(i int) error
}

func newInstantEngine(tb testing.TB) *instantEngine {
	return newInstantEngineWith(tb, allowAll{})
}

// newInstantEngineWith is newInstantEngine deciding with decider.
func newInstantEngineWith(tb testing.TB, decider fulfill.Decider) *instantEngine {
	ctx, cancel := context.WithCancel(context.Background())
	bind := New(Options{})
	fx := &instantFront{ctx: ctx, b: bind, answers: make(chan mcpfront.Answer, 1)}
	eng := fulfill.NewEngine(bind, decider, fulfill.Config{MaxPending: 100, MaxInflight: 10,
		PendingTTL: time.Minute, FulfillTimeout: time.Minute})
	bind.Bind(eng, fx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	params := json.RawMessage(`{"name":"add","arguments":{"a":1,"b":2}}`)
	call := func(i int) error {
		id := fmt.Sprintf("call-%d", i)
		p := mcpfront.Proposal{ID: id, RPCID: json.RawMessage(fmt.Sprint(i)), FrontEnd: mcpfront.FrontEnd, Server: "calc",
			Proposer: "bench", Client: mcpfront.ClientInfo{Name: "bench"}, Method: "tools/call", Params: params,
			Tool: mcpfront.Tool{Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`), Server: "calc", Listed: true}, Received: time.Now()}
		if err := bind.Propose(ctx, p); err != nil {
			return err
		}
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		defer acancel()
		a, err := fx.answer(actx)
		if err != nil {
			return fmt.Errorf("call %s: no answer: %w", id, err)
		}
		if a.ProposalID != id || a.Reject != nil || string(a.Result) != string(instantResult) {
			return fmt.Errorf("call %s answered %+v, want the upstream's result", id, a)
		}
		return nil
	}
	return &instantEngine{eng: eng, call: call}
}

// An allowed MCP call through the engine is four goroutine hand-offs:
// the proposal to the Loop, the policy's trip to a decider and its
// Decided back, and the upstream's response matched on the Loop. The
// request to the upstream and the client's answer are made on the
// Loop's goroutine (the wire's Immediate): each on a worker cost a
// hand-off there and one back, on the call's round trip.
func TestEngineAllowedCallHandoffs(t *testing.T) {
	e := newInstantEngine(t)
	// The engine's start posts and asks the Loop its own (the records
	// read back, Resumed, among them): a first call waits for them.
	if err := e.call(-1); err != nil {
		t.Fatal(err)
	}
	const n = 20
	h0, p0 := e.eng.Handoffs()
	for i := range n {
		if err := e.call(i); err != nil {
			t.Fatal(err)
		}
	}
	h, p := e.eng.Handoffs()
	if p-p0 != n {
		t.Fatalf("the engine read %d proposals, want %d", p-p0, n)
	}
	// The answer comes from the Match, the last hand-off of each call.
	// The start's Resumed may come as late as the first calls: one more.
	if got := h - h0; got != 4*n && got != 4*n+1 {
		t.Fatalf("%d goroutine hand-offs for %d allowed calls, want 4 each", got, n)
	}
}

// BenchmarkEngineMCPCall is one allowed MCP tools/call at a time through
// the real engine (instantEngine): Propose, the decision, the request
// sent, the upstream's response matched and the client's answer. ns/op
// is the engine's part of a call's round trip (its goroutine wake-ups
// included: the calls are sequential, so each hand-off finds its
// goroutine parked); it reports the goroutine hand-offs per call
// (fulfill.Engine.Handoffs) and the process's CPU per call.
func BenchmarkEngineMCPCall(b *testing.B) {
	benchEngineMCPCall(b, newInstantEngine(b))
}

// BenchmarkEngineMCPCallOPA is BenchmarkEngineMCPCall deciding with the
// real policy engine and the MCP bench's policy (benchPolicy), as
// `fulfiller bench --front-end mcp` does: the decision's own cost in it.
func BenchmarkEngineMCPCallOPA(b *testing.B) {
	benchEngineMCPCall(b, newInstantEngineWith(b, loadBenchPolicy(b)))
}

// benchPolicy is internal/loadtest.MCPDefaultPolicy (which imports this
// package, so it cannot be imported here): TestBenchPolicyIsTheBenchs
// keeps the two the same.
const benchPolicy = `package fulfiller

import rego.v1

default decision := {"action": "reject", "reason": "policy", "message": "only the bench's calc add is allowed"}

decision := {"action": "fulfill"} if {
	input.tool.server == "calc"
	input.tool.name == "add"
}
`

// loadBenchPolicy loads benchPolicy into a policy engine.
func loadBenchPolicy(tb testing.TB) *policies.Engine {
	path := filepath.Join(tb.TempDir(), "bench.rego")
	if err := os.WriteFile(path, []byte(benchPolicy), 0o600); err != nil {
		tb.Fatal(err)
	}
	pe, err := policies.Load(context.Background(), policies.Options{Policies: []string{path}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return pe
}

func benchEngineMCPCall(b *testing.B, e *instantEngine) {
	// The first calls grow the goroutines' stacks and the engine's maps.
	for i := range 100 {
		if err := e.call(-1 - i); err != nil {
			b.Fatal(err)
		}
	}
	h0, p0 := e.eng.Handoffs()
	cpu0 := processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := e.call(i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	h, p := e.eng.Handoffs()
	if p-p0 != int64(b.N) {
		b.Fatalf("the engine read %d proposals, want %d", p-p0, b.N)
	}
	b.ReportMetric(float64(h-h0)/float64(b.N), "handoffs/call")
	// The CPU the process spent a call (the benchmark's own goroutine
	// included): on a loaded machine a steadier figure than the wall
	// clock's, which includes waiting for a core.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/call")
}

// processCPU is the CPU time (user and system) the process has spent.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
