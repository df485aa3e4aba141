package fulfill

import (
	"context"
	"errors"
	"fmt"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// Pending lists the proposals this member holds that still wait for
// something, oldest first, as the core holds them. It reads no store:
// GroupPending lists the group's.
func (e *Engine) Pending() []Snapshot {
	var open []lifecycle.Proposal
	e.ask(context.Background(), func(c *lifecycle.Core) { open = c.Open() })
	out := make([]Snapshot, 0, len(open))
	for _, p := range open {
		if p.Phase == lifecycle.Answered {
			continue
		}
		out = append(out, proposalSnapshot(p))
	}
	sortSnapshots(out)
	return out
}

// Get returns one pending proposal this member holds.
func (e *Engine) Get(id string) (Snapshot, bool) {
	var p lifecycle.Proposal
	var ok bool
	e.ask(context.Background(), func(c *lifecycle.Core) { p, ok = c.Get(id) })
	if !ok || p.Phase == lifecycle.Answered {
		return Snapshot{}, false
	}
	return proposalSnapshot(p), true
}

// proposalSnapshot shows a proposal as the operator API does.
func proposalSnapshot(p lifecycle.Proposal) Snapshot {
	s := Snapshot{ID: p.ID, From: p.From, Method: p.Method, Tool: p.Tool, Target: p.Addressee, State: string(p.Phase),
		Received: p.Received, Deadline: p.Deadline, Owner: p.Owner}
	if d := p.Decision; d != nil {
		s.Revision = d.Revision
		if d.Target != "" {
			s.Target = d.Target
		}
	}
	if p.Request != nil {
		s.Target = p.Request.Target
	}
	if t := p.Task; t != nil {
		s.Task = &TaskInfo{ID: t.ID, Status: t.Status, Created: t.Created, Deadline: t.Deadline}
	}
	return s
}

// GroupPending lists the group's pending work, oldest first: the
// proposals this member holds, and every other record in the Store,
// whichever member owns it. When the store cannot be read it returns
// this member's proposals with an error wrapping ErrStoreUnavailable.
func (e *Engine) GroupPending(ctx context.Context) ([]Snapshot, error) {
	own := e.Pending()
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	recs, err := e.cfg.Store.List(ctx)
	if err != nil {
		return own, fmt.Errorf("list the group's pending work: %w: %w", ErrStoreUnavailable, err)
	}
	here := make(map[string]bool, len(own))
	for _, p := range own {
		here[p.ID] = true
	}
	out := own
	for _, r := range recs {
		if !here[r.ID] && r.Phase != lifecycle.Answered {
			_ = e.recordStore.migrate(r) // one it cannot read is shown as the store has it
			out = append(out, recordSnapshot(r))
		}
	}
	sortSnapshots(out)
	return out, nil
}

// GroupGet returns one pending proposal of the group: the one this member
// holds, else its record in the Store.
func (e *Engine) GroupGet(ctx context.Context, id string) (Snapshot, bool, error) {
	if snap, ok := e.Get(id); ok {
		return snap, true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	r, err := e.cfg.Store.Get(ctx, id)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return Snapshot{}, false, nil
	case err != nil:
		return Snapshot{}, false, fmt.Errorf("read proposal %s: %w: %w", id, ErrStoreUnavailable, err)
	}
	return recordSnapshot(r), true, nil
}

// Cancel rejects a pending proposal of the group on an operator's behalf,
// with reason "other" and a message naming the operator; its open prompts
// are cancelled. A proposal whose fulfilment request is out cannot be
// cancelled (ErrAnswered): the call may be running. One another member
// holds is taken from it (Store.Take: from then on that member can write
// nothing more about it) and cancelled here. ErrUnknownProposal: nobody
// in the group holds it.
func (s *Fulfiller) Cancel(id, by string) error {
	var p lifecycle.Proposal
	var held bool
	if !s.ask(context.Background(), func(c *lifecycle.Core) { p, held = c.Get(id) }) {
		return fmt.Errorf("cancel %s: %w", id, lifecycle.ErrStopped)
	}
	ctx, cancel := context.WithTimeout(s.base, storeTimeout)
	defer cancel()
	// The cancel returns once its reject is committed (recorded: sent
	// after a crash too) or refused: what the operator is told is what
	// happened.
	committed, stop := s.journal.await(id, func(ev Event) bool {
		return ev.Stage == StageRejected || (ev.Stage == StageIgnored && ev.Reason == "cancel_refused")
	})
	defer stop()
	wait := func() error {
		select {
		case ev := <-committed:
			if ev.Stage != StageRejected {
				return fmt.Errorf("cancel %s: %w", id, ErrAnswered)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("cancel %s: %w: %w", id, ErrStoreUnavailable, ctx.Err())
		}
	}
	if held {
		if p.Phase == lifecycle.Fulfilling || p.Phase == lifecycle.Answered {
			return fmt.Errorf("cancel %s: %w", id, ErrAnswered)
		}
		if err := s.loop.Post(ctx, lifecycle.Cancelled{ID: id, By: by}); err != nil {
			return fmt.Errorf("cancel %s: %w", id, err)
		}
		return wait()
	}
	var r *lifecycle.Proposal
	var err error
	for range maxTakes {
		if r, err = s.cfg.Store.Take(ctx, id); !errors.Is(err, state.ErrConflict) {
			break
		}
	}
	switch {
	case errors.Is(err, state.ErrNotFound):
		return fmt.Errorf("cancel %s: %w", id, ErrUnknownProposal)
	case errors.Is(err, state.ErrFulfilling), errors.Is(err, state.ErrAnswered):
		return fmt.Errorf("cancel %s: %w", id, ErrAnswered)
	case errors.Is(err, state.ErrConflict):
		return fmt.Errorf("cancel %s: the proposal kept changing while it was taken from its owner; try again: %w", id, err)
	case err != nil:
		return fmt.Errorf("cancel %s: %w: %w", id, ErrStoreUnavailable, err)
	}
	s.log.Info("proposal taken from the group's store to be cancelled by the operator", "proposal", id, "phase", r.Phase, "by", by)
	ps := s.settle(ctx, []*lifecycle.Proposal{r})
	if len(ps) == 0 {
		return fmt.Errorf("cancel %s: %w (the record was a replay's, now deleted)", id, ErrUnknownProposal)
	}
	// Back to back: its prompts, asked by the member it was taken from,
	// are cancelled, never asked again from here first.
	if err := s.loop.PostAll(ctx, lifecycle.Resumed{Records: ps, How: "taken for an operator's cancel"}, lifecycle.Cancelled{ID: id, By: by}); err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	return wait()
}

// Tools lists every tool discovered in the space, as its owner described
// it.
func (s *Fulfiller) Tools() []ToolInfo { return s.catalog.all() }

// ToolViews lists every tool discovered in the space with the annotations
// policies see for it, sorted by owner and name.
func (s *Fulfiller) ToolViews() []ToolView {
	tools := s.catalog.all()
	out := make([]ToolView, len(tools))
	for i, t := range tools {
		v := ToolView{Name: t.Name, Server: t.Server, Description: t.Description, OwnerAnnotations: t.Annotations, InputSchema: t.InputSchema, Execution: t.Execution}
		v.Annotations = t.Annotations
		if s.cfg.ToolMetadata != nil {
			var e *toolmeta.Entry
			v.Annotations, e = s.cfg.ToolMetadata.Annotate(t.Server, t.Name, t.Annotations)
			if e != nil {
				ref := e.Ref
				v.Metadata = &ref
			}
		}
		out[i] = v
	}
	return out
}

// Counts reports pending and in-flight work, for metrics and /readyz.
func (e *Engine) Counts() (pending, inflight int) {
	e.ask(context.Background(), func(c *lifecycle.Core) { pending, inflight = c.Live(), c.Inflight() })
	return pending, inflight
}
