package fulfill

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mewkit/fulfiller/agent"
)

// A response in the tool owner's name whose JSON-RPC id is not our
// request's does not end the fulfilment; it is recorded once as a spoof
// attempt, and the real response still counts.
func TestResponseWithWrongRPCIDIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	for _, id := range []string{"f1", "f2"} {
		h.deliver(agent.Envelope{ID: id, From: "calculator", Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{req.ID},
			Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"forged":true}}`, rpcID(t, req)+1000))})
	}
	h.deliver(proposalEnv("marker", "coder", `{"method":"ping"}`)) // handled in order: the forgeries were seen by now
	waitFor(t, func() bool { return len(h.stageEventsOf("marker", StageRejected)) == 1 })
	if s, ok := h.f.Get("p1"); !ok || s.State != "fulfilling" {
		t.Fatalf("after a response with the wrong JSON-RPC id: %+v %v, want still fulfilling", s, ok)
	}
	ign := h.stageEventsOf("p1", StageIgnored)
	if len(ign) != 1 || ign[0].Reason != ReasonWrongRPCID || ign[0].By[0] != "calculator" {
		t.Fatalf("ignored events %+v, want one %s", ign, ReasonWrongRPCID)
	}
	h.deliver(response(t, "r1", "calculator", req, `{"content":[]}`))
	waitFor(t, func() bool { return len(h.stageEventsOf("p1", StageFulfilled)) == 1 })
}

// The first response in the tool owner's name ends the fulfilment (a
// forgery that comes first cannot be told from the real answer); a second,
// different one is a conflict: recorded once, as a spoof attempt. The same
// answer delivered again is not.
func TestConflictingResponseRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	h.deliver(response(t, "forged", "calculator", req, `{"content":[{"type":"text","text":"ok"}]}`))
	waitFor(t, func() bool { return len(h.stageEventsOf("p1", StageFulfilled)) == 1 })
	h.deliver(response(t, "again", "calculator", req, `{"content":[{"type":"text","text":"ok"}]}`))
	h.deliver(response(t, "other", "coder", req, `{"content":[]}`)) // not in the owner's name
	h.deliver(response(t, "real", "calculator", req, `{"content":[{"type":"text","text":"3"}]}`))
	h.deliver(response(t, "more", "calculator", req, `{"content":[{"type":"text","text":"4"}]}`))
	h.deliver(proposalEnv("marker", "coder", `{"method":"ping"}`))
	waitFor(t, func() bool { return len(h.stageEventsOf("marker", StageRejected)) == 1 })
	ign := h.stageEventsOf("p1", StageIgnored)
	if len(ign) != 1 {
		t.Fatalf("ignored events %+v, want exactly one conflict", ign)
	}
	if e := ign[0]; e.Reason != ReasonConflictingResponse || e.By[0] != "calculator" || string(e.Result) != `{"jsonrpc":"2.0","id":`+fmt.Sprint(rpcID(t, req))+`,"result":{"content":[{"type":"text","text":"3"}]}}` ||
		e.Message != "response real to fulfilment request "+req.ID+" differs from response forged, which ended the proposal; one of them was forged" {
		t.Errorf("conflict event %+v result %s", e, e.Result)
	}
}

// Reference-SDK tool servers (mew bridge) answer {"result": …} with no
// jsonrpc and no id: matched by correlation and sender, such an answer
// ends the fulfilment and is no spoof attempt (rule 12). So does one whose
// id is null (JSON-RPC's "id unknown").
func TestSDKStyleResponseFulfils(t *testing.T) {
	t.Parallel()
	for name, payload := range map[string]string{
		"no id":   `{"result":{"content":[{"type":"text","text":"3"}]}}`,
		"null id": `{"jsonrpc":"2.0","id":null,"result":{"content":[{"type":"text","text":"3"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
			h.deliver(proposalEnv("p1", "coder", addCall))
			req := h.space.next(t)
			h.deliver(agent.Envelope{ID: "sdk-1", From: "calculator", To: []string{"fulfiller"}, Kind: agent.KindResponse,
				CorrelationID: agent.CorrelationIDs{req.ID}, Payload: json.RawMessage(payload)})
			waitFor(t, func() bool { return len(h.stageEventsOf("p1", StageFulfilled)) == 1 })
			if e := h.stageEventsOf("p1", StageFulfilled)[0]; string(e.Result) != `{"content":[{"type":"text","text":"3"}]}` {
				t.Errorf("fulfilled with %s", e.Result)
			}
			if ign := h.stageEventsOf("p1", StageIgnored); len(ign) != 0 {
				t.Errorf("an honest SDK answer was recorded as ignored: %+v", ign)
			}
		})
	}
}
