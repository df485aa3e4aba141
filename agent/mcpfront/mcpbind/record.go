package mcpbind

import (
	"encoding/json"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// RecordParams is the call's params as its Envelope keeps them
// (fulfill.RecordParams): a record read back from a group's store, to
// resume a call whose client re-attached on another instance, has them
// from there (the core reads params from a MEW envelope only).
func (b *Binding) RecordParams(p *lifecycle.Proposal) json.RawMessage {
	e, ok := ReadEnvelope(p)
	if !ok {
		return nil
	}
	return e.Params
}

// TakenElsewhere implements fulfill.TakenElsewhere: another instance
// took proposal id over (its client's retry reached it), so the call
// still held here, if any, is answered that its answer goes there
// (mcpfront.Front's Dropped).
func (b *Binding) TakenElsewhere(id string) {
	if d, ok := b.fx.(interface{ Dropped(proposalID string) }); ok {
		d.Dropped(id)
	}
}
