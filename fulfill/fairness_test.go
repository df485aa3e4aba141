package fulfill

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
)

// One proposer's pending work is bounded (--max-pending-per-proposer): its
// next proposal is rejected busy, with a chat naming the limit, while
// another proposer's add is still fulfilled.
func TestPerProposerLimitRefusesOnlyTheHeavySender(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Fulfill}}}
	h := newHarness(t, Config{MaxPending: 8, MaxPendingPerProposer: 2, FulfillTimeout: time.Minute}, dec)
	h.space.mu.Lock()
	h.space.roster["heavy"] = agent.Participant{ID: "heavy", Capabilities: []agent.Capability{{Kind: "mcp/proposal"}}}
	h.space.mu.Unlock()
	// heavy's first two are fulfilled and stay in flight (no response).
	for _, id := range []string{"h1", "h2"} {
		h.deliver(proposalEnv(id, "heavy", addCall))
		wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{id}, "")
	}
	h.deliver(proposalEnv("h3", "heavy", addCall))
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"heavy"}, []string{"h3"}, `{"reason":"busy"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"heavy"}, []string{rej.ID},
		`{"text":"2 of your proposals are pending (the limit per proposer); propose again when one is answered","format":"plain"}`)
	// Everyone else is still served.
	h.deliver(proposalEnv("c1", "coder", addCall))
	req := h.space.next(t)
	wantEnvelope(t, req, agent.KindRequest, []string{"calculator"}, []string{"c1"},
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`, rpcID(t, req)))
	if n := dec.count(); n != 3 {
		t.Errorf("policy asked %d times, want 3 (the refused proposal never reaches it)", n)
	}
}

// Pending work is bounded in bytes (--max-pending-bytes): a big proposal
// that does not fit is rejected busy, with a chat naming the limit, while a
// small one from another proposer still fits and is fulfilled.
func TestPendingBytesLimitRefusesOnlyTheHeavySender(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Fulfill}}}
	h := newHarness(t, Config{MaxPendingBytes: 4096, FulfillTimeout: time.Minute}, dec)
	h.space.mu.Lock()
	h.space.roster["heavy"] = agent.Participant{ID: "heavy", Capabilities: []agent.Capability{{Kind: "mcp/proposal"}}}
	h.space.mu.Unlock()
	big := func(id string) agent.Envelope {
		env := proposalEnv(id, "heavy", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2,"pad":"`+strings.Repeat("x", 3000)+`"}}}`)
		env.Raw, _ = agent.Encode(env)
		return env
	}
	h.deliver(big("h1")) // fits: in flight
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"h1"}, "")
	h.deliver(big("h2")) // does not fit beside h1
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"heavy"}, []string{"h2"}, `{"reason":"busy"}`)
	chat := h.space.next(t)
	var text struct{ Text string }
	_ = json.Unmarshal(chat.Payload, &text)
	if !strings.HasPrefix(text.Text, "pending proposals hold ") || !strings.Contains(text.Text, " of 4096 bytes (the limit), too few for this ") {
		t.Errorf("chat %q", text.Text)
	}
	small := proposalEnv("c1", "coder", addCall)
	small.Raw, _ = agent.Encode(small)
	h.deliver(small)
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"c1"}, "")
}

// With the defaults, a quarter of --max-pending is one proposer's share.
func TestPerProposerLimitDefaultsToAQuarter(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxPending: 100}
	cfg.setDefaults()
	if cfg.MaxPendingPerProposer != 25 || cfg.MaxPendingBytes != 16<<20 || cfg.MaxInflightPerProposer != 16 {
		t.Errorf("defaults: per proposer %d, bytes %d, slots per proposer %d", cfg.MaxPendingPerProposer, cfg.MaxPendingBytes, cfg.MaxInflightPerProposer)
	}
	cfg = Config{MaxPending: 2}
	cfg.setDefaults()
	if cfg.MaxPendingPerProposer != 1 {
		t.Errorf("per proposer for max-pending 2: %d, want 1", cfg.MaxPendingPerProposer)
	}
}

// With the defaults, one proposer that fills its share of --max-pending
// cannot make another proposer's call come back busy (issue 13: one
// participant's 20 escalations made everyone else's add come back busy).
func TestOneProposerCannotCrowdOutOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxPending: 8, FulfillTimeout: time.Minute}, &fakeDecider{decisions: fulfilAdd})
	h.space.mu.Lock()
	h.space.roster["heavy"] = agent.Participant{ID: "heavy", Capabilities: []agent.Capability{{Kind: "mcp/proposal"}}}
	h.space.mu.Unlock()
	busy := 0
	for i := range 8 {
		id := fmt.Sprintf("h%d", i)
		h.deliver(proposalEnv(id, "heavy", addCall))
		// Fulfilled and left in flight (no response), or refused.
		env := h.space.next(t)
		if env.Kind == agent.KindReject {
			busy++
			h.space.next(t) // its chat
		}
	}
	if busy != 6 {
		t.Errorf("%d of heavy's 8 proposals refused, want 6 (its share is 8/4 = 2)", busy)
	}
	h.deliver(proposalEnv("c1", "coder", addCall))
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"c1"}, "")
}
