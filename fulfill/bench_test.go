package fulfill

import (
	"context"
	"fmt"
	"testing"

	"github.com/mewkit/fulfiller/agent"
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

	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
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
	}
}
