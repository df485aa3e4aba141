package elicit

import (
	"encoding/json"
	"fmt"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
)

// outcome is what one approver's answer amounts to, before the escalation
// checks the signature and applies it.
type outcome int

const (
	// outcomeIgnored: not a usable answer; it counts as no answer at all.
	outcomeIgnored outcome = iota
	// outcomeError: the approver's client answered with a JSON-RPC error.
	outcomeError
	outcomeCancel
	outcomeDecline
	outcomeDelegate
	outcomeApprove
)

// answerPayload is an approver's mcp/response payload, read.
type answerPayload struct {
	outcome outcome
	why     string          // outcomeIgnored: why it does not count
	rpcErr  *agent.RPCError // outcomeError
	action  string          // accept, decline or cancel
	content json.RawMessage // result.content as sent, signature included
	form    form            // content, read
}

// parseAnswer reads the payload of an answer to an elicitation/create
// request. It is pure, so that the rules deciding what counts as an
// approval can be tested and fuzzed on their own; who sent the answer and
// its signature are the caller's to check.
//
// Only an `accept` whose content holds `approve: true` and no `delegate_to`
// is an approval. An accept without approve:true is a decline (or a
// delegation when it names delegate_to); decline is a decline whatever its
// content says; anything that is not a JSON-RPC response with an
// elicitation result of a known action is ignored.
func parseAnswer(payload json.RawMessage) answerPayload {
	var resp agent.RPCResponse
	if agent.Unmarshal(payload, &resp) != nil {
		return answerPayload{why: "payload is not a JSON-RPC response"}
	}
	if resp.Error != nil {
		return answerPayload{outcome: outcomeError, rpcErr: resp.Error}
	}
	var r result
	if agent.Unmarshal(resp.Result, &r) != nil {
		return answerPayload{why: "result is not an elicitation result"}
	}
	a := answerPayload{action: r.Action, content: r.Content}
	switch r.Action {
	case approval.ActionAccept, approval.ActionDecline, approval.ActionCancel:
	default:
		a.why = fmt.Sprintf("unknown action %q", r.Action)
		return a
	}
	a.form = readForm(r.Content)
	switch {
	case r.Action == approval.ActionCancel:
		a.outcome = outcomeCancel
	case r.Action == approval.ActionDecline || (a.form.delegateTo == "" && !a.form.approve):
		a.outcome = outcomeDecline
	case a.form.delegateTo != "":
		a.outcome = outcomeDelegate
	default:
		a.outcome = outcomeApprove
	}
	return a
}
