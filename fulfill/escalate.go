package fulfill

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/policies"
)

// Escalation is what the Fulfiller hands to an Escalator when a policy says
// "escalate": everything a human needs to judge the call, and nothing they
// could use to change which call is judged.
type Escalation struct {
	Proposal agent.Envelope
	Method   string
	Params   json.RawMessage
	Tool     *policies.Tool // nil when the method is not tools/call
	// InputSchema is the tool's JSON Schema from its owner's tools/list,
	// when known: it types the fields an approver may edit.
	InputSchema json.RawMessage
	Target      string // who will carry the call out
	Decision    decision.Decision
	Deadline    time.Time
	// DeadlineByProposer: the proposal's own deadline hint, sooner than
	// the policy's timeout, set Deadline (the approver is told: the
	// proposer stops waiting then).
	DeadlineByProposer bool

	// DecisionID is the decision log's id of the decision that escalated
	// (Decision.Revision is its revision): approval records carry it.
	DecisionID string

	// With a pending-work store (Config.Store), RecordPrompt must be
	// called before each elicitation is sent and RecordApproval for each
	// approval before it counts, so that a restart or an adopting group
	// member asks the same prompts again and counts each approval once.
	// An error means: do not send that prompt (count that approval) and
	// end the escalation with reason "other"; an error wrapping
	// state.ErrConflict means the proposal is another member's now, so
	// its prompts are dropped without notifications/cancelled. Nil: not
	// recorded (an Escalator's own tests).
	RecordPrompt   func(state.Prompt) error
	RecordApproval func(state.Approval) error
	// Prompts and Approvals are what was recorded before a restart or an
	// adoption: the Escalator asks the open prompts again with the same
	// envelope and JSON-RPC ids (so an answer to the earlier copy counts,
	// once) and counts the approvals as already given. Empty for a new
	// escalation.
	Prompts   []state.Prompt
	Approvals []state.Approval
}

// Verdict is how an escalation ended.
type Verdict struct {
	Approved bool
	By       []string        // approvers whose answers count
	Params   json.RawMessage // edited params; nil when approved as proposed
	Content  json.RawMessage // the approvers' form content, for input.approval
	// Grant is how long the grant the approver chose with the approval
	// lasts (the form offered it: the decision's grantable, quorum 1);
	// 0: none.
	Grant time.Duration
	// Evidence is the signed answer that chose the grant; nil when
	// approvals are not signed.
	Evidence *grants.Evidence
	Reason   string // when not approved: the wire reason (disagree, other, timeout, incapable, policy)
	Message  string // when not approved: the human's reason or why it failed
	// Superseded is set when an approver answered the proposer directly
	// (their own mcp/request or mcp/reject): we must not answer again.
	Superseded bool
}

// Escalator asks humans about a proposal. Escalate must not block; it
// reports the outcome by calling done exactly once, unless Cancel for that
// proposal came first (then done must not be called).
type Escalator interface {
	Escalate(ctx context.Context, e Escalation, done func(Verdict))
	Cancel(proposalID, reason string)
}

// minHintedDeadline: a proposer's deadline sooner than this from now is
// treated as passed — no human can read a card that fast.
const minHintedDeadline = 2 * time.Second
