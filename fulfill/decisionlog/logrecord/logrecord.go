// Package logrecord is the format of fulfiller's decision log (one JSON
// object a line; docs/design.md rule 10 on its ids): the Record each line
// holds and its types. The writer is package decisionlog, which depends
// on the sidecar (fulfill, elicit); the readers (replay, suggest, anyone's
// tooling) need only this leaf.
package logrecord

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// Record types, in the "type" field of each line.
const (
	TypeDecision = "decision" // the policy answered (result, input, latency)
	TypeOutcome  = "outcome"  // the proposal moved towards (or reached) its end
	TypeApproval = "approval" // one human answered an escalation
	TypeIgnored  = "ignored"  // a proposal frame was deliberately left unanswered
	// TypeShadow: the shadow policy (--shadow-policy) decided what the
	// live decision with this decision_id decided; never acted on.
	TypeShadow = "shadow"
	// TypeGrant: an approval created a grant (grant_id, by, message) or
	// could not (message says why).
	TypeGrant = "grant"
)

// Record is one line of the decision log. Fields absent for a record type
// are left out, except revision, which is null where no policy decided.
// decision_id is the id of the decision record that governs the proposal
// (docs/design.md rule 10): every line of a proposal carries the id of the
// decision in force, so outcomes join their decision on it; a
// re-evaluation after an approver's edit is a new decision with a new id.
// proposal_id ties all lines of one proposal together.
type Record struct {
	DecisionID string    `json:"decision_id"`
	Timestamp  time.Time `json:"timestamp"`
	Type       string    `json:"type"`
	Stage      string    `json:"stage"`
	ProposalID string    `json:"proposal_id"`
	Revision   *string   `json:"revision"` // the policy revision of that decision; null: no policy decided
	Proposer   string    `json:"proposer,omitempty"`
	Method     string    `json:"method,omitempty"`
	Tool       string    `json:"tool,omitempty"`
	Target     string    `json:"target,omitempty"`
	FrontEnd   string    `json:"front_end,omitempty"` // "mew" or "mcp", as input.front_end; absent in logs of builds before there were two
	// Client, Server and RPCID name an MCP front end's call (DESIGN:
	// "its decision log lines carry front_end, client, server, tool"):
	// the client's clientInfo name (a claim), the upstream's NAME, and
	// the client's JSON-RPC id of its tools/call. Absent on MEW lines,
	// and on the lines of a call told before its decision (an invalid
	// one) or resumed after a restart, which know no decided input.
	Client string          `json:"client,omitempty"`
	Server string          `json:"server,omitempty"`
	RPCID  json.RawMessage `json:"rpc_id,omitempty"`

	// Decision records.
	Input  json.RawMessage    `json:"input,omitempty"`
	Erased []string           `json:"erased,omitempty"` // masked input paths, as in OPA ("/input/params/arguments/password")
	Result *decision.Decision `json:"result,omitempty"`
	Error  string             `json:"error,omitempty"` // why the decision failed closed
	// PolicyTimeout says an evaluation ran past the policy timeout:
	// "retried" (the second evaluation decided) or "busy" (it timed out
	// too, and the answer was a busy reject; load is not a policy verdict).
	PolicyTimeout string `json:"policy_timeout,omitempty"`
	Reevaluated   bool   `json:"reevaluated,omitempty"` // asked again after an approver edited the call
	GrantID       string `json:"grant_id,omitempty"`    // decision: the grant that let it through; grant: the grant made
	LatencyNS     int64  `json:"latency_ns,omitempty"`

	// Outcome records.
	Status   string          `json:"status,omitempty"` // fulfilled: ok or error; rejected with reason timeout: timeout
	Reason   string          `json:"reason,omitempty"` // rejected: the wire reason; withdrawn: the proposer's; ignored: why; undelivered: refused or not_written
	Message  string          `json:"message,omitempty"`
	By       []string        `json:"by,omitempty"`        // approved/fulfilled: approvers; superseded: who answered instead; escalated: who is asked
	RPCError json.RawMessage `json:"rpc_error,omitempty"` // fulfilled with status error: the JSON-RPC error object
	// Task (task, and the fulfilled that relays a task's result): the MCP
	// task the fulfilment became at its tool owner.
	Task *Task `json:"task,omitempty"`
	// KnownFulfiller (superseded): whether By is a fellow fulfiller
	// (--peer-fulfillers) or another participant that ended the proposal.
	KnownFulfiller *bool `json:"known_fulfiller,omitempty"`

	// Approval records.
	Approver          string `json:"approver,omitempty"`
	Action            string `json:"action,omitempty"`             // accept, decline or cancel
	Approve           *bool  `json:"approve,omitempty"`            // accept with approve true
	SignatureVerified *bool  `json:"signature_verified,omitempty"` // nil: the approver has no key, the gateway's word was taken
	// To is whom the approver handed their request on to (delegated).
	To string `json:"to,omitempty"`

	// Shadow records.
	Shadow *Shadow `json:"shadow,omitempty"`
}

// Shadow is what the shadow policy made of the live decision a shadow
// record's decision_id names (revision: the live one's).
type Shadow struct {
	Revision  string             `json:"revision"`        // the shadow policy's revision
	Live      string             `json:"live"`            // the live decision's action
	Result    *decision.Decision `json:"result"`          // the shadow's decision, as `fulfiller eval` prints it
	Error     string             `json:"error,omitempty"` // why the shadow failed: error, timeout, panic
	Agrees    bool               `json:"agrees"`          // no error, and the same action as the live decision
	LatencyNS int64              `json:"latency_ns"`
}

// Task is the MCP task a fulfilment became at its tool owner, as task
// and fulfilled records show it (fulfill.TaskInfo as the log writes it).
type Task struct {
	ID       string    `json:"id"`
	Spec     string    `json:"spec"`
	Status   string    `json:"status"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
}
