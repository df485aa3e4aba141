package mcpserve

import (
	"context"
	"fmt"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// frontGateway is what the operations surface reads of the front end
// where run's reads its gateway connection: there is no space to be
// joined to, so the front end is always "connected" (each upstream's
// state is its own, logged as it changes).
type frontGateway struct{}

func (frontGateway) Connected() bool    { return true }
func (frontGateway) Stats() agent.Stats { return agent.Stats{} }

// operator is the operator API (GET /v1/pending, cancel) over the
// engine. The MCP front end has no space's tool catalog: its tools are
// the upstreams' (tools/list), so ToolViews lists none.
type operator struct{ e *fulfill.Engine }

func (o operator) GroupPending(ctx context.Context) ([]fulfill.Snapshot, error) {
	return o.e.GroupPending(ctx)
}

func (o operator) GroupGet(ctx context.Context, id string) (fulfill.Snapshot, bool, error) {
	return o.e.GroupGet(ctx, id)
}

func (o operator) ToolViews() []fulfill.ToolView { return nil }

// Cancel rejects a pending call of this process on the operator's
// behalf (reason "other", the message naming them); its prompts are
// cancelled. A call sent to its upstream cannot be (fulfill.ErrAnswered):
// it may be running. Pending calls live in this process only, so one
// it does not hold is unknown.
func (o operator) Cancel(id, by string) error {
	ctx := context.Background()
	var p lifecycle.Proposal
	var held bool
	if err := o.e.Do(ctx, func(c *lifecycle.Core) { p, held = c.Get(id) }); err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	switch {
	case !held:
		return fmt.Errorf("cancel %s: %w", id, fulfill.ErrUnknownProposal)
	case p.Phase == lifecycle.Fulfilling || p.Phase == lifecycle.Answered:
		return fmt.Errorf("cancel %s: %w", id, fulfill.ErrAnswered)
	}
	// The core refuses a cancel that comes too late (the call went out
	// in between): that is logged, as run's is.
	if err := o.e.Post(ctx, lifecycle.Cancelled{ID: id, By: by}); err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	return nil
}
