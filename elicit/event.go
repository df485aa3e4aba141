package elicit

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// EventKind names a step of asking humans.
type EventKind string

// What an Observer is told about, per approver.
const (
	EventSkipped    EventKind = "skipped"     // Approver was not asked: Reason says why (not in the space, the proposer)
	EventAsked      EventKind = "asked"       // an elicitation went to Approver (RequestID)
	EventAskedAgain EventKind = "asked_again" // the same elicitation went to Approver again after they or we reconnected
	EventAnswered   EventKind = "answered"    // Approver answered: Action, Approve, Reason
	EventDelegated  EventKind = "delegated"   // Approver handed their request on to To
	EventCancelled  EventKind = "cancelled"   // the open prompt at Approver was cancelled: Reason
	EventIgnored    EventKind = "ignored"     // an answer did not count: Reason says why, From who sent it
	EventForgery    EventKind = "forgery"     // an unsigned or badly signed answer for a keyed approver

	// EventOpened, EventReminded, EventEscalated and EventEnded are about
	// the escalation as a whole (Approver is empty, Prompt is set): the
	// notifier (run --notify) turns them into prompt.opened,
	// prompt.reminder, prompt.escalated and prompt.ended.
	EventOpened EventKind = "opened" // the first prompts went out (Prompt.Asked), or a resumed escalation asked again
	// EventReminded: a reminder time of the decision came while the
	// escalation was open; Prompt.Asked are the approvers still waited
	// for.
	EventReminded EventKind = "reminded"
	// EventEscalated: a tier of the decision's escalate_to came while
	// the escalation was open; Prompt.Asked are that tier's approvers
	// (asked now, or when they come into the space), Prompt.Deadline the
	// escalation's unchanged deadline.
	EventEscalated EventKind = "escalated"
	EventEnded     EventKind = "ended" // an opened escalation ended: Outcome says how, Reason why
)

// Outcomes of EventEnded besides the reject reason it ended with (disagree,
// timeout, incapable, other, …).
const (
	OutcomeApproved  = "approved"  // the quorum approved
	OutcomeCancelled = "cancelled" // the fulfiller stopped asking: Reason is why (withdrawn, superseded, shutdown, …)
)

// Prompt describes an escalation to people who are not in the space
// (notifications): what is asked, of whom, until when. It never holds
// the call's arguments unless the decision allowed it.
type Prompt struct {
	Proposer string
	Method   string
	Tool     string // tools/call: the tool's name
	Target   string // the participant that carries the call out (the server)
	Digest   string // the call digest (approval.CallDigest), in full
	// Asked are the approvers who were sent the prompt (EventOpened: the
	// prompts open then; EventReminded: those still waited for;
	// EventEscalated: the tier's approvers; EventEnded: everyone asked
	// along the way, delegates and tiers included).
	Asked    []string
	Quorum   int
	Deadline time.Time
	Resumed  bool // taken up after a restart or from a group member
	// Arguments are the call's arguments (tools/call: params.arguments,
	// else params), only when the decision says notify_arguments: true.
	Arguments json.RawMessage
}

// Event is one step of one escalation, for narration, metrics and audit.
// The decision itself (approved or rejected) is reported by fulfill's own
// events; these say what happened with each human on the way.
type Event struct {
	Time       time.Time
	Kind       EventKind
	ProposalID string
	Approver   string // whose prompt it is about
	From       string // EventIgnored, EventForgery: who sent the answer
	RequestID  string // the elicitation's envelope id
	Action     string // EventAnswered: accept, decline or cancel
	Approve    bool   // EventAnswered: accept with approve true
	Reason     string // the human's reason, why a prompt was cancelled, or why an answer was ignored
	To         string // EventDelegated: the approver it went to

	// Prompt: EventOpened, EventReminded, EventEscalated and EventEnded,
	// the escalation as a whole.
	Prompt *Prompt
	// Outcome: EventEnded, OutcomeApproved, OutcomeCancelled or the
	// reject reason it ended with; Reason then carries the why.
	Outcome string

	// DecisionID and Revision name the decision that escalated
	// (lifecycle.Human), so that the decision log joins each human's
	// answer to it; Revision is never empty for a policy's escalation.
	DecisionID string
	Revision   string

	// FrontEnd and Log: the front end the proposal came through and the
	// fields it names on every line of it (lifecycle.Human's), so that an
	// approval's line says which call it was, as the proposal's do.
	FrontEnd string
	Log      *lifecycle.LogFields
}
