package fulfill

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/internal/clocktest"
	"github.com/mewkit/fulfiller/internal/poll"
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
	clock := clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: 2 * time.Minute}}}
	h := newHarness(t, Config{PendingTTL: time.Minute, Escalator: esc, Clock: clock}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return esc.verdict("p1") != nil })
	// The TTL runs out again and again, past the deadline (2m), and the
	// proposal is kept: its TTL is armed afresh each time.
	for range 5 {
		if !clock.WaitArmed(1, poll.Limit) {
			t.Fatal("no pending TTL armed")
		}
		clock.Advance(time.Minute)
	}
	if s, _ := h.f.Get("p1"); s.State != string(lifecycle.AwaitingApproval) {
		t.Fatalf("state %s after five TTLs, want awaiting_approval", s.State)
	}
	h.space.quiet(t, 10*time.Millisecond)

	esc.verdict("p1")(Verdict{Reason: "timeout", Message: "no approval by the deadline"})
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"coder"}, []string{rej.ID}, `{"text":"no approval by the deadline","format":"plain"}`)
}

// The pending TTL ends a proposal still deciding at once, on the clock:
// nothing before it, "timeout" at it. One approved but then queued for a
// slot times out at its next TTL.
func TestPendingTTLOnTheClock(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	defer close(dec.gate)
	h := newHarness(t, Config{PendingTTL: time.Minute, Clock: clock}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	if !clock.WaitArmed(1, poll.Limit) {
		t.Fatal("no pending TTL armed")
	}
	clock.Advance(time.Minute - time.Nanosecond)
	h.space.quiet(t, 20*time.Millisecond)
	clock.Advance(time.Nanosecond)
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"coder"}, []string{rej.ID}, `{"text":"not decided within 1m0s","format":"plain"}`)
	if n := clock.Armed(); n != 0 {
		t.Errorf("%d timers left armed after the proposal ended, want 0", n)
	}
}
