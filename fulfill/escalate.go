package fulfill

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/agent"
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
	Decision    policies.Decision
	Deadline    time.Time

	// DecisionID is the decision log's id of the decision that escalated
	// (Decision.Revision is its revision): approval records carry it.
	DecisionID string
}

// Verdict is how an escalation ended.
type Verdict struct {
	Approved bool
	By       []string        // approvers whose answers count
	Params   json.RawMessage // edited params; nil when approved as proposed
	Content  json.RawMessage // the approvers' form content, for input.approval
	Reason   string          // when not approved: the wire reason (disagree, other, timeout, incapable, policy)
	Message  string          // when not approved: the human's reason or why it failed
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
