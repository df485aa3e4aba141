// Package sidecar is fulfiller's one composition root: it builds and
// runs the sidecar `fulfiller run` is (the agent client, the policy
// engine and its shadow, the state store, the approvals, the grants, the
// fulfiller, the decision log, the metrics and operator API, the
// notifications, the tool metadata) with one start/stop lifecycle.
// `fulfiller run`, `fulfiller demo` (internal/demo) and `fulfiller
// bench` (internal/loadtest) all start their fulfiller here, so what the
// demo shows and the bench measures is what operators run.
//
// The lifecycle is Caddy's: the sidecar is a list of parts with one
// shape, Start(ctx) and Stop, run by one runner. New checks the
// configuration and builds the parts, nothing that runs; Start starts
// them in order: the operations surface (the decision log and the
// listener) first, so that probes answer 503 while the policy loads and
// the agent joins, then the notifier, the policy (its shadow and the
// tool metadata), the state store and its probe, the join, the
// approvals, the grants, the watches, and the fulfiller last. When one
// fails, those started before it are stopped again in reverse. Stop
// stops them all in reverse, each once: the fulfiller answers what is
// pending while the client is still joined, then the watches, the
// approvals, the client (after which the shutdown is accounted for), the
// probe and the store (its lease removed), the notifier, the decision
// log (flushed) and the listener. Each goroutine is its part's: started
// in its Start, ended and waited for in its Stop. Run is Start, a wait
// for ctx, and Stop.
package sidecar

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/policies"
)

// Config is a sidecar's configuration, already parsed and checked for
// what only the command line can say (flag names, files that must
// exist): the sidecar parses no flags. Zero values take the defaults of
// the packages they go to.
type Config struct {
	// Gateway is the gateway's WebSocket URL (ws:// or wss://).
	Gateway string
	// Space is the space id sent in the join frame, reported to the
	// policies and naming the store's buckets ("": the gateway's).
	Space string
	// Token is the participant token; never logged.
	Token string
	// ID is the participant id to join as.
	ID string
	// MaxFrame and JoinTimeout are agent.Config's.
	MaxFrame    int64
	JoinTimeout time.Duration

	// Policy is how the live policy loads. A Remote bundle's Observer,
	// when nil, is the metrics.
	Policy policies.Options
	// Shadow, when set, loads a shadow policy: asked about every
	// decision beside Policy, logged and counted, never acted on.
	Shadow *policies.Options
	// ToolMetadata is the file of tool annotations the operator
	// declares ("": none); hot-reloaded.
	ToolMetadata string

	// State is the store of pending work. Nil keeps the records in the
	// process's own maps (fulfill.Config.Store nil: a state.Local, no
	// NATS): only bench --state none does, to measure the decision path
	// alone; run, demo and bench otherwise always have one (memory at
	// least).
	State *StateConfig

	// Fulfill is the lifecycle's limits and timeouts (zero values:
	// fulfill's defaults, which are run's flag defaults except
	// StatusChats, on in run). The sidecar sets its SpaceID, Approvals,
	// Observer, Logger, Store, Grants, Shadow, ShadowTimeout
	// (Policy.Timeout) and ToolMetadata, and its Approvers when nil
	// (Approvers).
	Fulfill fulfill.Config

	// Approvers are asked when an escalating decision names none.
	Approvers []string
	// Keys are the approvers whose answers count only when signed: the
	// --approver-keys file, reloaded while the sidecar runs (nil: none).
	// The fulfiller verifies each answer, and the decision log marks each
	// approver, under the keys in force at that moment.
	Keys *approverkeys.Watcher
	// PromptKey, when set, signs every approval prompt.
	PromptKey ed25519.PrivateKey
	// GatewayAuthenticatesFrom states that the gateway authenticates
	// senders, so a grant may be pinned to a proposer.
	GatewayAuthenticatesFrom bool

	// Ops is the decision log and the HTTP listener.
	Ops OpsConfig
	// Notify are the targets that hear of prompts opening and ending,
	// outside the space (none: no notifier).
	Notify []notify.Target
	// InboxURL is the approval inbox's page the notifications link to.
	InboxURL string

	// Observer, when set, also sees every lifecycle event (the demo's
	// narrator, the bench's counters), after the metrics and the
	// decision log.
	Observer fulfill.Observer
	// ApprovalObserver, when set, also sees every elicitation event,
	// after the metrics, the decision log and the notifier.
	ApprovalObserver func(elicit.Event)

	// Logger gets the components' logs [discarded].
	Logger *slog.Logger
}

// Part names the part of a sidecar that failed to start, so that the
// command can say which flag or file is to blame.
type Part string

// The parts a StartError names.
const (
	PartDecisionLog  Part = "decision log"
	PartHTTP         Part = "http"
	PartPolicy       Part = "policy"
	PartShadow       Part = "shadow policy"
	PartToolMetadata Part = "tool metadata"
	PartState        Part = "state"
	PartJoin         Part = "join"
)

// StartError is why Start failed: the part and its cause. Its message is
// the cause's, unchanged, so that the command can prefix the flag.
type StartError struct {
	Part Part
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// ShutdownError is what Stop returns when answers owed at shutdown were
// lost or cancellations were not sent: the gateway could not be reached
// within the fulfiller's ShutdownTimeout. Stop has logged it already.
type ShutdownError struct {
	Owed, Lost, Kept, Unsent int
	msg                      string
}

func (e *ShutdownError) Error() string { return e.msg }

// Sidecar is one fulfiller participant and everything it runs. Its
// methods are safe to call from one goroutine at a time; the accessors
// may be called from any once Start has returned.
type Sidecar struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	started bool
	stopped bool
	stopErr error
	parts   runner // in start order; Stop stops them backwards

	// The parts the accessors read.
	ops    *opsRuntime
	policy *policyPart
	store  *storePart // nil without Config.State
	client *clientPart
	grants *grantsPart
	ful    *fulfillerPart
}

// New checks cfg and builds the sidecar's parts; nothing runs until
// Start.
func New(cfg Config) (*Sidecar, error) {
	if cfg.Gateway == "" {
		return nil, errors.New("sidecar: no gateway")
	}
	if cfg.ID == "" {
		return nil, errors.New("sidecar: no participant id")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sidecar{cfg: cfg, log: cfg.Logger, parts: runner{log: cfg.Logger}}
	c, log := &s.cfg, s.log

	// The operations surface first, so that probes answer (503) while
	// the policy loads and the agent joins; stopped last: after the
	// fulfiller has stopped, the decision log is
	// flushed, then the HTTP server stops.
	s.ops = newOpsRuntime(log, c.Ops, c.Keys.Has)
	s.parts.add("operations", s.ops)
	// Before the join, so that a bad target stops the sidecar before it
	// answers anything; stopped after the fulfiller.
	nt := newNotifier(c, s.ops.metrics, log)
	if nt != nil {
		s.parts.add("notifier", nt)
	}
	s.policy = &policyPart{cfg: c, log: log, ops: s.ops}
	s.parts.add("policy", s.policy)
	// The store opens before the join, its lease removed after the
	// client has left.
	if c.State != nil {
		s.store = &storePart{cfg: c.State, member: c.ID, room: c.Space, maxPending: c.Fulfill.MaxPending, metrics: s.ops.metrics, log: log}
		s.parts.add("state store", s.store)
		s.parts.add("state store probe", &storeProbe{store: s.store, source: s.ops.source})
	}
	s.client = &clientPart{cfg: c, log: log, store: s.store}
	s.ful = &fulfillerPart{cfg: c, log: log, ops: s.ops, policy: s.policy, store: s.store, client: s.client, done: make(chan struct{})}
	s.parts.add("shutdown account", &shutdownAccount{log: log, client: s.client, ful: s.ful})
	s.parts.add("client", s.client)
	approvals := &approvalsPart{cfg: c, log: log, ops: s.ops, notifier: nt, client: s.client}
	s.parts.add("approvals", approvals)
	s.grants = &grantsPart{cfg: c, log: log, ops: s.ops, store: s.store}
	s.parts.add("grants", s.grants)
	s.parts.add("watches", &watches{log: log, policy: s.policy, keys: c.Keys, grants: func(ctx context.Context) error { return s.grants.reg.Run(ctx) }})
	// The fulfiller, last: it answers from its start on, until Stop.
	s.ful.approvals, s.ful.grants = approvals, s.grants
	s.parts.add("fulfiller", s.ful)
	return s, nil
}

// Start starts every part, in order: the operations surface, the
// notifier, the policy (and shadow, and tool metadata), the store and
// its lease (and its probe), the join, the approvals, the grants, the
// watches, and the fulfiller. ctx bounds the starting only (the policy
// load, the store's opening, the join); what runs afterwards runs until
// Stop. On an error everything started so far is stopped again, in
// reverse order, and the error is a *StartError naming the part.
func (s *Sidecar) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("sidecar: started twice, or after Stop")
	}
	s.started = true
	if err := s.parts.Start(ctx); err != nil {
		s.stopped = true
		close(s.ful.done) // the fulfiller never ran
		return err
	}
	return nil
}

// Done is closed once the fulfiller has stopped answering: after Stop,
// or earlier when its input ended (the client closed for good).
func (s *Sidecar) Done() <-chan struct{} { return s.ful.done }

// Stop stops every part Start started, in reverse order: the fulfiller
// first (it stops taking proposals and answers every pending one,
// within Fulfill.ShutdownTimeout), then the watches, the approvals, the
// client, the store's probe and the store (its lease removed), the
// notifier (letting the last notifications out), the decision log
// (flushed) and the HTTP listener. No goroutine the sidecar started is
// left when it returns. It returns a *ShutdownError when answers owed
// were lost or cancellations were not sent, else the fulfiller's error.
// A second Stop returns the first's result.
func (s *Sidecar) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.stopped {
		s.stopped = true // a Start after it fails
		return s.stopErr
	}
	s.stopped = true
	s.stopErr = s.parts.Stop()
	return s.stopErr
}

// Run starts the sidecar, runs it until ctx ends (SIGINT or SIGTERM for
// `fulfiller run`) or the fulfiller stops by itself, and stops it. An
// interrupt while it starts (ctx ended during the store's opening or
// the join) is a clean stop: nil.
func (s *Sidecar) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.ful.done:
	}
	return s.Stop()
}

// Client is the sidecar's participant in the space.
func (s *Sidecar) Client() *agent.Client { return s.client.client }

// Policy is the live policy engine.
func (s *Sidecar) Policy() *policies.Engine { return s.policy.engine }

// Fulfiller is the proposal lifecycle.
func (s *Sidecar) Fulfiller() *fulfill.Fulfiller { return s.ful.ful }

// Grants is the registry of the grants approvers made.
func (s *Sidecar) Grants() *grantstore.Registry { return s.grants.reg }

// Store is the state store; nil without one (Config.State nil).
func (s *Sidecar) Store() *state.Store { return s.store.get() }

// OpsAddr is the address the operations listener bound ("" without
// one), once Start has returned.
func (s *Sidecar) OpsAddr() string { return s.ops.addr }
