package fulfill

import (
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// TestShutdownHandsOverToALivePeer: a member that stops while a peer is
// live (a rolling restart) rejects nothing and cancels nothing: its open
// prompt and its call in flight are the group's. The peer adopts them as
// soon as the member's store closes (its lease removed, no --lease
// wait), asks the same prompt again, and takes the response to the call
// that came while nobody held the proposal, so the call is answered once
// and not rejected "timeout" after its proposer saw it answered.
func TestShutdownHandsOverToALivePeer(t *testing.T) {
	mode := natsServer(t)
	escA := newRecEscalator()
	a := newMember(t, mode, "ful-a", Config{Escalator: escA}, &fakeDecider{decisions: storeDecisions})
	escB := newRecEscalator()
	// A fulfil timeout well past the test: a timeout reject would show.
	b := newMember(t, mode, "ful-b", Config{Escalator: escB, FulfillTimeout: time.Minute}, &fakeDecider{decisions: storeDecisions})

	claimedByA := func(env agent.Envelope) {
		a.deliver(env)
		a.waitStage(t, env.ID, StageReceived)
		b.deliver(env)
		b.waitStage(t, env.ID, StageIgnored)
	}
	claimedByA(proposalEnv("inflight", "coder", callOf("add")))
	req := a.space.next(t)
	if !isToolsCall(req) || req.CorrelationID.First() != "inflight" {
		t.Fatalf("a sent %s %s", req.Kind, req.Payload)
	}
	claimedByA(proposalEnv("open", "coder", callOf("ask")))
	escA.next(t) // recorded its prompt, elicit-open, as elicit does

	a.shutdown()
	a.space.quiet(t, 100*time.Millisecond) // no reject, no notifications/cancelled
	if got := escA.cancelled(); len(got) != 1 || got[0] != "open:"+DropReason {
		t.Errorf("a's escalator cancels %v, want open dropped without a word (%s)", got, DropReason)
	}
	for _, id := range []string{"inflight", "open"} {
		if stages := a.stages(id); stages[len(stages)-1] != StageIgnored {
			t.Errorf("%s at a ends in %v, want handed over (ignored)", id, stages)
		}
	}
	// The tool owner answers a's request while a is stopped and b does
	// not hold the proposal yet.
	b.deliver(answerFor(t, req))
	b.waitStage(t, "inflight", StageIgnored) // the claim it lost, no more yet
	if err := a.st.Close(); err != nil {
		t.Fatal(err)
	}

	again := escB.next(t)
	if again.Proposal.ID != "open" || len(again.Prompts) != 1 || again.Prompts[0].EnvelopeID != "elicit-open" {
		t.Fatalf("b asked %s again with prompts %+v, want open's prompt elicit-open", again.Proposal.ID, again.Prompts)
	}
	b.waitStage(t, "inflight", StageFulfilled)
	escB.done("open")(Verdict{Approved: true, By: []string{"alice"}})
	b.waitStage(t, "open", StageFulfilling)
	calls, rejects, _ := byKind(t, drain(b.space, 300*time.Millisecond))
	if len(rejects) != 0 {
		t.Errorf("b rejected %v", rejects)
	}
	if len(calls) != 1 || calls["open"].ID == "" {
		t.Errorf("b's tools/calls = %v, want open's once (inflight's never again)", calls)
	}
}
