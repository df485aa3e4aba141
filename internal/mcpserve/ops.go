package mcpserve

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// frontGateway is what the operations surface reads of the front end
// where run's reads its gateway connection: there is no space to be
// joined to, so the front end is always "connected" (each upstream's
// state is its own, logged as it changes).
type frontGateway struct{}

func (frontGateway) Connected() bool    { return true }
func (frontGateway) Stats() agent.Stats { return agent.Stats{} }

// operator is the operator API (GET /v1/pending, cancel, GET
// /v1/tools) over the engine and the front end, whose tools are the
// upstreams' (tools/list).
type operator struct {
	e     *fulfill.Engine
	front *mcpfront.Front
	meta  fulfill.ToolMetadata // nil: no --tool-metadata
	log   *slog.Logger
}

func (o operator) GroupPending(ctx context.Context) ([]fulfill.Snapshot, error) {
	return o.e.GroupPending(ctx)
}

func (o operator) GroupGet(ctx context.Context, id string) (fulfill.Snapshot, bool, error) {
	return o.e.GroupGet(ctx, id)
}

// ToolViews lists the tools the upstreams list now, with the
// annotations policies see for each (--tool-metadata's, else the
// upstream's) and its digests, listed and pinned. When the pins cannot
// be read it lists none and logs why.
func (o operator) ToolViews() []fulfill.ToolView {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tools, err := o.front.Tools(ctx)
	if err != nil {
		o.log.Warn("the operator API cannot list the tools", "err", err)
		return nil
	}
	out := make([]fulfill.ToolView, len(tools))
	for i, t := range tools {
		v := fulfill.ToolView{Name: t.Name, Server: t.Server, Description: t.Description, Annotations: t.Annotations,
			OwnerAnnotations: t.Annotations, InputSchema: t.InputSchema, Digest: t.Digest, PinnedDigest: t.Pinned}
		if o.meta != nil {
			var e *toolmeta.Entry
			if v.Annotations, e = o.meta.Annotate(t.Server, t.Name, t.Annotations); e != nil {
				ref := e.Ref
				v.Metadata = &ref
			}
		}
		out[i] = v
	}
	return out
}

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
