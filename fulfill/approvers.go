package fulfill

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/mewkit/fulfiller/agent"
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
