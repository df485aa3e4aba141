package notify

import (
	"encoding/json"
	"net/url"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
)

// Type names what an event announces.
type Type string

// The event types. Reminder and Escalated come from a decision's
// reminders and escalate_to (docs/design.md, "Reaching approvers").
const (
	PromptOpened    Type = "prompt.opened"
	PromptReminder  Type = "prompt.reminder"
	PromptEscalated Type = "prompt.escalated"
	PromptEnded     Type = "prompt.ended"
)

// Event is what every target is told, and exactly the JSON body a webhook
// receives (docs/operations.md, "Notifications": the schema). It never
// carries the call's arguments unless the decision said
// "notify_arguments": true.
type Event struct {
	Type     Type      `json:"type"`
	Time     time.Time `json:"time"`
	Space    string    `json:"space,omitempty"`
	Proposal string    `json:"proposal"`
	Proposer string    `json:"proposer"`
	Method   string    `json:"method"`
	Tool     string    `json:"tool,omitempty"`
	Server   string    `json:"server"`
	// Digest is the call digest's first 12 hex digits, the ones the
	// approver's card shows to compare.
	Digest    string    `json:"digest"`
	Approvers []string  `json:"approvers"`
	Quorum    int       `json:"quorum"`
	Deadline  time.Time `json:"deadline"`
	Resumed   bool      `json:"resumed,omitempty"`
	// URL opens the inbox page at the card (--inbox-url): a plain page
	// link that answers nothing by being fetched.
	URL string `json:"url,omitempty"`
	// Outcome (prompt.ended): approved, cancelled, or the reject reason
	// (disagree, timeout, incapable, other, …); Reason says why when
	// there is more to say.
	Outcome   string          `json:"outcome,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// eventOf turns an escalation's event into a notification; ok is false
// for the other events, which are about one approver each.
func eventOf(e elicit.Event, space, inbox string) (Event, bool) {
	var typ Type
	switch e.Kind {
	case elicit.EventOpened:
		typ = PromptOpened
	case elicit.EventReminded:
		typ = PromptReminder
	case elicit.EventEscalated:
		typ = PromptEscalated
	case elicit.EventEnded:
		typ = PromptEnded
	default:
		return Event{}, false
	}
	p := e.Prompt
	if p == nil {
		return Event{}, false
	}
	ev := Event{Type: typ, Time: e.Time.UTC(), Space: space, Proposal: e.ProposalID, Proposer: p.Proposer, Method: p.Method, Tool: p.Tool, Server: p.Target,
		Digest: approval.ShortDigest(p.Digest), Approvers: append([]string{}, p.Asked...), Quorum: p.Quorum, Deadline: p.Deadline.UTC(), Resumed: p.Resumed,
		URL: cardURL(inbox, e.ProposalID), Arguments: p.Arguments}
	if typ == PromptEnded {
		ev.Outcome, ev.Reason = e.Outcome, e.Reason
	}
	return ev, true
}

// cardURL is the inbox page with the card's proposal id in the fragment:
// a fragment never reaches a server, so a mail scanner or a chat
// unfurler that fetches the link fetches the page and nothing else.
func cardURL(inbox, proposal string) string {
	if inbox == "" {
		return ""
	}
	return inbox + "#proposal=" + url.QueryEscape(proposal)
}
