package fulfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// EndLost ends, never runs, the group's proposals left by members that
// are gone: those whose holder's lease is not live, whose deadline has
// passed by now, and that nothing can still run (deciding, awaiting
// approval, or with their reject being written). Nobody retried them
// before their deadline (a retry would have taken them over: TakeOver),
// and no member acts on another's calls on its own, so without this
// their records stayed in the store for ever (fulfiller mcp serve on a
// NATS cluster: docs/mcp.md "Several instances").
//
// Each is moved to this member by compare-and-set on the revision read
// (as Store.Adopt moves a lapsed member's records), so when several
// members sweep at once each proposal goes to exactly one of them, and
// one taken meanwhile by a live member (a retry's TakeOver, another
// sweep) is left to it. The winner resumes it as an adopted record is
// resumed: its deadline has passed, so the core rejects it "timeout" at
// once, cancels its open prompts, logs both steps (the "resumed" line
// says how, and names the holder that is gone) and deletes the record. A proposal queued, fulfilling or
// followed as a task is left alone: resuming it could run its call.
//
// It returns the ids this member ended. The store must be shared.
func (e *Engine) EndLost(ctx context.Context, now time.Time, how string) ([]string, error) {
	if !e.cfg.Store.Shared() {
		return nil, errors.New("end lost proposals: the store is this member's alone")
	}
	ms, err := e.cfg.Store.Members(ctx)
	if err != nil {
		return nil, fmt.Errorf("end lost proposals: %w: %w", ErrStoreUnavailable, err)
	}
	me := e.cfg.Store.Member()
	live := map[string]bool{me: true}
	for _, m := range ms {
		live[m.ID] = true
	}
	recs, err := e.cfg.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("end lost proposals: %w: %w", ErrStoreUnavailable, err)
	}
	var ended []string
	for _, r := range recs {
		if live[r.Owner] || now.Before(r.Deadline) || !endable(r.Phase) {
			continue
		}
		from := r.Owner
		r.Owner = me
		switch err := e.cfg.Store.Update(ctx, r); {
		case errors.Is(err, state.ErrConflict):
			continue // another member moved it first, or it ended
		case err != nil:
			return ended, fmt.Errorf("end lost proposal %s: %w: %w", r.ID, ErrStoreUnavailable, err)
		}
		ours, err := e.cfg.Store.Reclaim(ctx, r)
		switch {
		case err != nil:
			return ended, fmt.Errorf("end lost proposal %s: settle its claim: %w: %w", r.ID, ErrStoreUnavailable, err)
		case !ours:
			if err := e.cfg.Store.Delete(ctx, r); err != nil && !errors.Is(err, state.ErrConflict) {
				e.log.Warn("a replay's record not deleted", "proposal", r.ID, "err", err)
			}
			continue
		}
		if err := e.readRecord(r); err != nil {
			e.log.Error("lost proposal's record unreadable: left in the store", "proposal", r.ID, "err", err)
			continue
		}
		e.records.held([]lifecycle.Proposal{*r})
		if err := e.loop.Post(ctx, lifecycle.Resumed{Records: []lifecycle.Proposal{*r}, How: fmt.Sprintf("%s (its holder %s is gone)", how, from)}); err != nil {
			return ended, fmt.Errorf("end lost proposal %s: %w", r.ID, err)
		}
		e.log.Info("proposal of a lost member ended after its deadline", "proposal", r.ID, "from", from, "deadline", r.Deadline)
		ended = append(ended, r.ID)
	}
	return ended, nil
}

// endable: a record in this phase can be resumed past its deadline
// without running its call (resume rejects it, or sends its reject
// again).
func endable(ph lifecycle.Phase) bool {
	switch ph {
	case lifecycle.Deciding, lifecycle.AwaitingApproval, lifecycle.Answered:
		return true
	}
	return false
}
