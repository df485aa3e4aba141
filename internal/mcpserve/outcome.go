package mcpserve

import (
	"encoding/json"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/fulfill"
)

// outcomes tells the team inbox's approvers what became of the calls
// they approved, as a space shows its approvers (elicit/approver's
// Client reads the fulfilment request or the reject, correlated to the
// proposal, and puts the outcome on the card): the engine's events of a
// call sent upstream or refused become the envelopes the fulfiller would
// have written in a space, offered to every approver in the inbox. Each
// Client matches them to the cards it approved and ignores the rest, so
// nothing is kept here.
type outcomes struct{ local *approver.Local }

// Observe implements fulfill.Observer; it never waits (Local.Offer).
func (o outcomes) Observe(e fulfill.Event) {
	if e.ProposalID == "" {
		return
	}
	switch e.Stage {
	case fulfill.StageFulfilling:
		target := e.Target
		if target == "" && e.LogFields != nil {
			target = e.LogFields.Server
		}
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]string{"name": e.Tool}})
		env := agent.Envelope{Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{e.ProposalID}, Payload: req}
		if target != "" {
			env.To = []string{target}
		}
		o.local.Offer(env)
	case fulfill.StageRejected:
		rej, _ := json.Marshal(map[string]string{"reason": e.Reason})
		id := agent.NewID(FulfillerID)
		o.local.Offer(agent.Envelope{ID: id, Kind: agent.KindReject, CorrelationID: agent.CorrelationIDs{e.ProposalID}, Payload: rej})
		if e.Message != "" {
			chat, _ := json.Marshal(map[string]string{"text": e.Message})
			o.local.Offer(agent.Envelope{Kind: agent.KindChat, CorrelationID: agent.CorrelationIDs{id}, Payload: chat})
		}
	}
}
