// Package elicit asks humans about escalated proposals, with MCP
// elicitation carried in MEW envelopes (docs/protocol.md, "Escalation by MCP
// elicitation"), and turns their answers into fulfil or reject.
//
// # Where it runs
//
// The escalation itself (whom to ask, quorum, veto, delegation,
// reminders, tiers, the deadline, the grant chosen) is a pure sub-machine
// of the fulfiller's lifecycle core (fulfill/lifecycle, escalation.go),
// run by the fulfiller's one event loop: no goroutine or timer per
// escalation. This package is its Codec: Codec.Prompt builds the
// elicitation/create payload of a prompt (below), Codec.Read verifies an
// answer under the approver keys in force and reads its form into a
// verified answer; EventOf turns the core's steps with the humans into
// the Event the decision log, the metrics and the notifier read, and
// LogKeys says at start who must sign. The fulfiller's shell is the
// approvers' channel: it writes the prompts and their cancellations over
// the agent, and hands the core the answers, the roster and key reloads
// (fulfill.Approvals; internal/sidecar wires it, tests build it with
// Config.Approvals).
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
// # Who is asked, and when
//
// At escalation, every listed approver who is in the space is asked at
// once; with fewer of them in the space than the quorum, the proposal is
// rejected "incapable" without waiting. While the escalation is open, a
// listed approver who comes into the space later (they were away, or left
// and came back) and has neither answered nor an open prompt is asked too,
// with the same deadline.
//
// An approver who leaves keeps their prompt: a leave is not a decline, and
// the gateway cannot tell a closed laptop from a dropped link. So the
// escalation goes on waiting, for them to come back or for anyone else
// listed to come in, and with nobody answering it ends at the deadline
// with reject "timeout". It is not cut short when nobody listed is left in
// the space: they may come back before the deadline, and a human prompt is
// already bounded by it.
//
// # Failures and recovery
//
// The gateway replays nothing: an elicitation or an answer sent while
// either side's link was down is lost. So when our session is
// re-established (a new system/welcome) every open prompt is sent again to
// its approver if they are here, and when an approver joins, their open
// prompts are sent again. The prompt is re-sent byte for byte (same
// envelope id, same JSON-RPC id), so the approver's client recognises the
// question: approver.Client shows it once and, if it had already answered,
// re-sends the recorded answer instead of asking the person again. A
// re-sent answer carries the same signed bytes, so it verifies; it counts
// once (a second answer to a prompt is ignored as "already answered"), and
// it cannot be used for another prompt, because the signature covers the
// elicitation envelope id and each prompt has its own.
//
// # Signed approvals
//
// The gateway does not authenticate from. For approvers with a key
// (--approver-keys), an answer counts only with a valid Ed25519 signature
// over the elicitation envelope id, the call digest, the action and the
// canonical (RFC 8785) content; anything else is ignored and logged as a
// forgery attempt. See approval.Sign, approval.Verify and
// approval.CallDigest.
//
// The keys may change while escalations are open (the file is reloaded;
// the shell hands the core the set in force before each answer). An answer is verified under the keys in force when it
// arrives: a key removed or replaced (an approver who lost a device and
// enrolled again) verifies nothing from then on, even for prompts sent
// before, and an approver keyed since a prompt was sent must sign their
// answer to it. A prompt sent while its approver was keyed stays one that
// needs a signed answer: if the key is removed, no answer to it counts
// (each is ignored) until a key is back or the escalation ends. Its record
// says so (state.Prompt.Signed), so that a restart or an adopter keeps it
// that way.
//
// # Signed prompts
//
// Prompts in the fulfiller's name are a claim too. With Config.PromptKey
// (--prompt-key), every elicitation/create carries an Ed25519 signature in
// params._meta["fulfiller/signature"] over its envelope id, JSON-RPC id,
// approver, call digest and canonical params, and approver clients that pin
// the key show only prompts that verify (docs/design.md "Proposer identity
// and grants"). The prompt is signed before it is recorded, so asking it
// again re-sends the same signed bytes. See approval.SignPrompt and
// approval.VerifyPrompt.
package elicit
