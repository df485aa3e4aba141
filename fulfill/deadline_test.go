package fulfill

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
)

// heldEscalator keeps every escalation open until the test ends it.
type heldEscalator struct {
	mu   sync.Mutex
	done map[string]func(Verdict)
}

func (e *heldEscalator) Escalate(_ context.Context, esc Escalation, done func(Verdict)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done[esc.Proposal.ID] = done
}

func (e *heldEscalator) Cancel(string, string) {}

func (e *heldEscalator) verdict(id string) func(Verdict) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done[id]
}

// TestPendingTTLNeverEndsAPrompt: an open prompt is ended by its
// escalation alone, even once its deadline has passed and the pending
// TTL has run out around it again and again: one timer ends a prompt,
// and the proposer is told what the escalation says, not "not decided
// within" the TTL.
func TestPendingTTLNeverEndsAPrompt(t *testing.T) {
	esc := &heldEscalator{done: map[string]func(Verdict){}}
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: 40 * time.Millisecond}}}
	h := newHarness(t, Config{PendingTTL: 20 * time.Millisecond, Escalator: esc}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return esc.verdict("p1") != nil })
	p, ok := h.f.store.get("p1")
	if !ok {
		t.Fatal("the escalated proposal is not pending")
	}
	deadline := p.deadline
	// The TTL ran out after the deadline had passed, and the proposal
	// was kept.
	waitFor(t, func() bool { return p.cachedAt.Load() > deadline.Add(20*time.Millisecond).UnixNano() })
	if s := p.State(); s != StateAwaitingApproval {
		t.Fatalf("state %s after the TTL, want awaiting_approval", s)
	}
	h.space.quiet(t, 10*time.Millisecond)

	esc.verdict("p1")(Verdict{Reason: "timeout", Message: "no approval by the deadline"})
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"coder"}, []string{rej.ID}, `{"text":"no approval by the deadline","format":"plain"}`)
}
