package fulfill

import (
	"encoding/json"
	"testing"

	"github.com/mewkit/fulfiller/agent"
)

// Participants that can end any proposal without being a known fulfiller
// are reported at start and when they join; a known fellow fulfiller and
// a tool server whose mcp/request covers only notifications are not.
func TestVetoHoldersReported(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	space.roster["alice"] = agent.Participant{ID: "alice", Capabilities: []agent.Capability{{Kind: "mcp/response"}, {Kind: "mcp/reject"}}}
	space.roster["fs"] = agent.Participant{ID: "fs", Capabilities: []agent.Capability{{Kind: "mcp/response"}, {Kind: "mcp/request", Payload: map[string]any{"method": "notifications/*"}}}}
	space.roster["peer"] = agent.Participant{ID: "peer", Capabilities: []agent.Capability{{Kind: "mcp/*"}}}
	h := newHarnessOn(t, space, Config{PeerFulfillers: []string{"peer"}, Approvers: []string{"alice"}}, &fakeDecider{})
	// other-ful (mcp/*) is in the fake's roster and not a known peer.
	waitFor(t, func() bool { return len(h.eventsAt(StageVetoHolder)) == 2 })
	got := map[string]string{}
	for _, e := range h.eventsAt(StageVetoHolder) {
		got[e.Target] = e.Reason + ": " + e.Message
	}
	if got["alice"] != "approver: holds mcp/reject" || got["other-ful"] != "outsider: holds mcp/reject, mcp/request tools/call" {
		t.Errorf("at start: %v", got)
	}
	// One that joins later, holding only a narrowed mcp/reject.
	space.mu.Lock()
	space.roster["mallory"] = agent.Participant{ID: "mallory", Capabilities: []agent.Capability{{Kind: "mcp/reject", Payload: map[string]any{"reason": "busy"}}}}
	space.mu.Unlock()
	h.deliver(agent.Envelope{ID: "pj", From: agent.GatewayID, Kind: agent.KindPresence,
		Payload: json.RawMessage(`{"event":"join","participant":{"id":"mallory","capabilities":[{"kind":"mcp/reject","payload":{"reason":"busy"}}]}}`)})
	waitFor(t, func() bool { return len(h.eventsAt(StageVetoHolder)) == 3 })
	if e := h.eventsAt(StageVetoHolder)[2]; e.Target != "mallory" || e.Reason != RoleOutsider {
		t.Errorf("after the join: %+v", e)
	}
}

// A proposal ended by someone else's reject is superseded, and the event
// says whether that someone is a known fulfiller.
func TestSupersededRecordsWhetherByAKnownFulfiller(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	defer close(dec.gate)
	h := newHarness(t, Config{PeerFulfillers: []string{"other-ful"}}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	h.deliver(proposalEnv("p2", "coder", addCall))
	waitFor(t, func() bool { return len(h.f.Pending()) == 2 })
	h.deliver(agent.Envelope{ID: "r1", From: "other-ful", Kind: agent.KindReject, CorrelationID: agent.CorrelationIDs{"p1"}, Payload: json.RawMessage(`{"reason":"busy"}`)})
	h.deliver(agent.Envelope{ID: "r2", From: "coder", Kind: agent.KindReject, CorrelationID: agent.CorrelationIDs{"p2"}, Payload: json.RawMessage(`{"reason":"disagree"}`)})
	waitFor(t, func() bool { return len(h.eventsAt(StageSuperseded)) == 2 })
	for _, e := range h.eventsAt(StageSuperseded) {
		want := e.ProposalID == "p1"
		if e.KnownFulfiller != want || len(e.By) != 1 {
			t.Errorf("%s superseded by %v: known fulfiller %v, want %v", e.ProposalID, e.By, e.KnownFulfiller, want)
		}
	}
}

// A tool server's notification correlated to a proposal (progress, say)
// is not its fulfilment.
func TestNotificationDoesNotSupersede(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return len(h.f.Pending()) == 1 })
	h.deliver(agent.Envelope{ID: "n1", From: "calculator", Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{"p1"},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`)})
	close(dec.gate)
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"p1"}, "")
}
