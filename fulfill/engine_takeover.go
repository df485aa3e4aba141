package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// ErrNotAwaiting: TakeOver found the proposal past its approval (its
// fulfilment request out, or its reject being written): it cannot be
// moved, and must not be run again.
var ErrNotAwaiting = errors.New("fulfill: the proposal is past its approval")

// TakeOver moves pending proposal id — its record in the group's store,
// whoever holds it, live or not — to this member, and resumes it here as
// an adopted record is resumed: its deadline kept, its open prompts asked
// again from here (the same prompt ids), the answers already counted
// kept. It is how a front end re-attaches a proposer's retry to the
// proposal it retries (fulfiller mcp serve on a NATS cluster: docs/mcp.md
// "Several instances"). A proposal this member holds is let go first
// (its prompts dropped without a word) and resumed the same way, so that
// its prompts reach where the proposer is now.
//
// Only a proposal awaiting approval moves: one whose request is written
// (the call may be running) or whose reject is being written gives
// ErrNotAwaiting; one with no record, ErrUnknownProposal. The store must
// be shared (a group's).
func (e *Engine) TakeOver(ctx context.Context, id, how string) error {
	if !e.cfg.Store.Shared() {
		return fmt.Errorf("take over %s: the store is this member's alone", id)
	}
	var p lifecycle.Proposal
	var held bool
	if !e.ask(ctx, func(c *lifecycle.Core) { p, held = c.Get(id) }) {
		return fmt.Errorf("take over %s: %w", id, lifecycle.ErrStopped)
	}
	if held {
		if p.Phase != lifecycle.AwaitingApproval {
			return fmt.Errorf("take over %s (%s): %w", id, p.Phase, ErrNotAwaiting)
		}
		e.records.forget(id)
		if err := e.loop.Post(ctx, lifecycle.Released{ID: id, Reason: ReasonReattached,
			Message: "the proposer's retry re-attached to it: resumed from its record, its prompts asked again"}); err != nil {
			return fmt.Errorf("take over %s: %w", id, err)
		}
	}
	var r *lifecycle.Proposal
	var err error
	for range maxTakes {
		if r, err = e.cfg.Store.Take(ctx, id); !errors.Is(err, state.ErrConflict) {
			break
		}
	}
	switch {
	case errors.Is(err, state.ErrNotFound):
		return fmt.Errorf("take over %s: %w", id, ErrUnknownProposal)
	case errors.Is(err, state.ErrFulfilling), errors.Is(err, state.ErrAnswered):
		return fmt.Errorf("take over %s: %w", id, ErrNotAwaiting)
	case err != nil:
		return fmt.Errorf("take over %s: %w: %w", id, ErrStoreUnavailable, err)
	}
	if r.Phase != lifecycle.AwaitingApproval {
		// Deciding or queued at a member that died: resumed all the
		// same (it is this member's now), but not re-attached.
		e.log.Info("proposal taken over before its approval", "proposal", id, "phase", r.Phase)
	}
	ours, err := e.cfg.Store.Reclaim(ctx, r)
	switch {
	case err != nil:
		return fmt.Errorf("take over %s: settle its claim: %w: %w", id, ErrStoreUnavailable, err)
	case !ours:
		if err := e.cfg.Store.Delete(ctx, r); err != nil && !errors.Is(err, state.ErrConflict) {
			e.log.Warn("a replay's record not deleted", "proposal", id, "err", err)
		}
		return fmt.Errorf("take over %s: %w (the record was a replay's, now deleted)", id, ErrUnknownProposal)
	}
	if err := e.readRecord(r); err != nil {
		return fmt.Errorf("take over %s: %w", id, err)
	}
	e.records.held([]lifecycle.Proposal{*r})
	if err := e.loop.Post(ctx, lifecycle.Resumed{Records: []lifecycle.Proposal{*r}, How: how}); err != nil {
		return fmt.Errorf("take over %s: %w", id, err)
	}
	e.log.Info("proposal taken over", "proposal", id, "from", r.Owner, "how", how)
	return nil
}

// RecordParams is a front end that reads a call's params from the
// envelope it keeps in a record. The core reads a record's params back
// from a MEW envelope's payload (lifecycle's record decoding); another
// front end's envelope keeps them elsewhere, and a record read from the
// store would otherwise come back without them (and its approved call
// go out without arguments).
type RecordParams interface {
	RecordParams(p *lifecycle.Proposal) json.RawMessage
}

// readRecord completes a record read from the store for the core, as
// its front end wrote it: a MEW record as recordStore.migrate does, any
// other front end's with its params from its envelope (RecordParams).
func (e *Engine) readRecord(r *lifecycle.Proposal) error {
	if r.FrontEnd == "" || r.FrontEnd == "mew" {
		return e.recordStore.migrate(r)
	}
	if r.V == 0 {
		return fmt.Errorf("record of front end %q from an older build: not resumed", r.FrontEnd)
	}
	if rp, ok := e.fe.(RecordParams); ok && r.Params == nil && r.Invalid == "" {
		r.Params = rp.RecordParams(r)
	}
	return nil
}

// TakenElsewhere is a front end told when another member took one of
// its proposals over (watchRecords): what it still holds for the
// proposer of that proposal no longer gets the answer here.
type TakenElsewhere interface {
	TakenElsewhere(proposalID string)
}

// ReasonReattached is the reason of the "ignored" line a member logs
// when a proposal it held is resumed elsewhere, or here again, for the
// proposer's retry (TakeOver).
const ReasonReattached = "reattached"
