package approver

import (
	"fmt"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/printable"
)

// PeerAnswer is another approver's answer to a proposal this approver is
// also asked about, as the space showed it: the gateway broadcasts every
// prompt and every answer, so each approver can see how a quorum stands
// and who ended a card. It is what the envelopes claim (the gateway does
// not authenticate from): the fulfiller, which checks signatures, decides;
// this only tells the person.
type PeerAnswer struct {
	Approver string
	// Action is what they did: approved, declined, dismissed, or
	// delegated (to DelegateTo).
	Action     string
	Reason     string
	DelegateTo string
}

// Actions of a PeerAnswer.
const (
	PeerApproved  = "approved"
	PeerDeclined  = "declined"
	PeerDismissed = "dismissed"
	PeerDelegated = "delegated"
)

// String says it for a person: "oncall-bob declined: frozen". What came
// from the space is made printable: it may hold terminal escapes.
func (p PeerAnswer) String() string {
	s := printable.String(p.Approver) + " " + p.Action
	if p.Action == PeerDelegated && p.DelegateTo != "" {
		s += " to " + printable.String(p.DelegateTo)
	}
	if p.Reason != "" {
		s += ": " + printable.String(p.Reason)
	}
	return s
}

// Progress says how the others stand on a card's proposal, for a person:
// "1 of 2 approvals: oncall-bob approved".
func Progress(card *Card, answers []PeerAnswer) string {
	var parts []string
	for _, a := range answers {
		parts = append(parts, a.String())
	}
	s := strings.Join(parts, "; ")
	if q := card.Policy.Quorum; q > 1 {
		s = fmt.Sprintf("%d of %d approvals so far: %s", Approvals(answers), q, s)
	}
	return s
}

// Approvals counts the approvals among answers.
func Approvals(answers []PeerAnswer) int {
	n := 0
	for _, a := range answers {
		if a.Action == PeerApproved {
			n++
		}
	}
	return n
}

// peerPrompt is a prompt a fulfiller sent another approver.
type peerPrompt struct {
	approver, proposal string
}

// peerRecords is how many prompts and proposals of other approvers are
// remembered: enough for every prompt open at once in a busy space.
const peerRecords = 4096

// peers remembers the prompts listed fulfillers sent to other approvers
// and their answers. It is used by Run's goroutine only.
type peers struct {
	prompts *lru.Cache[string, peerPrompt]   // elicitation envelope id → whom it asked, about which proposal
	answers *lru.Cache[string, []PeerAnswer] // proposal id → the answers seen, in order
}

func newPeers() *peers {
	p := &peers{}
	p.prompts, _ = lru.New[string, peerPrompt](peerRecords)
	p.answers, _ = lru.New[string, []PeerAnswer](peerRecords)
	return p
}

// prompt records an elicitation/create a listed fulfiller sent to one
// other approver.
func (p *peers) prompt(env agent.Envelope, req agent.RPCRequest) {
	if len(env.To) != 1 || req.Method != agent.MethodElicitationCreate {
		return
	}
	var params struct {
		Meta struct {
			Proposal struct {
				ID string `json:"id"`
			} `json:"proposal"`
		} `json:"_meta"`
	}
	if agent.Unmarshal(req.Params, &params) != nil || params.Meta.Proposal.ID == "" {
		return
	}
	p.prompts.Add(env.ID, peerPrompt{approver: env.To[0], proposal: params.Meta.Proposal.ID})
}

// answer records an answer to a prompt recorded before, from the approver
// it asked; it returns the proposal it is about.
func (p *peers) answer(env agent.Envelope) (proposal string, ok bool) {
	pr, ok := p.prompts.Peek(env.CorrelationID.First())
	if !ok || env.From != pr.approver {
		return "", false
	}
	var resp struct {
		Result *struct {
			Action  string `json:"action"`
			Content struct {
				Approve    *bool  `json:"approve"`
				Reason     string `json:"reason"`
				DelegateTo string `json:"delegate_to"`
			} `json:"content"`
		} `json:"result"`
	}
	if agent.Unmarshal(env.Payload, &resp) != nil || resp.Result == nil {
		return "", false
	}
	r := resp.Result
	a := PeerAnswer{Approver: pr.approver, Reason: clipReason(r.Content.Reason)}
	switch {
	case r.Action == "cancel":
		a.Action = PeerDismissed
	case r.Action == "accept" && r.Content.DelegateTo != "":
		a.Action, a.DelegateTo = PeerDelegated, r.Content.DelegateTo
	case r.Action == "accept" && r.Content.Approve != nil && *r.Content.Approve:
		a.Action = PeerApproved
	case r.Action == "accept", r.Action == "decline":
		a.Action = PeerDeclined
	default:
		return "", false
	}
	p.prompts.Remove(env.CorrelationID.First()) // one answer per prompt
	list, _ := p.answers.Get(pr.proposal)
	p.answers.Add(pr.proposal, append(list, a))
	return pr.proposal, true
}

// of returns the answers seen about proposal, oldest first.
func (p *peers) of(proposal string) []PeerAnswer {
	list, _ := p.answers.Peek(proposal)
	return append([]PeerAnswer(nil), list...)
}

// clipReason keeps a peer's reason to one line a card can show.
func clipReason(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		cut := 200
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
