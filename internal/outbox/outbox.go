// Package outbox keeps the agent's outbox (agent.Outbox) in the state
// store, so that answers queued while the link to the gateway is down
// survive a restart of fulfiller and are sent after it, while their
// proposal still matters (docs/design.md "Durable and shared pending work").
//
// It sits between agent and state because neither may import the other:
// agent is also the approver's and proposer's client, and state must not
// know about envelopes.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// Store is what Durable needs of the state store; *state.Store provides
// it. Answers are keyed by the proposal they answer.
type Store interface {
	Enqueue(ctx context.Context, proposalID string, envelope []byte) error
	Ack(ctx context.Context, proposalID string) error
	Outbox(ctx context.Context) ([]*state.Answer, error)
}

var _ Store = (*state.Store)(nil)

// opTimeout bounds each store write the outbox makes: Put and Done are
// called by the agent without a context.
const opTimeout = 5 * time.Second

// Durable is an agent.Outbox whose answers are also written to the state
// store. An answer is an mcp/reject: its correlation_id names the proposal
// it answers, the store's key. Other envelopes (notifications/cancelled,
// safe to lose with the process) and answers the store cannot take are
// kept in memory only, as agent.MemoryOutbox keeps them, and logged.
// A fulfilment mcp/request is never written to the store: after a restart
// it must not be sent again (a tool call must not run twice).
type Durable struct {
	store Store
	mem   *agent.MemoryOutbox
	log   *slog.Logger

	mu   sync.Mutex
	kept map[string]string // envelope id → proposal id, for answers in the store
}

var _ agent.OutboxDoner = (*Durable)(nil)

// New makes a Durable outbox over store holding at most limit envelopes in
// memory (see agent.MemoryOutbox). log may be nil.
func New(store Store, limit int, log *slog.Logger) *Durable {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Durable{store: store, mem: agent.NewMemoryOutbox(limit), log: log, kept: map[string]string{}}
}

// Restore loads this member's answers that an earlier process left in the
// store, to be sent on the client's first session. An answer enqueued more
// than maxAge ago no longer matters (its proposer stopped waiting: maxAge
// is --pending-ttl, the longest a proposal waits): it is removed from the
// store and counted in dropped. An entry that is not a valid envelope is
// removed and dropped too.
func (d *Durable) Restore(ctx context.Context, maxAge time.Duration) (restored, dropped int, err error) {
	answers, err := d.store.Outbox(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("restore outbox: %w", err)
	}
	now := time.Now()
	for _, a := range answers {
		env, derr := agent.Decode(a.Envelope)
		if derr != nil || now.Sub(a.Enqueued) > maxAge {
			why := "older than its proposal may wait"
			if derr != nil {
				why = "not an envelope: " + derr.Error()
			}
			d.log.Warn("queued answer from before the restart dropped", "proposal", a.ProposalID, "enqueued", a.Enqueued, "why", why)
			if err := d.store.Ack(ctx, a.ProposalID); err != nil {
				return restored, dropped, fmt.Errorf("restore outbox: %w", err)
			}
			dropped++
			continue
		}
		d.mu.Lock()
		d.kept[env.ID] = a.ProposalID
		d.mu.Unlock()
		d.mem.Put(env)
		restored++
	}
	if restored > 0 {
		d.log.Info("answers queued before the restart will be sent once the space is joined", "answers", restored)
	}
	return restored, dropped, nil
}

// Put keeps env. An answer is written to the store first; if the store
// already holds the answer to its proposal (the fulfiller's own
// write-ahead, or a put-back after Take) that record is the one Done
// removes.
func (d *Durable) Put(env agent.Envelope) {
	if id, ok := answerOf(env); ok {
		d.mu.Lock()
		_, known := d.kept[env.ID]
		d.mu.Unlock()
		if !known {
			d.persist(env, id)
		}
	}
	d.mem.Put(env)
}

func (d *Durable) persist(env agent.Envelope, proposalID string) {
	raw, err := agent.Encode(env)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err = d.store.Enqueue(ctx, proposalID, raw)
		cancel()
	}
	switch {
	case err == nil, errors.Is(err, state.ErrExists):
		d.mu.Lock()
		d.kept[env.ID] = proposalID
		d.mu.Unlock()
	default:
		d.log.Error("queued answer kept in memory only: a restart before the gateway is back loses it", "proposal", proposalID, "envelope", env.ID, "err", err)
	}
}

// Take removes and returns everything kept in memory, oldest first; the
// store keeps its copies until Done.
func (d *Durable) Take() []agent.Envelope { return d.mem.Take() }

// Len reports how many envelopes are kept.
func (d *Durable) Len() int { return d.mem.Len() }

// Done removes a written (or given up) answer from the store.
func (d *Durable) Done(env agent.Envelope) {
	d.mu.Lock()
	id, ok := d.kept[env.ID]
	delete(d.kept, env.ID)
	d.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := d.store.Ack(ctx, id); err != nil {
		// Sent again after a restart: the same envelope (same id) twice,
		// which receivers drop as a repeat; losing it would be worse.
		d.log.Warn("sent answer not removed from the store; it may be sent again after a restart", "proposal", id, "err", err)
	}
}

// answerOf reports whether env is an answer to keep across restarts, and
// the proposal it answers.
func answerOf(env agent.Envelope) (proposalID string, ok bool) {
	if env.Kind != agent.KindReject {
		return "", false
	}
	id := env.CorrelationID.First()
	return id, id != ""
}
