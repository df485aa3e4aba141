package fulfill

import (
	"context"
	"slices"
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

// TestPendingTTLNeverEndsAPrompt: an open prompt has one deadline, its
// escalation's (the decision's timeout), and the pending TTL, shorter,
// never cuts it short (DESIGN rule 8): nothing happens when the TTL would
// have run out, the proposal is rejected "timeout" at its deadline, once,
// and the Escalator is told to cancel its prompts.
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
	clock.Advance(time.Minute) // the pending TTL's length: nothing ends
	h.space.quiet(t, 20*time.Millisecond)
	if s, _ := h.f.Get("p1"); s.State != string(lifecycle.AwaitingApproval) || !s.Deadline.Equal(start.Add(2*time.Minute)) {
		t.Fatalf("after the TTL's length: %+v, want awaiting_approval until %s", s, start.Add(2*time.Minute))
	}
	clock.Advance(time.Minute - time.Nanosecond)
	h.space.quiet(t, 20*time.Millisecond)
	clock.Advance(time.Nanosecond)
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"coder"}, []string{rej.ID}, `{"text":"no approval by 2026-11-27T03:02:00Z","format":"plain"}`)
	waitFor(t, func() bool { return slices.Contains(esc.cancels(), "p1:timeout") })
	h.space.quiet(t, 20*time.Millisecond)
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
