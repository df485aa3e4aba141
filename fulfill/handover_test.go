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
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	// A fulfil timeout well past the test: a timeout reject would show.
	b := newMember(t, mode, "ful-b", Config{Approvals: testApprovals(), FulfillTimeout: time.Minute}, &fakeDecider{decisions: storeDecisions})

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
	prompt := nextPrompt(t, a.space, "alice", "open")

	a.shutdown()
	a.space.quiet(t, 100*time.Millisecond) // no reject, no notifications/cancelled
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

	// The same prompt again: its envelope id and payload (JSON-RPC id
	// among them), so alice's answer to either copy counts once.
	again := nextPrompt(t, b.space, "alice", "open")
	if again.ID != prompt.ID || string(again.Payload) != string(prompt.Payload) {
		t.Fatalf("b asked %s %s again, want a's prompt %s %s", again.ID, again.Payload, prompt.ID, prompt.Payload)
	}
	b.waitStage(t, "inflight", StageFulfilled)
	b.deliver(answerTo(t, prompt, "alice", approveResult))
	b.waitStage(t, "open", StageFulfilling)
	calls, rejects, _ := byKind(t, drain(b.space, 300*time.Millisecond))
	if len(rejects) != 0 {
		t.Errorf("b rejected %v", rejects)
	}
	if len(calls) != 1 || calls["open"].ID == "" {
		t.Errorf("b's tools/calls = %v, want open's once (inflight's never again)", calls)
	}
}
