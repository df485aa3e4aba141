package fulfill

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/state"
)

// answerFor is the tool owner's response to a fulfilment request.
func answerFor(t *testing.T, req agent.Envelope) agent.Envelope {
	t.Helper()
	return agent.Envelope{ID: "resp-" + req.ID, From: "calculator", To: []string{req.From}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{req.ID},
		Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}`, rpcID(t, req)))}
}

// A fulfilled proposal's id replayed after a restart on the same DIR store
// runs nothing: the claim survives the restart (rule 5, SeenTTL window).
func TestStoreReplayAfterRestartRunsNothing(t *testing.T) {
	dir := t.TempDir()
	mode := state.Mode{Kind: state.Dir, Dir: dir}
	st := openStore(t, mode, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	req := h.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("sent %s %s, want the tools/call", req.Kind, req.Payload)
	}
	h.deliver(answerFor(t, req))
	h.waitStage(t, "p1", StageFulfilled)
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	h2.deliver(proposalEnv("p1", "coder", callOf("add")))
	h2.waitStage(t, "p1", StageIgnored)
	h2.space.quiet(t, 200*time.Millisecond)
	if n := h2.dec.count(); n != 0 {
		t.Errorf("replay decided %d times, want 0", n)
	}
}

// Store unreachable, member alone: no fulfilment, the proposer gets busy.
func TestStoreUnreachableAloneRejectsBusy(t *testing.T) {
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	st.dead.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"busy"}`)
	chat := h.space.next(t)
	if chat.Kind != agent.KindChat || !jsonEqual(chat.Payload, `{"text":"pending-work store unavailable; propose again later","format":"plain"}`) {
		t.Errorf("chat = %s %s", chat.Kind, chat.Payload)
	}
	h.space.quiet(t, 100*time.Millisecond)
	if n := h.dec.count(); n != 0 {
		t.Errorf("decided %d times without a claim, want 0", n)
	}
}

// The record of a fulfilment request cannot be written: the request is not
// sent and the proposer gets reject "other".
func TestStoreUpdateFailsNoRequest(t *testing.T) {
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	st.failUpdate.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"other"}`)
	for _, env := range drain(h.space, 200*time.Millisecond) {
		if isToolsCall(env) {
			t.Fatalf("tools/call written without its record: %s", env.Payload)
		}
	}
	st.failUpdate.Store(false)
	recs, err := st.List(t.Context())
	if err != nil || len(recs) != 0 {
		t.Errorf("records left = %d (%v), want 0", len(recs), err)
	}
}

// Same for an escalation: no prompt without its record; reject "other".
func TestStoreEscalationNotRecordedNoPrompt(t *testing.T) {
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	esc := newRecEscalator()
	h := newStoreHarness(t, "fulfiller", st, Config{Escalator: esc}, &fakeDecider{decisions: storeDecisions})
	st.failUpdate.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("ask")))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"other"}`)
	esc.mu.Lock()
	n := len(esc.escs)
	esc.mu.Unlock()
	if n != 0 {
		t.Errorf("escalator asked %d times, want 0", n)
	}
}
