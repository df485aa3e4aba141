package mcpbind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// wire is lifecycle.Wire (and ApproverChannel, IDReserver) over the
// front end's Effects: each of the core's effects on an MCP peer is one
// Effects call, the proposal named by its id.
type wire struct{ b *Binding }

var (
	_ lifecycle.Wire            = wire{}
	_ lifecycle.ApproverChannel = wire{}
	_ lifecycle.IDReserver      = wire{}
	_ lifecycle.Immediate       = wire{}
)

// Immediate implements lifecycle.Immediate: the effects whose Effects
// call returns at once are carried out on the engine's Loop goroutine,
// not handed to a worker and their result back (two goroutine hand-offs
// and, for a call made alone, two thread wake-ups on the call's round
// trip). mcpfront.Effects promises that none of its calls blocks on a
// peer: SendRequest hands the call to a goroutine of the front end's,
// Answer to the held call's buffered channel, SendCancel ends a
// context. Status writes a progress notification to the client and
// CancelAsk may reach the team inbox's approvers, and a prompt may be
// written to the client: those may wait for a peer, so they stay on
// workers. The task effects do nothing (no call is sent as a task).
func (wire) Immediate(e lifecycle.Effect) bool {
	switch e.(type) {
	case lifecycle.SendRequest, lifecycle.SendReject, lifecycle.SendRelay, lifecycle.SendCancel,
		lifecycle.FollowTask, lifecycle.CancelTask, lifecycle.Human, lifecycle.CreateGrant:
		return true
	}
	return false
}

// SendReject answers the client with the refusal. A client that is gone
// (or answered) is owed nothing (MCP: a request ends with its
// connection), so that counts as written: the core must not write it
// again and again to nobody.
func (w wire) SendReject(ctx context.Context, r lifecycle.SendReject) error {
	err := w.b.fx.Answer(ctx, mcpfront.Answer{ProposalID: r.ID, Reject: &mcpfront.Reject{Code: r.Reason, Message: r.Message}})
	switch {
	case errors.Is(err, mcpfront.ErrUnknown), errors.Is(err, mcpfront.ErrAnswered):
		w.b.log.Debug("mcp reject not written: the client no longer waits", "proposal", r.ID, "reason", r.Reason)
		return nil
	case err != nil:
		return fmt.Errorf("mcpbind: reject of proposal %s: %w", r.ID, err)
	}
	return nil
}

// SendRequest sends the call to the upstream (its params as decided:
// an approver's edit, or as proposed). Its outcome comes back as the
// front end's Responded.
func (w wire) SendRequest(ctx context.Context, r lifecycle.SendRequest) error {
	if r.Task {
		return errNoRelay
	}
	if err := w.b.fx.SendRequest(ctx, mcpfront.Request{ProposalID: r.ID, Params: r.Params}); err != nil {
		return fmt.Errorf("mcpbind: request of proposal %s to upstream %s: %w", r.ID, r.To, err)
	}
	return nil
}

// SendRelay is never asked for: nothing is sent as a task.
func (w wire) SendRelay(context.Context, lifecycle.SendRelay) error { return errNoRelay }

// SendCancel cancels the request at the upstream.
func (w wire) SendCancel(ctx context.Context, c lifecycle.SendCancel) {
	w.b.fx.SendCancel(ctx, mcpfront.Cancel{ProposalID: c.ID, Reason: c.Reason})
}

// Status tells the client its call waits: a progress notification when
// it sent a progressToken.
func (w wire) Status(ctx context.Context, s lifecycle.Status) {
	var stage string
	switch s.Stage {
	case lifecycle.StatusEscalated:
		stage = mcpfront.StageEscalated
	case lifecycle.StatusQueued:
		stage = mcpfront.StageQueued
	default:
		return // a task's: none is made
	}
	w.b.fx.Status(ctx, mcpfront.Status{ProposalID: s.ID, Stage: stage, Approvers: s.Approvers, Deadline: s.Deadline})
}

// CancelAsk ends the escalation's prompts: the caller's through the
// client, the other approvers' with the notifications/cancelled a
// space carries, through Options.Approvers (an approver no longer
// connected is owed nothing: its card went with it).
func (w wire) CancelAsk(ctx context.Context, c lifecycle.CancelAsk) {
	if c.Reason == lifecycle.DropReason {
		return
	}
	for _, pr := range c.Prompts {
		if pr.Approver == mcpfront.Caller {
			w.b.fx.CancelPrompt(ctx, mcpfront.CancelPrompt{ProposalID: c.ID, PromptID: pr.EnvelopeID, Reason: c.Reason})
			continue
		}
		if w.b.opts.Approvers == nil {
			continue
		}
		payload, err := json.Marshal(cancelled{JSONRPC: "2.0", Method: agent.MethodCancelled, Params: cancelledParams{RequestID: pr.RPCID, Reason: c.Reason}})
		if err != nil {
			continue // cannot happen: the fields always marshal
		}
		env := agent.Envelope{To: []string{pr.Approver}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{pr.EnvelopeID}, Payload: payload}
		if err := w.b.opts.Approvers.Send(ctx, env); err != nil {
			w.b.log.Debug("cancellation of a prompt not delivered: the approver is not connected", "approver", pr.Approver, "request", pr.EnvelopeID, "err", err)
		}
	}
}

// cancelled is a prompt's notifications/cancelled, as a space carries it.
type cancelled struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  cancelledParams `json:"params"`
}

type cancelledParams struct {
	RequestID int64  `json:"requestId"`
	Reason    string `json:"reason"`
}

// FollowTask returns at once: nothing is sent as a task (Route).
func (w wire) FollowTask(context.Context, lifecycle.FollowTask, func(lifecycle.Event)) {}

// CancelTask does nothing: nothing is sent as a task.
func (w wire) CancelTask(context.Context, lifecycle.CancelTask) {}

// SendPrompt asks an approver: "@caller" through the client's
// elicitation (the recorded elicitation/create request's params), any
// other approver through Options.Approvers, the whole request in an
// envelope under the prompt's id, as a space carries it. An approver
// neither reaches is not asked (the error says so; the core counts it
// unreachable).
func (w wire) SendPrompt(ctx context.Context, p lifecycle.SendPrompt) error {
	if p.To != mcpfront.Caller {
		if w.b.opts.Approvers == nil {
			return fmt.Errorf("mcpbind: approver %s cannot be asked: only %s is, without the team inbox (--inbox)", p.To, mcpfront.Caller)
		}
		env := agent.Envelope{ID: p.EnvelopeID, To: []string{p.To}, Kind: agent.KindRequest, Payload: p.Payload}
		if err := w.b.opts.Approvers.Send(ctx, env); err != nil {
			return fmt.Errorf("mcpbind: prompt of proposal %s to %s: %w", p.ID, p.To, err)
		}
		return nil
	}
	var req struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(p.Payload, &req); err != nil || len(req.Params) == 0 {
		return fmt.Errorf("mcpbind: prompt %s of proposal %s: not an elicitation/create request", p.EnvelopeID, p.ID)
	}
	err := w.b.fx.SendPrompt(ctx, mcpfront.Prompt{ProposalID: p.ID, PromptID: p.EnvelopeID, Params: req.Params})
	if err != nil {
		return fmt.Errorf("mcpbind: prompt of proposal %s to %s: %w", p.ID, p.To, err)
	}
	return nil
}

// Human does nothing: the engine reports the steps with the humans
// (its own part of the approvers' channel). It is here so that the wire
// is a lifecycle.ApproverChannel on a bare Loop too.
func (w wire) Human(context.Context, lifecycle.Human) {}

// CreateGrant does nothing, for the same reason: the engine makes the
// grants approvers chose.
func (w wire) CreateGrant(context.Context, lifecycle.CreateGrant) {}

// ReserveIDs hands out JSON-RPC ids from the process's count: no other
// process sees them (the SDK numbers the messages on the wire).
func (w wire) ReserveIDs(_ context.Context, n int) ([]int64, error) { return w.b.ids.reserve(n), nil }
