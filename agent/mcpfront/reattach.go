package mcpfront

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Reattacher lets a client's retry of a call held for approval re-attach
// to it, on whichever instance the retry reaches (fulfiller mcp serve
// instances sharing one NATS cluster: DESIGN "Several instances"),
// instead of asking the approvers again. Config.Reattach; nil: every
// call is a new proposal, and a client that leaves withdraws its call.
type Reattacher interface {
	// Held is told that call p waits for approvers until deadline (the
	// engine's escalated status), and again when it is resumed
	// elsewhere: a retry may find it from then on. It must return at
	// once (it is called on the engine's effects).
	Held(p Proposal, deadline time.Time)
	// Find returns the id of the proposal held for a call like p (the
	// same proposer, upstream, tool and arguments) whose deadline has
	// not passed; ok false: p is a new call.
	Find(ctx context.Context, p Proposal) (id string, ok bool)
	// TakeOver resumes proposal id here: its prompts asked again (the
	// caller's through the call holding it here now), its approvals
	// kept. ErrPastApproval: its call went upstream already (it must not
	// run again); any other error: the retry is decided as a new call.
	TakeOver(ctx context.Context, id string) error
}

// ErrPastApproval: the call a retry found was approved and sent upstream
// already, from where it was first made: it is not run again.
var ErrPastApproval = errors.New("mcpfront: the call was approved and sent upstream already")

// pastApprovalMessage is what the client's retry of such a call reads.
const pastApprovalMessage = "this call was approved and sent to the server already, where it was first made; it is not run twice (its result went to the connection that made it)"

// reattach re-attaches h, a new call, to the held proposal it retries
// (Config.Reattach), registered under that proposal's id: done reports
// that the call was taken there (its result or error returned), false
// that it goes on as a new call under its own id. A call held here by a
// handler still attached (the same call made twice at once) is not
// taken from it.
func (f *Front) reattach(ctx context.Context, h *held) (res *mcp.CallToolResult, err error, done bool) {
	r := f.cfg.Reattach
	id, ok := r.Find(ctx, h.p)
	if !ok {
		return nil, nil, false
	}
	own := h.p.ID
	h.p.ID = id
	f.mu.Lock()
	old := f.held[id]
	if old != nil {
		old.mu.Lock()
		attached := old.ctx != nil && !old.gone
		old.mu.Unlock()
		if attached {
			f.mu.Unlock()
			h.p.ID = own
			return nil, nil, false
		}
	}
	f.held[id] = h
	f.mu.Unlock()
	if old != nil {
		f.retire(old)
	}
	if err := r.TakeOver(ctx, id); err != nil {
		f.mu.Lock()
		if f.held[id] == h {
			delete(f.held, id)
		}
		f.mu.Unlock()
		if errors.Is(err, ErrPastApproval) {
			f.log.Info("retry of a call already sent upstream: not run again", "proposal", id)
			return rejectResult(Reject{Code: "other", Message: pastApprovalMessage}), nil, true
		}
		f.log.Info("retry not re-attached to its held call; decided as a new call", "proposal", id, "err", err)
		h.p.ID = own
		return nil, nil, false
	}
	f.log.Info("call re-attached to its held approval", "proposal", id, "client", h.p.Proposer, "upstream", h.p.Server)
	res, err = f.hold(ctx, h)
	return res, err, true
}

// retire ends old, a call detached here whose retry re-attached: its
// wait for a retry ends, and nothing more reaches it.
func (f *Front) retire(old *held) {
	old.mu.Lock()
	defer old.mu.Unlock()
	old.gone = true
	old.detached++
	if old.expire != nil {
		old.expire.Stop()
	}
	for id, cancel := range old.prompts {
		cancel()
		delete(old.prompts, id)
	}
}

// keepForRetry reports whether h, whose client went away while it waits
// for approvers, is kept for the client's retry (Config.Reattach)
// rather than withdrawn: only a call escalated, and only a connection
// that ended (a client's own cancellation withdraws it).
func (f *Front) keepForRetry(ctx context.Context, h *held) bool {
	if f.cfg.Reattach == nil || withdrawReason(ctx) != WithdrawDisconnected {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.escalated && !h.answered
}

// noteHeld tells Config.Reattach that h waits for approvers.
func (f *Front) noteHeld(h *held, deadline time.Time) {
	if f.cfg.Reattach == nil {
		return
	}
	h.mu.Lock()
	h.escalated = true
	p := h.p
	h.mu.Unlock()
	f.cfg.Reattach.Held(p, deadline)
}

// droppedMessage is what a call reads when its proposal was taken over
// by its client's retry on another instance.
const droppedMessage = "this call was taken over by its retry on another fulfiller instance; the answer goes to the retry"

// Dropped is told (by the engine's binding) that another instance took
// proposal id over for the client's retry. The call still held here, if
// any, is answered with a reject saying so, rather than left waiting for
// an answer that goes elsewhere; its prompts to the caller end with it.
func (f *Front) Dropped(id string) {
	f.log.Debug("call taken over by its retry on another instance", "proposal", id)
	_ = f.Answer(f.ctx, Answer{ProposalID: id, Reject: &Reject{Code: "other", Message: droppedMessage}})
}
