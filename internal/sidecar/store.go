package sidecar

import (
	"context"
	"log/slog"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/outbox"
)

// StateConfig is where pending work lives (docs/design.md "Durable and
// shared pending work"): the same store, JetStream, in every mode.
type StateConfig struct {
	// Mode is the store: memory, a directory or an external cluster.
	Mode state.Mode
	// Creds is the NATS credentials file of an external Mode.
	Creds string
	// Lease and SeenTTL are state.Config's [state's defaults].
	Lease, SeenTTL time.Duration
	// Space names the buckets ["": Config.Space]. Only the bench sets
	// it, to keep its runs on an external cluster apart from a real
	// fulfiller's work.
	Space string
	// Observer, when set, is also told of every store operation, beside
	// the metrics.
	Observer state.Observer
}

// storePart is the state store, opened before the join: nothing is
// decided without somewhere to keep it. Its lease outlives Start's ctx
// (SIGTERM) so that peers do not adopt work this process is still
// answering; Stop, after the fulfiller and the client have stopped,
// closes the store and so removes the lease: peers adopt anything left
// at once. The sidecar has it only with a Config.State.
type storePart struct {
	cfg          *StateConfig
	member, room string // the participant id and the space
	maxPending   int
	metrics      *ops.Metrics
	log          *slog.Logger
	store        *state.Store
}

// Start opens the store and starts the lease; a failure is a
// *StartError of PartState.
func (p *storePart) Start(ctx context.Context) error {
	store, err := openStore(ctx, p.log, p.cfg, p.member, p.room, p.maxPending, p.metrics)
	if err != nil {
		return &StartError{Part: PartState, Err: err}
	}
	p.store = store
	return nil
}

// Stop closes the store, removing the lease; a failure is logged.
func (p *storePart) Stop() error {
	if err := p.store.Close(); err != nil {
		p.log.Error("state store close", "err", err)
	}
	return nil
}

// get is the store; nil without one (p nil) or before Start.
func (p *storePart) get() *state.Store {
	if p == nil {
		return nil
	}
	return p.store
}

// storeProbe is the part that probes the store's health in the
// background for /readyz and the metrics, from its opening until just
// before it closes.
type storeProbe struct {
	store   *storePart
	source  *ops.Source
	running tasks // the probe's Run
}

func (p *storeProbe) Start(ctx context.Context) error {
	probe := ops.NewStoreProbe(p.store.cfg.Mode.String(), p.store.store, 0)
	p.source.SetStore(probe)
	p.running.goRun(ctx, probe.Run)
	return nil
}

func (p *storeProbe) Stop() error {
	p.running.stop()
	return nil
}

// openStore opens the store and starts this member's lease. --state
// memory is the same embedded JetStream store with memory storage, so
// claims, records and the operator API behave as in the other modes;
// nothing survives the process, and the log says so. ctx bounds the
// opening only: the lease is renewed until Close, which removes it, so
// that a graceful shutdown still holds its work while it answers it.
func openStore(ctx context.Context, log *slog.Logger, cfg *StateConfig, member, space string, maxPending int, metrics *ops.Metrics) (*state.Store, error) {
	m := cfg.Mode
	if m.Kind == state.Memory {
		log.Warn("--state memory: pending work (open prompts, fulfilments in flight, queued answers) dies with this process, and no other fulfiller can share it")
	}
	if cfg.Space != "" {
		space = cfg.Space
	}
	var obs state.Observer = metrics
	if cfg.Observer != nil {
		obs = stateObservers{metrics, cfg.Observer}
	}
	store, err := state.Open(ctx, state.Config{
		Mode: m, Creds: cfg.Creds, Space: space, Member: member,
		MaxPending: maxPending, Lease: cfg.Lease, SeenTTL: cfg.SeenTTL,
		Observer: obs, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	if err := store.StartLease(context.WithoutCancel(ctx)); err != nil {
		_ = store.Close()
		return nil, err
	}
	lease, seenTTL := cfg.Lease, cfg.SeenTTL
	if lease == 0 {
		lease = state.DefaultLease
	}
	if seenTTL == 0 {
		seenTTL = state.DefaultSeenTTL
	}
	log.Info("state store open", "state", m.String(), "member", member, "lease", lease, "seen_ttl", seenTTL)
	return store, nil
}

// stateObservers tells each observer of every store event, in order.
type stateObservers []state.Observer

func (o stateObservers) StoreOp(op string, d time.Duration, err error) {
	for _, x := range o {
		x.StoreOp(op, d, err)
	}
}

func (o stateObservers) Claimed(won bool) {
	for _, x := range o {
		x.Claimed(won)
	}
}

func (o stateObservers) Adopted(from string, n int) {
	for _, x := range o {
		x.Adopted(from, n)
	}
}

func (o stateObservers) LeaseRenewed(err error) {
	for _, x := range o {
		x.LeaseRenewed(err)
	}
}

// fulfillStore is store as fulfill.Config.Store: nil with no store,
// never a typed nil.
func fulfillStore(store *state.Store) fulfill.Store {
	if store == nil {
		return nil
	}
	return store
}

// grantStore is the store grants are kept in: the pending-work store, or
// none (memory only, for this process) without one.
func grantStore(store *state.Store) grantstore.Store {
	if store == nil {
		return nil
	}
	return store
}

// rpcIDSource is agent.Config.RPCIDs for store: ids unique across the
// group and restarts (rule 11); nil, the in-process counter, without a
// store.
func rpcIDSource(store *state.Store) func(context.Context) (int64, error) {
	if store == nil {
		return nil
	}
	return store.NextRPCID
}

// restoreOutbox is agent.Config.Outbox for store: answers queued while the
// gateway was unreachable are kept in the store, and those an earlier
// process left there are sent on the first session while their proposal
// may still wait (maxAge: the pending TTL). nil (the in-memory outbox)
// without a store.
func restoreOutbox(ctx context.Context, log *slog.Logger, store *state.Store, maxAge time.Duration) (agent.Outbox, error) {
	if store == nil {
		return nil, nil
	}
	d := outbox.New(store, agent.DefaultOutboxSize, log)
	if _, _, err := d.Restore(ctx, maxAge); err != nil {
		return nil, err
	}
	return d, nil
}
