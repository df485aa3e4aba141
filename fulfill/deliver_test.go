package fulfill

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
)

// refusal is the gateway's capability violation for our envelope id, as
// the reference gateway sends it (testdata/conformance/mew-v0.4/README.md, "Errors").
func refusal(id, kind string) agent.Envelope {
	return agent.Envelope{ID: "error-1", From: agent.GatewayID, To: []string{"fulfiller"}, Kind: agent.KindError,
		CorrelationID: agent.CorrelationIDs{id},
		Payload:       json.RawMessage(`{"error":"capability_violation","attempted_kind":"` + kind + `","your_capabilities":[{"kind":"chat"},{"id":"mcp-response","kind":"mcp/response"}]}`)}
}

// A reject the gateway refused is reported undelivered, after the
// rejected event of its write.
func TestRefusedRejectReportedUndelivered(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "unsafe"}}}
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"unsafe"}`)

	h.deliver(refusal(rej.ID, agent.KindReject))
	want := []Stage{StageReceived, StageDecided, StageRejected, StageUndelivered}
	waitFor(t, func() bool { return len(h.stages("p1")) == len(want) })
	if got := h.stages("p1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("stages = %v, want %v", got, want)
	}
	ev := h.stageEventsOf("p1", StageUndelivered)[0]
	if ev.Reason != UndeliveredRefused || ev.Envelope != agent.KindReject ||
		ev.Message != "gateway refused envelope "+rej.ID+" (mcp/reject): capability_violation; our capabilities: chat, mcp/response" {
		t.Errorf("undelivered event %+v", ev)
	}
	// A second copy of the error (or one for an envelope of someone
	// else) reports nothing more.
	h.deliver(refusal(rej.ID, agent.KindReject))
	h.deliver(refusal("not-ours", agent.KindReject))
	h.space.quiet(t, 50*time.Millisecond)
	if n := len(h.stages("p1")); n != len(want) {
		t.Errorf("stages after repeated error: %v", h.stages("p1"))
	}
}

// A fulfilment request the gateway refused never reached the tool owner:
// the proposal is reported undelivered and rejected "other", and a late
// response (forged: nobody got the request) counts for nothing.
func TestRefusedFulfilmentRequestRejectsOther(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	h.deliver(refusal(req.ID, agent.KindRequest))
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"other"}`)
	chat := h.space.next(t)
	wantEnvelope(t, chat, agent.KindChat, []string{"coder"}, []string{rej.ID}, `{"text":"the gateway refused the fulfilment request","format":"plain"}`)

	want := []Stage{StageReceived, StageDecided, StageFulfilling, StageUndelivered, StageRejected}
	waitFor(t, func() bool { return len(h.stages("p1")) == len(want) })
	if got := h.stages("p1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("stages = %v, want %v", got, want)
	}
	if ev := h.stageEventsOf("p1", StageUndelivered)[0]; ev.Reason != UndeliveredRefused || ev.Envelope != agent.KindRequest || !strings.Contains(ev.Message, req.ID) {
		t.Errorf("undelivered event %+v", ev)
	}
	id := rpcID(t, req)
	h.deliver(agent.Envelope{ID: "r1", From: "calculator", Kind: agent.KindResponse, To: []string{"fulfiller"},
		CorrelationID: agent.CorrelationIDs{req.ID}, Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{}}`, id))})
	h.space.quiet(t, 50*time.Millisecond)
	if got := h.stages("p1"); len(got) != len(want) {
		t.Errorf("stages after the response: %v", got)
	}
}
