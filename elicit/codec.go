package elicit

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// Codec is elicit's lifecycle.Codec: it builds the elicitation/create
// payload of a prompt of the core's escalation (the message,
// requestedSchema and _meta an approver's client shows, signed with
// PromptKey when set) and reads an approver's answer to one, verified
// under the approver key set in force. It is pure: it holds no state
// between calls, starts nothing and sends nothing.
type Codec struct {
	// Signer is the participant id the prompt signature names (the
	// fulfiller's own), PromptKey its key (nil: prompts are not signed).
	Signer    string
	PromptKey ed25519.PrivateKey
	// Context is what the record does not hold of a proposal and the
	// prompt shows: the tool (its catalog entry, for _meta.tool), the
	// tool's input schema (it types the editable fields), and whether
	// the deadline is the proposer's own hint. Nil: none of them.
	Context func(p *lifecycle.Proposal) (tool *policies.Tool, inputSchema json.RawMessage, deadlineByProposer bool)
	Logger  *slog.Logger // [discard]
}

var _ lifecycle.Codec = Codec{}

// escalation is what an approver is shown of a proposal: the form
// builders (form.go) read it.
type escalation struct {
	ID, From string // the proposal's id and its proposer
	Method   string
	Params   json.RawMessage
	Tool     *policies.Tool // nil when the method is not tools/call
	// InputSchema is the tool's JSON Schema from its owner's tools/list,
	// when known: it types the fields an approver may edit.
	InputSchema json.RawMessage
	Target      string // who will carry the call out
	Decision    decision.Decision
	Deadline    time.Time
	// DeadlineByProposer: the proposal's own deadline hint, sooner than
	// the policy's timeout, set Deadline (the approver is told: the
	// proposer stops waiting then).
	DeadlineByProposer bool
}

// escalation is what a prompt of p shows.
func (c Codec) escalation(p *lifecycle.Proposal) escalation {
	esc := escalation{ID: p.ID, From: p.From, Method: p.Method, Params: p.Params, Deadline: p.Deadline}
	if d := p.Decision; d != nil {
		esc.Target = d.Target
		esc.Decision = decision.Decision{Action: decision.Escalate, Message: d.Message, Approvers: d.Approvers, Quorum: d.Quorum,
			Timeout: d.Timeout, Editable: d.Editable, Grantable: d.Grantable, NotifyArguments: d.NotifyArguments,
			Reminders: d.Reminders, EscalateTo: d.EscalateTo, Revision: d.Revision}
	}
	if c.Context != nil {
		esc.Tool, esc.InputSchema, esc.DeadlineByProposer = c.Context(p)
	}
	return esc
}

func (c Codec) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// form reads what every prompt of p shares: its call, digest and
// editable fields.
func (c Codec) form(esc escalation) (call, string, []field, error) {
	digest, err := approval.CallDigest(esc.Method, esc.Params)
	if err != nil {
		return call{}, "", nil, fmt.Errorf("the call cannot be shown to an approver: %w", err)
	}
	cl := parseCall(esc.Method, esc.Params)
	return cl, digest, editableFields(cl, esc.InputSchema, esc.Decision.Editable, c.logger()), nil
}

// Prompt is the elicitation/create payload asking spec.Approver about p.
func (c Codec) Prompt(p *lifecycle.Proposal, spec lifecycle.PromptSpec) (json.RawMessage, error) {
	esc := c.escalation(p)
	cl, digest, fields, err := c.form(esc)
	if err != nil {
		return nil, err
	}
	m := meta(esc, digest, spec.Quorum, spec.Approvers, fields, spec.Chain)
	if g := esc.Decision.Grantable; g != nil && len(spec.Grants) > 0 {
		scope := make([]string, len(g.Scope))
		for i, f := range g.Scope {
			scope[i] = f.String()
		}
		m.add("grant", object{{"max_ttl", decision.FormatGrantDuration(g.MaxTTL)}, {"scope", scope}, {"offers", spec.Grants}})
	}
	params := object{
		{"message", message(esc, cl, digest, spec.Quorum, spec.Chain)},
		{"requestedSchema", schema(fields, spec.Delegates, spec.Grants)},
		{"_meta", m},
	}
	if c.PromptKey != nil {
		sig, err := approval.SignPrompt(c.PromptKey, spec.EnvelopeID, mustMarshal(spec.RPCID), spec.Approver, digest, mustMarshal(params))
		if err != nil {
			return nil, fmt.Errorf("the request to %s could not be signed: %w", spec.Approver, err)
		}
		m.add(approval.MetaPromptSignature, object{{"signer", c.Signer}, {"signature", sig}})
		params[2].value = m
	}
	payload := object{{"jsonrpc", "2.0"}, {"id", spec.RPCID}, {"method", agent.MethodElicitationCreate}, {"params", params}}
	return marshal(payload)
}

// keysOf is the approver key set keys stands for (none: nobody keyed).
func keysOf(keys lifecycle.KeySet) approval.ApproverKeys {
	if k, ok := keys.(approval.ApproverKeys); ok {
		return k
	}
	return approval.ApproverKeys{}
}

// Read verifies an answer to prompt pr of p under keys (the set in force
// now: a replaced key verifies nothing, an approver keyed since must
// sign) and reads its form.
func (c Codec) Read(p *lifecycle.Proposal, pr lifecycle.Prompt, payload json.RawMessage, keys lifecycle.KeySet) lifecycle.Verified {
	verify := verifier(keysOf(keys), pr.Approver)
	a := parseAnswer(payload)
	if a.outcome == outcomeIgnored {
		return lifecycle.Verified{Why: a.why}
	}
	if verify == nil && pr.Signed {
		// Fail closed: the prompt asked for a signed answer, and the key
		// that would verify it was removed since.
		return lifecycle.Verified{Why: pr.Approver + "'s key was removed after they were asked: the answer cannot be verified"}
	}
	if a.outcome == outcomeError {
		if verify != nil {
			// An error cannot be signed: taking it would let anyone close
			// a keyed approver's prompt.
			return lifecycle.Verified{Why: "an error answer cannot be signed, and " + pr.Approver + " must sign"}
		}
		return lifecycle.Verified{Kind: lifecycle.AnswerFailed, Why: a.rpcErr.Message}
	}
	esc := c.escalation(p)
	cl, digest, fields, err := c.form(esc)
	if err != nil {
		return lifecycle.Verified{Why: err.Error()}
	}
	if verify != nil {
		if err := verify(pr.EnvelopeID, digest, a.action, a.content); err != nil {
			return lifecycle.Verified{Kind: lifecycle.AnswerForgery, Action: a.action, Why: err.Error()}
		}
	}
	f := a.form
	v := lifecycle.Verified{Action: a.action, Reason: f.reason}
	switch a.outcome {
	case outcomeCancel:
		v.Kind = lifecycle.AnswerCancelled
		return v
	case outcomeDecline:
		v.Kind = lifecycle.AnswerDeclined
		return v
	case outcomeDelegate:
		v.Kind, v.DelegateTo = lifecycle.AnswerDelegated, f.delegateTo
		return v
	}
	v.Kind = lifecycle.AnswerApproved
	v.Grant, v.GrantBad, v.GrantRaw = f.grant, f.grantBad, string(f.fields[approval.FieldGrant])
	params, key, err := applyEdits(cl, fields, f)
	if err != nil {
		v.Unusable = err.Error()
		return v
	}
	v.Params, v.Key = params, key
	content, sig, _ := approval.SplitSignature(a.content)
	v.Content = content
	if verify != nil {
		v.Signed, v.Request, v.Signature = true, pr.EnvelopeID, sig
	}
	return v
}

// Recount reads again the call a recorded approval approved (its form
// content, under p's editable fields).
func (c Codec) Recount(p *lifecycle.Proposal, a lifecycle.Approval) (json.RawMessage, string, error) {
	esc := c.escalation(p)
	cl, _, fields, err := c.form(esc)
	if err != nil {
		return nil, "", err
	}
	return applyEdits(cl, fields, readForm(a.Content))
}

// Offers reads the delegates and grant durations a recorded prompt's
// form offered.
func (Codec) Offers(payload json.RawMessage) (delegates, grants []string) {
	return offeredDelegates(payload), slices.Clip(offeredGrants(payload))
}

// WithContext is c reading what the record does not hold of a proposal
// through f (the shell's: its tool, input schema, and whether its
// deadline is the proposer's hint).
func (c Codec) WithContext(f func(*lifecycle.Proposal) (*policies.Tool, json.RawMessage, bool)) lifecycle.Codec {
	c.Context = f
	return c
}

// EventOf is the Observer's Event for a step of the core's escalation
// with its humans, as the decision log, the metrics and the notifier
// read it.
func EventOf(h lifecycle.Human) Event {
	ev := Event{Time: h.At, Kind: EventKind(h.Kind), ProposalID: h.ID, Approver: h.Approver, From: h.From, RequestID: h.RequestID,
		Action: h.Action, Approve: h.Approve, Reason: h.Reason, To: h.To, Outcome: h.Outcome, DecisionID: h.DecisionID, Revision: h.Revision,
		FrontEnd: h.FrontEnd, Log: h.Log}
	if n := h.Notice; n != nil {
		p := &Prompt{Proposer: n.Proposer, Method: n.Method, Tool: n.Tool, Target: n.Target, Asked: n.Asked, Quorum: n.Quorum,
			Deadline: n.Deadline, Resumed: n.Resumed}
		p.Digest, _ = approval.CallDigest(n.Method, n.Params)
		if n.Arguments != nil {
			p.Arguments = callArguments(n.Method, n.Arguments)
		}
		ev.Prompt = p
	}
	return ev
}

// callArguments are what a notification shows as the call's arguments:
// a tools/call's params.arguments, another method's params.
func callArguments(method string, params json.RawMessage) json.RawMessage {
	if method != agent.MethodToolsCall {
		return params
	}
	var p struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if agent.Unmarshal(params, &p) != nil {
		return nil
	}
	return p.Arguments
}

// offeredDelegates reads the delegate_to choices a recorded prompt
// offered, so that a resumed prompt accepts the same delegations.
func offeredDelegates(payload json.RawMessage) []string {
	return offeredEnum(payload, approval.FieldDelegateTo)
}

// offeredGrants reads the grant durations a recorded prompt offered, so
// that a resumed prompt accepts the same choices (the stored decision is
// not needed to know them).
func offeredGrants(payload json.RawMessage) []string {
	return slices.DeleteFunc(offeredEnum(payload, approval.FieldGrant), func(g string) bool { return g == "" })
}

// offeredEnum reads the enum of one field of a recorded prompt's form.
func offeredEnum(payload json.RawMessage, name string) []string {
	var p struct {
		Params struct {
			RequestedSchema struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"requestedSchema"`
		} `json:"params"`
	}
	if agent.Unmarshal(payload, &p) != nil {
		return nil
	}
	return p.Params.RequestedSchema.Properties[name].Enum
}

// grantOffers are the grant durations this escalation's form offers: none
