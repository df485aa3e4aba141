package fulfill

import (
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/internal/clocktest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestPendingTTLNeverEndsAPrompt: an open prompt is ended by its
// escalation alone (the core's escalation deadline, at the decision's
// timeout), and the pending TTL, shorter, never cuts it short (DESIGN
// rule 8): nothing happens when the TTL passes on the core's clock; at
// the deadline the proposer is told "timeout".
func TestPendingTTLNeverEndsAPrompt(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	clock := clocktest.New(start)
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: 2 * time.Minute}}}
	space := newFakeSpace()
	space.setPresent("alice", true)
	h := newHarnessOn(t, space, Config{PendingTTL: time.Minute, Approvals: &Approvals{Codec: answerCodec{}}, Clock: clock}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	for {
		env := h.space.next(t)
		if env.Kind == agent.KindRequest && len(env.To) == 1 && env.To[0] == "alice" {
			break
		}
	}
	if !clock.WaitArmed(1, poll.Limit) {
		t.Fatal("no deadline armed")
	}
	clock.Advance(time.Minute + time.Second) // the TTL's length passes
	h.space.quiet(t, 20*time.Millisecond)
	if s, _ := h.f.Get("p1"); s.State != string(lifecycle.AwaitingApproval) || !s.Deadline.Equal(start.Add(2*time.Minute)) {
		t.Fatalf("after the pending TTL on the core's clock: %+v, want awaiting_approval until %s", s, start.Add(2*time.Minute))
	}
	clock.Advance(time.Minute) // the deadline passes
	for {
		env := h.space.next(t)
		if env.Kind == agent.KindReject {
			wantEnvelope(t, env, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
			break
		}
	}
}

// The pending TTL ends a proposal still deciding at once, on the clock:
// nothing before it, "timeout" at it. One approved but then queued for a
// slot times out at its next TTL.
func TestPendingTTLOnTheClock(t *testing.T) {
	t.Parallel()
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
