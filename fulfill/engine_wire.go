package fulfill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies"
)

// engineWire is the Loop's Wire: the front end's, with the engine's own
// part of the approvers' channel (lifecycle.ApproverChannel: each step
// with the humans reported, the grants approvers chose made) and, for a
// front end whose wire does not report them itself (selfReporting), the
// decision log's watchers told of each answer written or not.
type engineWire struct {
	lifecycle.Wire
	// prompts is the front end's Wire as a PromptSender (nil: it sends
	// none); reserver as an IDReserver (nil: ids are minted one by one).
	prompts  PromptSender
	reserver lifecycle.IDReserver
	// self: the front end's Wire reports its answers to events itself.
	self bool

	events    wireEvents
	approvals *Approvals           // nil: no escalations
	grants    *grantstore.Registry // nil: grants are off
	spaceID   string               // names grants (CreateGrant's id)
	log       *slog.Logger
}

// selfReporting is a Wire of this package that tells the journal of its
// answers itself: the MEW wire, which also hears of a write the gateway
// refused after it was made.
type selfReporting interface{ reportsDeliveries() }

var (
	_ lifecycle.ApproverChannel = (*engineWire)(nil)
	_ lifecycle.IDReserver      = (*engineWire)(nil)
	_ lifecycle.Immediate       = (*engineWire)(nil)
)

// Immediate implements lifecycle.Immediate: an effect the front end's
// Wire carries out at once (its own lifecycle.Immediate says so: the MCP
// front end's sends hand the message to a goroutine of its own) is
// carried out on the Loop's goroutine, what this wire adds to it (the
// journal's watchers told) never waiting either. The steps with the
// humans and the grants stay on workers: an Observer of the approvals
// may notify, and a grant is written to the store.
func (w *engineWire) Immediate(e lifecycle.Effect) bool {
	switch e.(type) {
	case lifecycle.Human, lifecycle.CreateGrant:
		return false
	case lifecycle.SendPrompt:
		if w.prompts == nil {
			return true // refused at once (errNoPrompts)
		}
	}
	now, ok := w.Wire.(lifecycle.Immediate)
	return ok && now.Immediate(e)
}

// newEngineWire wraps fe, the front end's Wire.
func newEngineWire(fe lifecycle.Wire, events wireEvents, cfg Config, log *slog.Logger) *engineWire {
	w := &engineWire{Wire: fe, events: events, approvals: cfg.Approvals, grants: cfg.Grants, spaceID: cfg.SpaceID, log: log}
	w.prompts, _ = fe.(PromptSender)
	w.reserver, _ = fe.(lifecycle.IDReserver)
	_, w.self = fe.(selfReporting)
	return w
}

// SendReject is the front end's, reported.
func (w *engineWire) SendReject(ctx context.Context, r lifecycle.SendReject) error {
	err := w.Wire.SendReject(ctx, r)
	w.report(r.ID, r.EnvelopeID, agent.KindReject, err)
	return err
}

// SendRequest is the front end's, reported.
func (w *engineWire) SendRequest(ctx context.Context, r lifecycle.SendRequest) error {
	err := w.Wire.SendRequest(ctx, r)
	w.report(r.ID, r.EnvelopeID, agent.KindRequest, err)
	return err
}

// SendRelay is the front end's, reported.
func (w *engineWire) SendRelay(ctx context.Context, r lifecycle.SendRelay) error {
	err := w.Wire.SendRelay(ctx, r)
	w.report(r.ID, r.EnvelopeID, agent.KindResponse, err)
	return err
}

// report tells the journal that proposal id's answer (envelope, of
// kind) was written (err nil) or not, unless the front end's Wire does
// itself. A request held for its peer's return (lifecycle.ErrAway) is
// neither yet.
func (w *engineWire) report(id, envelope, kind string, err error) {
	switch {
	case w.self || errors.Is(err, lifecycle.ErrAway):
	case err != nil:
		w.events.undelivered(id, kind, UndeliveredNotWritten, err.Error())
	default:
		w.events.written(id, envelope)
	}
}

// SendPrompt is the front end's, when its Wire sends prompts.
func (w *engineWire) SendPrompt(ctx context.Context, p lifecycle.SendPrompt) error {
	if w.prompts == nil {
		w.log.Error("elicitation not sent: the front end sends no prompts", "approver", p.To, "request", p.EnvelopeID)
		return errNoPrompts
	}
	return w.prompts.SendPrompt(ctx, p)
}

// ReserveIDs is the front end's; the core asks only when it has one
// (NewEngine sets lifecycle.Config.ReserveIDs accordingly).
func (w *engineWire) ReserveIDs(ctx context.Context, n int) ([]int64, error) {
	if w.reserver == nil {
		return nil, errNoRPCID
	}
	return w.reserver.ReserveIDs(ctx, n)
}

// Human reports a step with the humans to the Approvals' Observer, on
// the proposal's lane: in its order with the proposal's decision-log
// lines. A reminder or tier that will not happen is only logged.
func (w *engineWire) Human(_ context.Context, h lifecycle.Human) {
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
func (w *engineWire) logHuman(h lifecycle.Human) {
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
func (w *engineWire) CreateGrant(ctx context.Context, g lifecycle.CreateGrant) {
	if w.grants == nil {
		return
	}
	ev := Event{Stage: StageGranted, ProposalID: g.ID, DecisionID: g.DecisionID, Revision: g.Revision,
		Proposer: g.Proposer, Method: g.Method, Tool: g.Tool, Target: g.Target, LogFields: g.Log, By: []string{g.Approver}}
	name, args := toolCall(g.Params)
	call := grantCall(g.Proposer, &policies.Tool{Name: name, Server: g.Target, Arguments: args})
	sum := sha256.Sum256([]byte(w.spaceID + "\x00" + g.ID))
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

// observe tells the observers of an event that is no line of the core
// (StageGranted), stamped.
func (w *engineWire) observe(ev Event) {
	stamp(&ev)
	w.events.observe(ev)
}
