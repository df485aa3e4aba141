package elicit

import "time"

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
)

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

	// DecisionID and Revision name the decision that escalated
	// (fulfill.Escalation), so that the decision log joins each human's
	// answer to it; Revision is never empty for a policy's escalation.
	DecisionID string
	Revision   string
}
