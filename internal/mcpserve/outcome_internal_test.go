package mcpserve

import (
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/fulfill"
)

// TestOutcomeEnvelopes: the engine's reject of a call becomes the
// envelopes a space would show its approvers (an mcp/reject correlated
// to the proposal with its reason, then the chat explaining it,
// correlated to the reject), and a call sent upstream an mcp/request
// correlated to the proposal naming its upstream; every approver in the
// inbox is offered them, from the fulfiller. Other stages tell nothing.
func TestOutcomeEnvelopes(t *testing.T) {
	t.Parallel()
	local := approver.NewLocal(FulfillerID, nil)
	alice, err := local.Join("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	o := outcomes{local}
	o.Observe(fulfill.Event{Stage: fulfill.StageDecided, ProposalID: "p-1"})
	o.Observe(fulfill.Event{Stage: fulfill.StageRejected, ProposalID: "p-1", Reason: "disagree", Message: "bob declined"})
	o.Observe(fulfill.Event{Stage: fulfill.StageFulfilling, ProposalID: "p-2", Tool: "drop", Target: "tables"})

	next := func() agent.Envelope {
		select {
		case env := <-alice.In:
			return env
		default:
			t.Fatal("no envelope offered")
			return agent.Envelope{}
		}
	}
	rej := next()
	if rej.Kind != agent.KindReject || rej.From != FulfillerID || rej.CorrelationID.First() != "p-1" || string(rej.Payload) != `{"reason":"disagree"}` || rej.ID == "" {
		t.Errorf("the reject: %+v %s", rej, rej.Payload)
	}
	chat := next()
	if chat.Kind != agent.KindChat || chat.From != FulfillerID || chat.CorrelationID.First() != rej.ID || string(chat.Payload) != `{"text":"bob declined"}` {
		t.Errorf("the explanation: %+v %s", chat, chat.Payload)
	}
	req := next()
	if req.Kind != agent.KindRequest || req.CorrelationID.First() != "p-2" || len(req.To) != 1 || req.To[0] != "tables" ||
		string(req.Payload) != `{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"drop"}}` {
		t.Errorf("the fulfilment: %+v %s", req, req.Payload)
	}
	select {
	case env := <-alice.In:
		t.Errorf("more was offered: %+v", env)
	default:
	}
}
