package fulfill

import (
	"context"
	"errors"
)

// reservedIDs is how many JSON-RPC ids the core holds ahead
// (lifecycle.Config.ReserveIDs): enough that a burst of requests never
// finds none while the next ones are reserved, few enough that a restart
// skips little of the store's block.
const reservedIDs = 256

// errNoRPCID: the space had no JSON-RPC id to give (the state store's
// block could not be reserved in time).
var errNoRPCID = errors.New("fulfill: no JSON-RPC id: the id source is unavailable")

// ReserveIDs implements lifecycle.IDReserver from the space's one
// sequence of JSON-RPC ids (rule 11: the same as discovery's and the
// prompts'), on the Loop's worker: the store's compare-and-set for a new
// block is waited for here, never in the core's Step.
func (w *wire) ReserveIDs(ctx context.Context, n int) ([]int64, error) {
	ids := make([]int64, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		id := w.space.NextRPCID()
		if id == 0 {
			return nil, errNoRPCID
		}
		ids = append(ids, id)
	}
	return ids, nil
}
