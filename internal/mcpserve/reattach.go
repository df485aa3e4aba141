package mcpserve

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// reattacher is the front end's mcpfront.Reattacher on a NATS cluster
// (docs/mcp.md "Several instances"): the calls held for approval are
// indexed in the cluster by the call as its client made it, and a retry
// found there is taken over from whichever instance held it (the
// engine's TakeOver: the proposal's record moves here, its prompts are
// asked again from here, its approvals kept). It is a part: Start opens
// the index and starts the one goroutine that writes it (the front end
// tells of a held call on the engine's effects, which must not wait for
// the cluster), Stop ends it.
type reattacher struct {
	store *storePart
	log   *slog.Logger
	eng   *fulfill.Engine // set once the engine is made, before any call

	held    *state.HeldCalls
	writes  chan heldWrite
	stop    context.CancelFunc
	running sync.WaitGroup
}

// heldWrite is one entry for the index.
type heldWrite struct {
	key  string
	call state.HeldCall
}

// heldQueue bounds the index writes waiting: a held call beyond it is
// not indexed (logged), and its client's retry is a new call.
const heldQueue = 256

func (r *reattacher) Start(ctx context.Context) error {
	held, err := r.store.store.HeldCalls(ctx)
	if err != nil {
		return &StartError{Part: "state", Err: err}
	}
	r.held, r.writes = held, make(chan heldWrite, heldQueue)
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	r.running.Go(func() { r.write(wctx) })
	return nil
}

func (r *reattacher) Stop() error {
	r.stop()
	r.running.Wait()
	return nil
}

// write writes the index entries queued until ctx ends.
func (r *reattacher) write(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-r.writes:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := r.held.Put(wctx, w.key, w.call); err != nil {
				r.log.Warn("held call not indexed: its client's retry will be a new call", "proposal", w.call.ProposalID, "err", err)
			}
			cancel()
		}
	}
}

// Held implements mcpfront.Reattacher.
func (r *reattacher) Held(p mcpfront.Proposal, deadline time.Time) {
	key, ok := callKey(p)
	if !ok {
		r.log.Info("held call not indexed: its arguments have no canonical JSON form, so its client's retry will be a new call", "proposal", p.ID)
		return
	}
	w := heldWrite{key: key, call: state.HeldCall{ProposalID: p.ID, Member: r.store.store.Member(), Deadline: deadline}}
	select {
	case r.writes <- w:
	default:
		r.log.Warn("held calls' index busy: this call's retry will be a new call", "proposal", p.ID)
	}
}

// Find implements mcpfront.Reattacher: one read of the cluster per call.
// An index that cannot be read makes every call a new one (logged).
func (r *reattacher) Find(ctx context.Context, p mcpfront.Proposal) (string, bool) {
	key, ok := callKey(p)
	if !ok {
		return "", false
	}
	c, ok, err := r.held.Get(ctx, key, time.Now())
	if err != nil {
		r.log.Warn("held calls' index not read: the call is decided as a new one", "err", err)
		return "", false
	}
	return c.ProposalID, ok
}

// TakeOver implements mcpfront.Reattacher.
func (r *reattacher) TakeOver(ctx context.Context, id string) error {
	err := r.eng.TakeOver(ctx, id, "re-attached to its client's retry")
	if errors.Is(err, fulfill.ErrNotAwaiting) {
		return errors.Join(mcpfront.ErrPastApproval, err)
	}
	return err
}

// callKey is the index's key of a call: the client, the upstream, the
// tool and its arguments in their canonical JSON (approval.Canonical, the
// RFC 8785 form call digests are made of, so that a retry that orders or
// spells them otherwise is the same call), hashed. ok is false for
// arguments that have no canonical form: such a call is not indexed, and
// its retry is a new call (never another call's approval).
func callKey(p mcpfront.Proposal) (key string, ok bool) {
	args := []byte(p.Tool.Arguments)
	if len(args) == 0 {
		args = []byte("null")
	}
	args, err := approval.Canonical(args)
	if err != nil {
		return "", false
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(p.Proposer), []byte(p.Server), []byte(p.Tool.Name), args} {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(part))))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)), true
}
