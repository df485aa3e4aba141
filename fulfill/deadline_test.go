package fulfill

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/internal/clocktest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// heldEscalator keeps every escalation open until the test ends it.
type heldEscalator struct {
	mu        sync.Mutex
	done      map[string]func(Verdict)
	cancelled []string // id:reason of each Cancel
}

func (e *heldEscalator) Escalate(_ context.Context, esc Escalation, done func(Verdict)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done[esc.Proposal.ID] = done
}

func (e *heldEscalator) Cancel(id, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancelled = append(e.cancelled, id+":"+reason)
}

func (e *heldEscalator) cancels() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.cancelled)
}

func (e *heldEscalator) verdict(id string) func(Verdict) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done[id]
}

// TestPendingTTLNeverEndsAPrompt: an open prompt is ended by its
// escalation alone (one timer ends a prompt, the Escalator's, at the
// decision's timeout), and the pending TTL, shorter, never cuts it short
// (DESIGN rule 8): nothing happens when the TTL or even the deadline
// passes on the core's clock, and the proposer is told what the
// escalation says.
func TestPendingTTLNeverEndsAPrompt(t *testing.T) {
	esc := &heldEscalator{done: map[string]func(Verdict){}}
	start := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	clock := clocktest.New(start)
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: 2 * time.Minute}}}
	h := newHarness(t, Config{PendingTTL: time.Minute, Escalator: esc, Clock: clock}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return esc.verdict("p1") != nil })
	if !clock.WaitArmed(1, poll.Limit) {
		t.Fatal("no deadline armed")
	}
	clock.Advance(3 * time.Minute) // the TTL's length, and the deadline, pass
	h.space.quiet(t, 20*time.Millisecond)
	if s, _ := h.f.Get("p1"); s.State != string(lifecycle.AwaitingApproval) || !s.Deadline.Equal(start.Add(2*time.Minute)) {
		t.Fatalf("after the deadline on the core's clock: %+v, want awaiting_approval until %s", s, start.Add(2*time.Minute))
	}
	esc.verdict("p1")(Verdict{Reason: "timeout", Message: "no approval by the deadline"})
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"coder"}, []string{rej.ID}, `{"text":"no approval by the deadline","format":"plain"}`)
	h.space.quiet(t, 20*time.Millisecond)
	if c := esc.cancels(); len(c) != 0 {
		t.Errorf("escalator told to cancel %v after its own verdict, want nothing", c)
	}
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
	// Its timers stop once its record is gone, a moment after the reject
	// (the claim's hold for the policy among them, armed until then).
	poll.Until(t, "no timer left armed after the proposal ended", func() bool { return clock.Armed() == 0 })
}
