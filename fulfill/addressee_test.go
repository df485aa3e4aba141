package fulfill

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
)

// A proposal addressed to a participant that may send tools/call requests
// itself (it holds mcp/*, as a tool server's bridge may) while its
// tools/list is still being asked (it just joined, or we just rejoined)
// is not taken for another fulfiller's: it waits for the discovery, and
// is answered once its owner is known (issue 41, row 11; rule 2: exactly
// one answer). It used to be logged "ignored addressed_elsewhere" and
// never answered. One addressed to a participant whose tools/list turns
// out not to offer the tool is still left to it.
func TestProposalToAnOwnerBeingDiscoveredIsAnswered(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	dec := &fakeDecider{decisions: map[string]decision.Decision{
		"add":   {Action: decision.Fulfill},
		"write": {Action: decision.Fulfill},
	}}
	h := newHarnessOn(t, space, Config{DiscoveryWait: 5 * time.Second}, dec)

	for _, p := range []struct {
		id    string
		tools []ToolInfo
	}{{"fs", []ToolInfo{{Name: "write"}}}, {"ful2", nil}} {
		gate := make(chan struct{})
		space.mu.Lock()
		space.roster[p.id] = agent.Participant{ID: p.id, Capabilities: []agent.Capability{{Kind: "mcp/*"}}}
		space.tools[p.id] = p.tools
		if space.listGate == nil {
			space.listGate = map[string]chan struct{}{}
		}
		space.listGate[p.id] = gate
		space.mu.Unlock()
		h.deliver(agent.Envelope{ID: "join-" + p.id, From: "system:gateway", Kind: agent.KindPresence,
			Payload: json.RawMessage(`{"event":"join","participant":{"id":"` + p.id + `","capabilities":[{"kind":"mcp/*"}]}}`)})
		h.deliver(proposalEnv("p-"+p.id, "coder", `{"method":"tools/call","params":{"name":"write","arguments":{"path":"/tmp/x"}}}`, p.id))
		h.handled()
		if got := h.stages("p-" + p.id); slices.Contains(got, StageIgnored) {
			t.Fatalf("%s: proposal set aside while its addressee's tools/list was being asked: %v", p.id, got)
		}
		close(gate)
	}

	// fs offers the tool: the call goes to it, once.
	req := space.next(t)
	if req.Kind != agent.KindRequest || !slices.Equal(req.To, []string{"fs"}) || !slices.Equal(req.CorrelationID, agent.CorrelationIDs{"p-fs"}) {
		t.Fatalf("sent %s to %v correlated %v; want p-fs's tools/call to fs", req.Kind, req.To, req.CorrelationID)
	}
	// ful2 offers nothing: another fulfiller's proposal, left alone.
	waitFor(t, func() bool { return slices.Contains(h.stages("p-ful2"), StageIgnored) })
	if got := h.stages("p-ful2"); !slices.Equal(got, []Stage{StageIgnored}) {
		t.Fatalf("p-ful2 stages %v, want it ignored alone", got)
	}
	space.quiet(t, 100*time.Millisecond)

	// Withdrawn while it waits, by its proposer (a forged withdrawal from
	// someone else changes nothing): nothing is sent about it.
	for _, id := range []string{"fs2", "fs3"} {
		space.mu.Lock()
		space.roster[id] = agent.Participant{ID: id, Capabilities: []agent.Capability{{Kind: "mcp/*"}}}
		space.tools[id] = []ToolInfo{{Name: "write"}}
		space.listGate[id] = make(chan struct{})
		space.mu.Unlock()
		h.deliver(agent.Envelope{ID: "join-" + id, From: "system:gateway", Kind: agent.KindPresence,
			Payload: json.RawMessage(`{"event":"join","participant":{"id":"` + id + `","capabilities":[{"kind":"mcp/*"}]}}`)})
		h.deliver(proposalEnv("p-"+id, "coder", `{"method":"tools/call","params":{"name":"write","arguments":{"path":"/tmp/y"}}}`, id))
	}
	h.deliver(agent.Envelope{ID: "w-forged", From: "mallory", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"p-fs3"}, Payload: json.RawMessage(`{"reason":"x"}`)})
	h.deliver(agent.Envelope{ID: "w-1", From: "coder", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"p-fs2"}, Payload: json.RawMessage(`{"reason":"changed my mind"}`)})
	h.handled()
	space.mu.Lock()
	close(space.listGate["fs2"])
	close(space.listGate["fs3"])
	space.mu.Unlock()
	req = space.next(t)
	if !slices.Equal(req.To, []string{"fs3"}) || !slices.Equal(req.CorrelationID, agent.CorrelationIDs{"p-fs3"}) {
		t.Fatalf("sent %s to %v correlated %v; want p-fs3's tools/call to fs3 only", req.Kind, req.To, req.CorrelationID)
	}
	space.quiet(t, 200*time.Millisecond)
	if got := h.stages("p-fs2"); !slices.Equal(got, []Stage{StageIgnored}) {
		t.Fatalf("withdrawn p-fs2 stages %v, want one ignored line", got)
	}
}
