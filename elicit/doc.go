// Package elicit asks humans about escalated proposals, with MCP
// elicitation carried in MEW envelopes (PROTOCOL.md, "Escalation by MCP
// elicitation"), and turns their answers into fulfil or reject.
//
// # What goes on the wire
//
// For each approver the decision names (else --approvers) who is in the
// space, one mcp/request to that approver:
//
//	{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{
//	   "message": "coder wants to call delete_path on fs with {...}: why the policy asks. Call digest 029cd4a2f365.",
//	   "requestedSchema": {"type":"object","properties":{
//	      "approve":{"type":"boolean",...}, "reason":{"type":"string",...},
//	      <each editable argument, typed, with the proposed value as default>,
//	      "delegate_to":{"type":"string","enum":[<other approvers>]}},
//	    "required":["approve"]},
//	   "_meta": {"proposal":{"id","from","method","params","digest","deadline","revision"},
//	             "tool":{...}, "target":"fs", "policy":{...}, "delegated_by":[...]}}}
//
// The envelope carries no correlation_id: a proposal id there would make the
// reference SDK take the human's answer for the tool result. The proposal is
// named in _meta instead.
//
// # Answers
//
// Only an mcp/response whose correlation_id names the elicitation envelope
// and whose from is the approver it was sent to counts. accept with
// approve:true is an approval (of the call as edited, if the approver
// changed editable arguments); accept with approve false, or decline, is a
// veto (reject "disagree", with the human's reason in the chat); cancel is
// reject "other"; delegate_to hands the request on, deadline unchanged. A
// quorum of N needs N distinct approvers approving the same call. No answer
// by the deadline is reject "timeout". When it is over — decided, withdrawn,
// timed out, superseded — every prompt still open gets
// notifications/cancelled.
//
// # Signed approvals
//
// The gateway does not authenticate from. For approvers with a key
// (--approver-keys), an answer counts only with a valid Ed25519 signature
// over the elicitation envelope id, the call digest, the action and the
// canonical (RFC 8785) content; anything else is ignored and logged as a
// forgery attempt. See Sign, Verify and CallDigest.
package elicit
