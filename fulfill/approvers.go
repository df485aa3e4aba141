package fulfill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// Approvals runs the humans' escalation in the lifecycle core itself
// (Config.Approvals): the core asks, counts, delegates, reminds and
// escalates to tiers as Step logic, and the shell is only its channel to
// the approvers: it writes the prompts the Codec made and their
// cancellations, hands the core the answers, the roster and the key set
// in force, reports each step with the humans (Observer), and makes the
// grants approvers chose.
type Approvals struct {
	// Codec builds the prompts and reads the answers (elicit.Codec). One
	// that has WithContext is given what the record does not hold of a
	// proposal: its tool, the tool's input schema, and whether its
	// deadline is the proposer's own.
	Codec lifecycle.Codec
	// Keys is the approver key set in force at start (nil: nobody is
	// keyed); Fulfiller.KeysChanged replaces it. CurrentKeys, when set,
	// is the set in force now (a keys file reloaded while the fulfiller
	// runs): read at start and before each answer is handed to the
	// core, which verifies the answer under it.
	Keys        lifecycle.KeySet
	CurrentKeys func() lifecycle.KeySet
	// OfferGrants lets a grantable escalation of quorum 1 offer grants.
	OfferGrants bool
	// Observer, when set, is told each step with the humans (the
	// decision log's, metrics' and notifications' view). It is called on
	// the proposal's lane and must be quick.
	Observer func(lifecycle.Human)
}

// contextual is a Codec that takes the shell's view of a proposal.
type contextual interface {
	WithContext(func(*lifecycle.Proposal) (*policies.Tool, json.RawMessage, bool)) lifecycle.Codec
}

// codecOf is cfg's codec, given the shell's view of a proposal (describe)
// when it takes it.
func codecOf(a *Approvals, describe func(*lifecycle.Proposal) (*policies.Tool, json.RawMessage, bool)) lifecycle.Codec {
	if c, ok := a.Codec.(contextual); ok {
		return c.WithContext(describe)
	}
	return a.Codec
}

// promptContext is what a prompt of p shows beside the record: its tool
// and input schema (describe), and whether its deadline is the
// proposer's hint (the stored decision says).
func (s *Fulfiller) promptContext(p *lifecycle.Proposal) (*policies.Tool, json.RawMessage, bool) {
	sd, _ := policyDecision(p.Decision)
	tool, schema := s.describe(p)
	return tool, schema, sd.DeadlineByProposer
}

// KeysChanged tells the core the approver key set now in force (the keys
// file was reloaded): answers read from now on are verified under it.
func (s *Fulfiller) KeysChanged(keys lifecycle.KeySet) {
	s.post(lifecycle.KeysChanged{Keys: keys})
}

// SendPrompt writes a prompt of the core's escalation: its recorded
// elicitation/create payload, to its approver, under its envelope id.
func (w *wire) SendPrompt(ctx context.Context, p lifecycle.SendPrompt) error {
	env := agent.Envelope{ID: p.EnvelopeID, To: []string{p.To}, Kind: agent.KindRequest, Payload: p.Payload}
	if err := w.send(ctx, env); err != nil {
		if p.Again {
			// The first copy may still have arrived: the prompt stays open.
			w.log.Warn("elicitation not sent again", "approver", p.To, "request", p.EnvelopeID, "err", err)
		} else {
			w.log.Error("elicitation not sent", "approver", p.To, "request", p.EnvelopeID, "err", err)
		}
		return err
	}
	return nil
}

// cancelPrompts tells each approver of c's open prompts that it is no
// longer needed (notifications/cancelled, kept across an outage), none
// for DropReason: another member asks the same prompts now.
func (w *wire) cancelPrompts(ctx context.Context, c lifecycle.CancelAsk) {
	if c.Reason == lifecycle.DropReason {
		return
	}
	for _, pr := range c.Prompts {
		payload := mustJSON(struct {
			JSONRPC string `json:"jsonrpc"`
			Method  string `json:"method"`
			Params  struct {
				RequestID int64  `json:"requestId"`
				Reason    string `json:"reason"`
			} `json:"params"`
		}{JSONRPC: "2.0", Method: agent.MethodCancelled, Params: struct {
			RequestID int64  `json:"requestId"`
			Reason    string `json:"reason"`
		}{pr.RPCID, c.Reason}})
		env := agent.Envelope{To: []string{pr.Approver}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{pr.EnvelopeID}, Payload: payload}
		_ = w.sendOrQueue(ctx, env, "cancellation of a prompt", "approver", pr.Approver, "request", pr.EnvelopeID)
	}
}

// mustJSON is json.Marshal for values that always marshal.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Human reports a step with the humans to the Approvals' Observer, on
// the proposal's lane: in its order with the proposal's decision-log
// lines. A reminder or tier that will not happen is only logged.
func (w *wire) Human(_ context.Context, h lifecycle.Human) {
	if h.Kind == lifecycle.HumanStepDropped {
		w.log.Warn(h.Reason, "proposal", h.ID, "after", h.After)
		return
	}
	w.logHuman(h)
	if w.approvals != nil && w.approvals.Observer != nil {
		w.approvals.Observer(h)
	}
}

// logHuman logs a step with the humans, in the words operators' log
// searches know (never an answer's content or signature).
func (w *wire) logHuman(h lifecycle.Human) {
	switch h.Kind {
	case lifecycle.HumanSkipped:
		w.log.Info("approver not asked", "proposal", h.ID, "approver", h.Approver, "reason", h.Reason)
	case lifecycle.HumanAsked:
		w.log.Info("asked approver", "proposal", h.ID, "approver", h.Approver, "request", h.RequestID)
	case lifecycle.HumanAskedAgain:
		w.log.Info("asked approver again after a reconnect", "proposal", h.ID, "approver", h.Approver, "request", h.RequestID)
	case lifecycle.HumanAnswered:
		w.log.Info("approver answered", "proposal", h.ID, "approver", h.Approver, "request", h.RequestID, "action", h.Action, "approve", h.Approve)
	case lifecycle.HumanDelegated:
		w.log.Info("approver delegated", "proposal", h.ID, "approver", h.Approver, "to", h.To)
	case lifecycle.HumanIgnored:
		switch {
		case h.From != h.Approver && h.Reason == "not addressed to "+h.From:
			w.log.Warn("answer to an elicitation from a participant it was not sent to; ignored",
				"proposal", h.ID, "request", h.RequestID, "approver", h.Approver, "from", h.From)
		case h.Reason == "already answered":
			w.log.Info("second answer to an elicitation ignored", "proposal", h.ID, "request", h.RequestID, "approver", h.From)
		default:
			w.log.Warn("answer ignored: "+h.Reason, "proposal", h.ID, "approver", h.Approver, "request", h.RequestID)
		}
	case lifecycle.HumanForgery:
		w.log.Warn("forgery attempt: answer for a keyed approver is unsigned or badly signed; ignored",
			"proposal", h.ID, "approver", h.Approver, "request", h.RequestID, "from", h.From, "action", h.Action, "err", h.Reason)
	case lifecycle.HumanReminded:
		w.log.Info("reminder: the prompt is still open", "proposal", h.ID)
	case lifecycle.HumanEscalated:
		w.log.Info("escalated", "proposal", h.ID)
	}
}

// CreateGrant makes the grant an approver chose, pinned to the call just
// committed. Its id is the proposal's (in its space), so a restart that
// makes it again finds it made. One that cannot be made is reported,
// and the approval stands.
func (w *wire) CreateGrant(ctx context.Context, g lifecycle.CreateGrant) {
	if w.grants == nil {
		return
	}
	ev := Event{Stage: StageGranted, ProposalID: g.ID, DecisionID: g.DecisionID, Revision: g.Revision,
		Proposer: g.Proposer, Method: g.Method, Tool: g.Tool, Target: g.Target, By: []string{g.Approver}}
	name, args := toolCall(g.Params)
	call := grantCall(g.Proposer, &policies.Tool{Name: name, Server: g.Target, Arguments: args})
	sum := sha256.Sum256([]byte(w.cfg.SpaceID + "\x00" + g.ID))
	id := "grant-" + hex.EncodeToString(sum[:8])
	gr, err := grants.New(id, g.Grantable, call, g.Duration, g.Approver, time.Now().UTC())
	if err == nil {
		if g.Signature != "" {
			digest, _ := approval.CallDigest(g.Method, g.Proposed)
			gr.Evidence = &grants.Evidence{Request: g.Request, Digest: digest, Action: approval.ActionAccept, Content: g.Content, Signature: g.Signature}
		}
		sctx, cancel := context.WithTimeout(ctx, storeTimeout)
		err = w.grants.Create(sctx, gr)
		cancel()
	}
	if err != nil {
		w.log.Warn("grant not made; the approval stands", "proposal", g.ID, "by", g.Approver, "err", err)
		ev.Message = fmt.Sprintf("no grant made: %v", err)
		w.observe(ev)
		return
	}
	w.log.Info("grant made", "grant", gr.ID, "proposal", g.ID, "by", g.Approver, "proposer", gr.Proposer, "tool", gr.Tool, "expires", gr.Expires)
	ev.GrantID, ev.Message = gr.ID, fmt.Sprintf("%s allowed for %s, until %s", gr.Terms(), decision.FormatGrantDuration(g.Duration), gr.Expires.Format(time.RFC3339))
	w.observe(ev)
}

// answerOf is the core's Answer for an mcp/response correlated to cid:
// the JSON-RPC id it carries, if any (rule 12; one that is no integer
// matches no prompt).
func answerOf(cid string, env agent.Envelope) lifecycle.Answer {
	a := lifecycle.Answer{PromptID: cid, From: env.From, Payload: env.Payload}
	var head struct {
		ID json.RawMessage `json:"id"`
	}
	if agent.Unmarshal(env.Payload, &head) == nil && len(head.ID) > 0 && string(head.ID) != "null" {
		a.HasRPCID = true
		n, err := strconv.ParseInt(string(head.ID), 10, 64)
		if err != nil {
			n = -1
		}
		a.RPCID = n
	}
	return a
}
