package lifecycle

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// benchShell carries out a Core's effects at once, in order, as an
// in-process store and wire would, so that a benchmark measures the
// core's own work per proposal (Step, its records, its lines and
// effects) and nothing of a shell's goroutines.
type benchShell struct {
	c      *Core
	now    time.Time
	queue  []Event
	rev    uint64
	lines  int
	kinds  map[string]string // proposal → its kind in the mix
	result json.RawMessage
}

// carry turns effs into the events that report them, queued.
func (b *benchShell) carry(effs []Effect) {
	for _, e := range effs {
		switch e := e.(type) {
		case Write:
			b.rev++
			b.queue = append(b.queue, Stored{ID: e.ID, Seq: e.Seq, Rev: b.rev})
		case Decide:
			d := Decision{Action: Fulfill, Target: "fs", Revision: "sha256:eeec4901561fb4d9"}
			if b.kinds[e.ID] == "reject" {
				d = Decision{Action: Reject, Reason: "policy", Message: "write_file is not allowed for coder", Revision: d.Revision}
			}
			b.queue = append(b.queue, Decided{ID: e.ID, Decision: d})
		case SendReject:
			b.queue = append(b.queue, Sent{ID: e.ID, EnvelopeID: e.EnvelopeID})
		case SendRequest:
			b.queue = append(b.queue, Sent{ID: e.ID, EnvelopeID: e.EnvelopeID},
				Responded{RequestID: e.EnvelopeID, From: e.To, HasRPCID: true, RPCID: e.RPCID, Result: b.result, Payload: b.result})
		case ReserveIDs:
			ids := make([]int64, e.N)
			for i := range ids {
				ids[i] = int64(1000 + int(b.rev) + i)
			}
			b.queue = append(b.queue, IDsReserved{IDs: ids})
		case Log:
			b.lines++
		}
	}
}

// BenchmarkCoreProposal measures the core's own work per proposal: the
// bench's default mix (60% fulfilled, 30% rejected by the policy, 10%
// invalid), 32 in flight as fulfiller bench keeps them, each stepped
// from its frame to its record's delete with every effect reported back
// at once (benchShell), configured as `fulfiller bench --state none`
// configures it (alone on its store, JSON-RPC ids reserved ahead, status
// chats on). What it reports per op is one proposal's Steps: the CPU and
// the allocations the core adds to the decision, whatever the shell.
func BenchmarkCoreProposal(b *testing.B) {
	c := New(Config{Member: "fulfiller", MaxPending: 1000, MaxInflight: 64, PendingTTL: 30 * time.Second,
		FulfillTimeout: 30 * time.Second, ApprovalTimeout: 5 * time.Minute, RetryAfter: time.Second,
		StatusChats: true, Alone: true, ReserveIDs: 256}, &counterIDs{})
	sh := &benchShell{c: c, now: t0, kinds: map[string]string{}, result: json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`)}
	sh.carry(c.Step(t0, IDsReserved{}))
	const window = 32
	mix := [10]string{"fulfil", "reject", "fulfil", "invalid", "fulfil", "reject", "fulfil", "fulfil", "reject", "fulfil"}
	envelope := json.RawMessage(`{"protocol":"mew/v0.4","id":"p","ts":"2026-11-22T10:00:00Z","from":"coder","kind":"mcp/proposal","payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/app/config.yaml"}}}}`)
	params := json.RawMessage(`{"name":"read_file","arguments":{"path":"/srv/app/config.yaml"}}`)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("p-%d", i)
	}
	sent := 0
	propose := func() {
		id := ids[sent]
		kind := mix[sent%len(mix)]
		sent++
		sh.kinds[id] = kind
		ev := Proposed{ID: id, From: "coder", FrontEnd: "mew", Method: "tools/call", Tool: "read_file",
			Envelope: envelope, Params: params, Size: len(envelope)}
		if kind == "invalid" {
			ev.Method, ev.Tool, ev.Params, ev.Invalid = "", "", nil, "payload: no method"
		}
		sh.carry(c.Step(sh.now, ev))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for sent < b.N || len(sh.queue) > 0 {
		for sent < b.N && c.Pending() < window {
			propose()
		}
		if len(sh.queue) == 0 {
			continue
		}
		ev := sh.queue[0]
		sh.queue = sh.queue[1:]
		sh.carry(c.Step(sh.now, ev))
	}
	b.StopTimer()
	if c.Pending() != 0 {
		b.Fatalf("%d proposals still pending after the run", c.Pending())
	}
	b.ReportMetric(float64(sh.lines)/float64(b.N), "lines/op")
}
