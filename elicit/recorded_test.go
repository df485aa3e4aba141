package elicit

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// An operator's cancel on another member withdraws the prompts the owner
// recorded: each prompt still open gets exactly one
// notifications/cancelled naming its recorded envelope and JSON-RPC ids;
// a prompt whose approver approved, and one handed on to a delegate, get
// none; nothing is asked (no elicitation/create goes out).
func TestCancelRecordedWithdrawsOnlyOpenPrompts(t *testing.T) {
	conn := &fakeConn{roster: []string{"alice", "bob", "carol", "dave"}}
	var mu sync.Mutex
	var evs []Event
	e := New(conn, Config{Observer: func(ev Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }})
	defer e.Close()
	now := time.Now().UTC()
	esc := fulfill.Escalation{
		Proposal:   agent.Envelope{ID: "p1", From: "coder"},
		DecisionID: "d-1",
		Prompts: []state.Prompt{
			{Approver: "alice", EnvelopeID: "el-alice", RPCID: 11, Sent: now},
			{Approver: "bob", EnvelopeID: "el-bob", RPCID: 12, Sent: now},
			{Approver: "dave", EnvelopeID: "el-dave", RPCID: 13, Sent: now},
			{Approver: "carol", EnvelopeID: "el-carol", RPCID: 14, Chain: []string{"dave"}, Sent: now},
		},
		Approvals: []state.Approval{{Approver: "bob", Content: json.RawMessage(`{"approve":true}`), At: now}},
	}
	esc.Decision.Revision = "rev-1"
	e.CancelRecorded(esc, "cancelled")

	conn.mu.Lock()
	sent := slices.Clone(conn.sent)
	conn.mu.Unlock()
	want := map[string]string{
		"alice": `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":11,"reason":"cancelled"}}`,
		"carol": `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":14,"reason":"cancelled"}}`,
	}
	if len(sent) != len(want) {
		t.Fatalf("sent %d envelopes, want %d: %v", len(sent), len(want), conn.payloads())
	}
	for _, env := range sent {
		who := env.To[0]
		if len(env.To) != 1 || env.Kind != agent.KindRequest || string(env.Payload) != want[who] ||
			!slices.Equal(env.CorrelationID, agent.CorrelationIDs{"el-" + who}) {
			t.Errorf("sent to %v: %s %s correlation %v; want %s correlated to el-%s", env.To, env.Kind, env.Payload, env.CorrelationID, want[who], who)
		}
		delete(want, who)
	}
	if len(want) != 0 {
		t.Errorf("no cancellation for %v", want)
	}
	mu.Lock()
	defer mu.Unlock()
	var cancelled []string
	for _, ev := range evs {
		if ev.Kind == EventCancelled && ev.ProposalID == "p1" && ev.DecisionID == "d-1" && ev.Revision == "rev-1" && ev.Reason == "cancelled" {
			cancelled = append(cancelled, ev.Approver+"/"+ev.RequestID)
		}
	}
	slices.Sort(cancelled)
	if !slices.Equal(cancelled, []string{"alice/el-alice", "carol/el-carol"}) {
		t.Errorf("cancelled events = %v (all %+v)", cancelled, evs)
	}
	if e.Open() != 0 {
		t.Errorf("%d escalations open after withdrawing recorded prompts, want 0", e.Open())
	}
}
