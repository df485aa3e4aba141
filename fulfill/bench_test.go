package fulfill

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// BenchmarkFrameInFrameOut measures the whole decision path without the
// network: a proposal frame is decoded, validated, decided by the example
// policies and answered, until the answer envelope is encoded for the wire.
// The proposal is a read-only call by a blocklisted proposer, so the answer
// is a reject (the fastest answer path that still runs the full policy).
func BenchmarkFrameInFrameOut(b *testing.B) {
	engine, err := policies.Load(context.Background(), policies.Options{
		Policies: []string{"../examples/policies"},
		Data:     []string{"../examples/policies/data.yaml"},
	})
	if err != nil {
		b.Fatal(err)
	}
	space := newFakeSpace()
	space.roster["mallory"] = agent.Participant{ID: "mallory", Capabilities: []agent.Capability{{Kind: "mcp/proposal"}}}
	f := New(space, engine, Config{SpaceID: "lab", MaxPending: 1 << 20})
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx, in) }()
	defer func() { cancel(); <-done }()

	// Per-op timings give the tail as well as the mean: p50-ns and
	// p99-ns are the median and 99th percentile of one frame's trip.
	perOp := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		frame := fmt.Appendf(nil, `{"protocol":"mew/v0.4","id":"p-%d","ts":"2026-11-22T10:00:00Z","from":"mallory","kind":"mcp/proposal","payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/app/config.yaml"}}}}`, i)
		env, err := agent.Decode(frame)
		if err != nil {
			b.Fatal(err)
		}
		in <- env
		rej := <-space.sent // the reject
		if _, err := agent.Encode(rej); err != nil {
			b.Fatal(err)
		}
		<-space.sent // its explanation
		perOp = append(perOp, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, perOp)
}

// reportPercentiles adds the median and the 99th percentile of per-op
// timings to the benchmark's output, for benchstat to compare.
func reportPercentiles(b *testing.B, perOp []time.Duration) {
	if len(perOp) == 0 {
		return
	}
	slices.Sort(perOp)
	at := func(q float64) float64 {
		i := min(len(perOp)-1, max(0, int(q*float64(len(perOp))+0.5)-1))
		return float64(perOp[i].Nanoseconds())
	}
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}

// BenchmarkBuildInput measures building the policy input of a proposal
// (proposer, space roster with capabilities, tool description from the
// catalog, agent counters), the step between decoding and Decide.
func BenchmarkBuildInput(b *testing.B) {
	space := newFakeSpace()
	f := New(space, nil, Config{SpaceID: "lab"})
	f.catalog.refresh(context.Background(), "calculator")
	f.catalog.wait()
	env, err := agent.Decode([]byte(`{"protocol":"mew/v0.4","id":"p-1","ts":"2026-11-22T10:00:00Z","from":"coder","kind":"mcp/proposal","payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}}`))
	if err != nil {
		b.Fatal(err)
	}
	c, err := parsePayload(env.Payload)
	if err != nil {
		b.Fatal(err)
	}
	p := &lifecycle.Proposal{ID: env.ID, From: env.From, Envelope: env.Raw, Params: c.params, Method: c.method, Tool: c.tool, Addressee: "calculator"}
	ctx := context.Background()
	if in := f.policy.policyInput(ctx, p, "calculator", c.params, nil, 0, 0); in.Tool == nil || in.Tool.Server != "calculator" || in.Proposer == nil || len(in.Space.Participants) != 3 {
		b.Fatalf("input is missing what the catalog and roster know: %+v", in)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = f.policy.policyInput(ctx, p, "calculator", c.params, nil, 0, 0)
	}
}
