package teaminbox

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/printable"
)

// keepEnded is how many ended cards an approver's page still shows.
const keepEnded = 20

// UI is one approver's face for their approver.Client: it holds the cards
// addressed to that approver until the page answers them.
type UI struct {
	approver string

	mu    sync.Mutex
	cards map[string]*entry // by elicitation envelope id
	order []string          // arrival order
}

type entry struct {
	card    *approver.Card
	answer  chan approver.Answer // buffered 1; nil once ended
	state   string               // open, sent, ended
	status  string               // why it ended, what was sent, the outcome
	cause   approver.Cause       // ended: why (contested is a warning)
	peers   []approver.PeerAnswer
	outcome string
}

// Ask shows the card on the approver's page and waits for their answer.
func (u *UI) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	ch := make(chan approver.Answer, 1)
	u.mu.Lock()
	if _, ok := u.cards[c.RequestID]; !ok {
		u.order = append(u.order, c.RequestID)
	}
	u.cards[c.RequestID] = &entry{card: c, answer: ch, state: "open"}
	u.trim()
	u.mu.Unlock()
	select {
	case a := <-ch:
		return a, nil
	case <-ctx.Done():
		u.mu.Lock()
		if e := u.cards[c.RequestID]; e != nil && e.state == "open" {
			e.state, e.answer = "ended", nil
		}
		u.mu.Unlock()
		return approver.Answer{}, ctx.Err()
	}
}

// Notify records what happened to a card, for the page.
func (u *UI) Notify(ev approver.Event) {
	if ev.Card == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	e := u.cards[ev.Card.RequestID]
	if e == nil {
		return
	}
	switch ev.Kind {
	case approver.EventEnded:
		e.state, e.answer, e.status, e.cause = "ended", nil, ev.End.String(), ev.End.Cause
		if len(ev.End.By) > 0 {
			e.peers = ev.End.By
		}
	case approver.EventPeers:
		e.peers = ev.Peers
	case approver.EventSent:
		if ev.Err != nil {
			e.status = "not sent: " + ev.Err.Error()
		} else {
			e.state, e.status = "sent", "you "+ev.Answer.Describe()
		}
	case approver.EventOutcome:
		e.outcome = ev.Outcome.String()
	}
}

// open returns the card if it is open and addressed to this approver.
func (u *UI) open(requestID string) *approver.Card {
	u.mu.Lock()
	defer u.mu.Unlock()
	if e := u.cards[requestID]; e != nil && e.state == "open" && e.answer != nil {
		return e.card
	}
	return nil
}

// deliver hands the answer to the waiting Ask, once.
func (u *UI) deliver(requestID string, a approver.Answer) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	e := u.cards[requestID]
	if e == nil || e.state != "open" || e.answer == nil {
		return false
	}
	e.answer <- a
	e.answer, e.state, e.status = nil, "sent", "sending: you "+a.Describe()
	return true
}

// trim forgets the oldest ended cards beyond keepEnded.
func (u *UI) trim() {
	ended := 0
	for i := len(u.order) - 1; i >= 0; i-- {
		id := u.order[i]
		if e := u.cards[id]; e != nil && e.state != "open" {
			ended++
			if ended > keepEnded {
				delete(u.cards, id)
				u.order = append(u.order[:i], u.order[i+1:]...)
			}
		}
	}
}

// cardView is a card as the page gets it: what approve --web's card
// shows (elicit/inbox's View), for a page that answers with a passkey.
// Everything in it is shown as text, never HTML, and every text others
// wrote (proposer, tool owner, policy, the other approvers) went through
// printable: control, bidirectional and invisible characters are
// escaped, as approve --web and the terminal card show them, so that the
// page never reads one call while another runs.
type cardView struct {
	Request     string       `json:"request"`
	Proposal    string       `json:"proposal"`
	State       string       `json:"state"`
	Summary     string       `json:"summary"`
	Message     string       `json:"message"`
	Fulfiller   string       `json:"fulfiller"` // who asks
	Proposer    string       `json:"proposer"`
	Tool        string       `json:"tool"`
	Server      string       `json:"server"`
	Description string       `json:"description"` // the tool's, as its owner lists it
	Annotations []annotation `json:"annotations"`
	PolicyMsg   string       `json:"policy_message"`
	Approvers   []string     `json:"approvers"`
	DelegatedBy []string     `json:"delegated_by"`
	Revision    string       `json:"revision"`
	Arguments   string       `json:"arguments"` // indented JSON
	Digest      string       `json:"digest"`
	DigestOK    bool         `json:"digest_ok"`
	Quorum      int          `json:"quorum"`
	Progress    string       `json:"progress"`
	Peers       []string     `json:"peers"`
	Status      string       `json:"status"`
	Cause       string       `json:"cause"` // ended: approver.Cause
	Outcome     string       `json:"outcome"`
	Deadline    string       `json:"deadline"`
	// DeadlineBy is "proposer" when the deadline is the proposer's own:
	// it stops waiting then.
	DeadlineBy string `json:"deadline_by"`
	// What the approver may answer besides Approve and Decline: the
	// editable arguments, the approvers the card may be handed to, and
	// the grant offered with an approval (nil: none). Fields' names,
	// delegates and grant offers are sent back as chosen, so kept exact
	// (the server checks each against the card).
	Fields         []fieldView `json:"fields"`
	Delegates      []string    `json:"delegates"`
	DelegateLabels []string    `json:"delegate_labels"` // Delegates, escaped to be shown
	Grant          *grantView  `json:"grant"`
}

// grantView is the grant a card offers with an approval (docs/design.md
// "Grants").
type grantView struct {
	Offers      []string `json:"offers"`       // sent back: exact
	OfferLabels []string `json:"offer_labels"` // shown: escaped
	Terms       string   `json:"terms"`        // what a grant would allow, in words
	MaxTTL      string   `json:"max_ttl"`
}

// annotation is one of the tool's annotations (readOnlyHint, …).
type annotation struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// fieldView is an editable argument; Default is the proposed value.
type fieldView struct {
	Name        string          `json:"name"`  // sent back: exact
	Label       string          `json:"label"` // shown: escaped
	Type        string          `json:"type"`
	Description string          `json:"description,omitempty"`
	Enum        []string        `json:"enum,omitempty"`        // sent back: exact
	EnumLabels  []string        `json:"enum_labels,omitempty"` // shown: escaped
	Default     json.RawMessage `json:"default,omitempty"`
}

func (u *UI) view() []cardView {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := []cardView{}
	for _, id := range u.order {
		if e := u.cards[id]; e != nil {
			out = append(out, e.view())
		}
	}
	return out
}

// view is the entry as the page gets it; u.mu must be held.
func (e *entry) view() cardView {
	p := printable.String
	c := e.card
	v := cardView{Request: c.RequestID, State: e.state, Summary: p(c.Summary()), Message: p(c.Message), Fulfiller: p(c.From),
		Arguments: arguments(c.Arguments()), DigestOK: c.DigestOK, Quorum: c.Policy.Quorum, PolicyMsg: p(c.Policy.Message),
		Status: p(e.status), Cause: string(e.cause), Outcome: p(e.outcome),
		Peers: []string{}, Approvers: []string{}, DelegatedBy: []string{}, Annotations: []annotation{}, Fields: []fieldView{},
		Delegates: []string{}, DelegateLabels: []string{}}
	if pr := c.Proposal; pr != nil {
		v.Proposal, v.Proposer, v.Digest, v.Revision = p(pr.ID), p(pr.From), pr.Digest, p(pr.Revision)
		if pr.DeadlineByProposer {
			v.DeadlineBy = "proposer"
		}
	}
	if t := c.Tool; t != nil {
		v.Tool, v.Server, v.Description = p(t.Name), p(t.Server), p(t.Description)
		v.Annotations = annotations(t.Annotations)
	}
	if v.Server == "" {
		v.Server = p(c.Target)
	}
	if d := c.Deadline(); !d.IsZero() {
		v.Deadline = d.UTC().Format("2006-01-02T15:04:05Z")
	}
	for _, a := range c.Policy.Approvers {
		v.Approvers = append(v.Approvers, p(a))
	}
	for _, a := range c.DelegatedBy {
		v.DelegatedBy = append(v.DelegatedBy, p(a))
	}
	v.Delegates = append(v.Delegates, c.Delegates...)
	v.DelegateLabels = append(v.DelegateLabels, escapeAll(c.Delegates)...)
	if g := c.Grant; g != nil {
		v.Grant = &grantView{Offers: g.Offers, OfferLabels: escapeAll(g.Offers), Terms: p(g.Terms), MaxTTL: p(g.MaxTTL)}
	}
	for _, f := range c.Fields {
		v.Fields = append(v.Fields, fieldView{Name: f.Name, Label: p(f.Name), Type: f.Type, Description: p(f.Description), Enum: f.Enum, EnumLabels: escapeAll(f.Enum), Default: f.Default})
	}
	for _, peer := range e.peers {
		v.Peers = append(v.Peers, p(peer.String()))
	}
	if len(e.peers) > 0 {
		v.Progress = p(approver.Progress(c, e.peers))
	}
	return v
}

// escapeAll is texts, each through printable.String, to be shown.
func escapeAll(texts []string) []string {
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = printable.String(t)
	}
	return out
}

// annotations lists a tool's annotations, in their order, as words.
func annotations(raw json.RawMessage) []annotation {
	out := []annotation{}
	if len(raw) == 0 {
		return out
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return out
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return out
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return out
		}
		name, _ := k.(string)
		out = append(out, annotation{Name: printable.String(name), Value: printable.String(string(v))})
	}
	return out
}

// arguments lays the call's arguments out for reading, as the proposal
// wrote them (never re-encoded), escaped line by line: the indentation's
// newlines are the page's, a newline inside a value is already \n in JSON.
func arguments(args json.RawMessage) string {
	if len(args) == 0 {
		return ""
	}
	var b bytes.Buffer
	text := string(args)
	if json.Indent(&b, args, "", "  ") == nil {
		text = b.String()
	}
	return printable.Lines(text)
}
