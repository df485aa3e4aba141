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
