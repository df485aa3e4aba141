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
		e.state, e.answer, e.status = "ended", nil, ev.End.String()
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

// cardView is a card as the page gets it. Everything in it is shown as
// text, never HTML, and every text others wrote (proposer, tool owner,
// policy, the other approvers) went through printable: control,
// bidirectional and invisible characters are escaped, as approve --web
// and the terminal card show them, so that the page never reads one call
// while another runs.
type cardView struct {
	Request   string   `json:"request"`
	Proposal  string   `json:"proposal"`
	State     string   `json:"state"`
	Summary   string   `json:"summary"`
	Message   string   `json:"message"`
	Arguments string   `json:"arguments"` // indented JSON
	Digest    string   `json:"digest"`
	DigestOK  bool     `json:"digest_ok"`
	Quorum    int      `json:"quorum"`
	Progress  string   `json:"progress"`
	Peers     []string `json:"peers"`
	Status    string   `json:"status"`
	Outcome   string   `json:"outcome"`
	Deadline  string   `json:"deadline"`
}

func (u *UI) view() []cardView {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := printable.String
	out := []cardView{}
	for _, id := range u.order {
		e := u.cards[id]
		if e == nil {
			continue
		}
		c := e.card
		v := cardView{Request: c.RequestID, State: e.state, Summary: p(c.Summary()), Message: p(c.Message),
			Arguments: arguments(c.Arguments()), DigestOK: c.DigestOK, Quorum: c.Policy.Quorum,
			Status: p(e.status), Outcome: p(e.outcome), Peers: []string{}}
		if c.Proposal != nil {
			v.Proposal, v.Digest = p(c.Proposal.ID), c.Proposal.Digest
		}
		if d := c.Deadline(); !d.IsZero() {
			v.Deadline = d.UTC().Format("2006-01-02T15:04:05Z")
		}
		for _, peer := range e.peers {
			v.Peers = append(v.Peers, p(peer.String()))
		}
		if len(e.peers) > 0 {
			v.Progress = p(approver.Progress(c, e.peers))
		}
		out = append(out, v)
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
