package approver

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/printable"
)

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventEnded: a card went away without this approver's answer;
	// Event.End says why.
	EventEnded EventKind = iota + 1
	// EventSent: the answer to a card was sent (Err nil) or not (Err).
	EventSent
	// EventOutcome: what became of a proposal this approver approved.
	EventOutcome
	// EventFulfillerLeft: the fulfiller (Event.Fulfiller, one of a group)
	// left the space; the cards it asked ended (each with its own
	// EventEnded) and come back if it, or a member adopting them, asks
	// again.
	EventFulfillerLeft
	// EventFulfillerJoined: the fulfiller is (back) in the space.
	EventFulfillerJoined
	// EventFulfillerAbsent: when Run starts, the fulfiller is not in the
	// space, so no card can come until it joins.
	EventFulfillerAbsent
	// EventPeers: another approver answered about the proposal of a card
	// still shown or queued here; Event.Peers is every answer seen so
	// far (a quorum's progress, or who is against it).
	EventPeers
	// EventRefused: a prompt claiming to come from Event.Fulfiller was
	// dropped, never shown, because its signature does not verify under
	// the pinned fulfiller keys (Options.FulfillerKeys); Event.Request is
	// its envelope id and Event.Err why. Someone may be forging prompts.
	EventRefused
)

// Event is one thing that happened to a card, or to the fulfiller, for a
// UI to show. It is data, not text: each face (terminal card, browser
// inbox) words it its own way.
type Event struct {
	Kind      EventKind
	Card      *Card   // the card concerned; nil for the Fulfiller* kinds
	End       End     // EventEnded
	Answer    Answer  // EventSent, EventOutcome: what this approver answered
	Err       error   // EventSent: why the answer was not sent
	Outcome   Outcome // EventOutcome
	Fulfiller string  // the participant id of the fulfiller concerned: the one that asked the card (last), sent the outcome, or left, joined or is absent; EventRefused: the one the prompt claims to come from
	Request   string  // EventRefused: the envelope id of the prompt dropped
	// Peers are the other approvers' answers about the card's proposal
	// seen so far (EventPeers; and EventEnded, where they say who decided).
	Peers []PeerAnswer
}

// Cause is why a card ended without this approver's answer.
type Cause string

// Causes. Each but CauseFulfillerLeft, CauseReasked and CauseContested comes from the
// reason of the fulfiller's notifications/cancelled; a reason the client does not know
// is CauseOther, with the reason kept in End.Reason.
const (
	CauseWithdrawn     Cause = "withdrawn"      // the proposer withdrew the proposal
	CauseDeadline      Cause = "deadline"       // the deadline passed
	CauseDecided       Cause = "decided"        // other approvers decided (approved, declined or dismissed it)
	CauseAnswered      Cause = "answered"       // another participant answered the proposal directly
	CauseCancelled     Cause = "cancelled"      // an operator cancelled it (operator API)
	CauseFulfillerLeft Cause = "fulfiller_left" // the fulfiller left the space
	CauseReasked       Cause = "reasked"        // another fulfiller of the group asked it again, under a new prompt shown next
	CauseShutdown      Cause = "shutdown"       // the fulfiller is shutting down
	CauseIncapable     Cause = "incapable"      // too few approvers are left to reach the quorum
	// CauseContested: another prompt came under this card's envelope id
	// or JSON-RPC id with different content. One of the two is not the
	// fulfiller's and the client cannot tell which, so the card takes no
	// answer (docs/design.md "Proposer identity and grants").
	CauseContested Cause = "contested"
	// CauseDisplaced: more prompts came at once than the client holds
	// (Options.MaxCards, MaxCardBytes), and this card, the oldest, made
	// room. Nothing was sent; the fulfiller still waits for an answer.
	CauseDisplaced Cause = "displaced"
	CauseOther     Cause = "other" // anything else; End.Reason says what
)

// End is why a card ended: the cause, the raw reason of the fulfiller's
// notifications/cancelled ("" when there was none) and, for CauseDecided,
// whether the other approvers approved.
type End struct {
	Cause    Cause
	Reason   string
	Approved bool // CauseDecided: the others approved (else they declined or dismissed it)
	// By are the other approvers' answers seen before the end: for
	// CauseDecided, who decided and why.
	By []PeerAnswer
}

// endOf reads the reason of a notifications/cancelled sent by the
// fulfiller (elicit sends the reason the escalation ended with; fulfill the
// reason the proposal ended with while it was asked).
func endOf(reason string) End {
	e := End{Reason: reason}
	switch reason {
	case "withdrawn":
		e.Cause = CauseWithdrawn
	case "timeout":
		e.Cause = CauseDeadline
	case "approved":
		e.Cause, e.Approved = CauseDecided, true
	case "disagree":
		// Another approver declined, or the approvers approved different
		// edits: either way the others decided against it.
		e.Cause = CauseDecided
	case "superseded":
		e.Cause = CauseAnswered
	case "cancelled":
		e.Cause = CauseCancelled
	case "shutdown":
		e.Cause = CauseShutdown
	case "incapable":
		e.Cause = CauseIncapable
	default:
		// "other" is both "another approver dismissed it" (elicit) and
		// "the fulfiller is shutting down" (fulfill): it cannot be told
		// apart, so it is not guessed at.
		e.Cause = CauseOther
	}
	return e
}

// String says why the card ended, for a person.
func (e End) String() string {
	switch e.Cause {
	case CauseWithdrawn:
		return "withdrawn by the proposer"
	case CauseDeadline:
		return "the deadline passed"
	case CauseDecided:
		if e.Approved {
			if n := Approvals(e.By); n > 0 {
				return "decided by other approvers: approved (" + joinAnswers(e.By, PeerApproved) + ")"
			}
			return "decided by other approvers: approved"
		}
		if against := joinAnswers(e.By, PeerDeclined, PeerDismissed); against != "" {
			return "decided by another approver: not approved (" + against + ")"
		}
		return "decided by another approver: not approved"
	case CauseAnswered:
		return "the proposal was answered by someone else"
	case CauseCancelled:
		return "cancelled by the operator"
	case CauseFulfillerLeft:
		return "the fulfiller left the space; the card comes back if it asks again"
	case CauseReasked:
		return "asked again by another fulfiller of the group; the new card follows"
	case CauseShutdown:
		return "the fulfiller is shutting down"
	case CauseIncapable:
		return "too few approvers are left to decide it"
	case CauseContested:
		return ContestedText
	case CauseDisplaced:
		return DisplacedText
	}
	switch e.Reason {
	case "":
		return "ended by the fulfiller"
	case "other":
		return "ended by the fulfiller: another approver dismissed it, or the fulfiller is stopping"
	}
	return "ended by the fulfiller (" + e.Reason + ")"
}

// DisplacedText says, for a person, why a card was dropped unanswered.
const DisplacedText = "dropped: more prompts came at once than this client holds, and this one was the oldest (nothing was sent; the fulfiller still waits for an answer). Someone may be flooding you with forged prompts: tell the operator"

// ContestedText says, for a person, why a contested card cannot be
// answered and what to do.
const ContestedText = "contested: someone else sent a different prompt under this id, so this card may not show what the fulfiller asks; it cannot be answered here (nothing was sent). Ask the operator"

// Outcome is what became of a proposal after this approver approved it:
// fulfilled (the fulfiller sent the call to the tool's owner), or rejected
// with the reject's reason and the fulfiller's explanation.
type Outcome struct {
	Fulfilled bool
	Target    string // fulfilled: the participant the call was sent to
	Reason    string // rejected: the mcp/reject reason (policy, disagree, timeout, …)
	Message   string // rejected: the explanation the fulfiller sent the proposer ("" if none)
}

// String says what became of the proposal, for a person.
func (o Outcome) String() string {
	if o.Fulfilled {
		if o.Target != "" {
			return "fulfilled: the call was sent to " + printable.String(o.Target)
		}
		return "fulfilled"
	}
	s := "rejected (" + printable.String(o.Reason) + ")"
	if o.Reason == "policy" {
		s = "rejected by the policy"
	}
	if o.Message != "" {
		s += ": " + printable.String(o.Message)
	}
	return s
}

// SubscribeOptions is the subscription a Client's Run must be fed from:
// requests to the approver (cards, cancellations), and, because the
// gateway broadcasts everything, the fulfiller's fulfilments, rejects and
// their explanations (the outcome of an approval), and presence (the
// fulfiller leaving and coming back).
func SubscribeOptions() agent.SubscribeOptions {
	return agent.SubscribeOptions{
		Kinds: []string{agent.KindRequest, agent.KindResponse, agent.KindReject, agent.KindChat, agent.KindPresence},
		All:   true,
	}
}

// String names the kind, as in logs and tests.
func (k EventKind) String() string {
	switch k {
	case EventEnded:
		return "ended"
	case EventSent:
		return "sent"
	case EventOutcome:
		return "outcome"
	case EventFulfillerLeft:
		return "fulfiller_left"
	case EventFulfillerJoined:
		return "fulfiller_joined"
	case EventFulfillerAbsent:
		return "fulfiller_absent"
	case EventPeers:
		return "peers"
	case EventRefused:
		return "refused"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// joinAnswers says the answers of the given actions, in order.
func joinAnswers(answers []PeerAnswer, actions ...string) string {
	var parts []string
	for _, a := range answers {
		if slices.Contains(actions, a.Action) {
			parts = append(parts, a.String())
		}
	}
	return strings.Join(parts, "; ")
}
