// Package sidecar is fulfiller's one composition root: it builds and
// runs the sidecar `fulfiller run` is (the agent client, the policy
// engine and its shadow, the state store, the elicitor, the grants, the
// fulfiller, the decision log, the metrics and operator API, the
// notifications, the tool metadata) with one start/stop lifecycle.
// `fulfiller run`, `fulfiller demo` (internal/demo) and `fulfiller
// bench` (internal/loadtest) all start their fulfiller here, so what the
// demo shows and the bench measures is what operators run.
//
// The lifecycle is Caddy's: New checks the configuration and builds
// nothing that runs; Start starts every part in order, the operations
// surface first (so that probes answer 503 while the policy loads and
// the agent joins) and the fulfiller last; Stop stops them in reverse
// order, each goroutine by its owner, and reports how the pending
// proposals were answered. Run is Start, a wait for ctx, and Stop.
package sidecar

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
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
	// StatusChats, on in run). The sidecar sets its SpaceID, Escalator,
	// Observer, Logger, Store, Grants, Shadow, ShadowTimeout
	// (Policy.Timeout) and ToolMetadata, and its Approvers when nil
	// (Approvers).
	Fulfill fulfill.Config

	// Approvers are asked when an escalating decision names none.
	Approvers []string
	// Keys are the approvers whose answers count only when signed: the
	// --approver-keys file, reloaded while the sidecar runs (nil: none).
	// The elicitor verifies each answer, and the decision log marks each
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
	ops *opsRuntime

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopErr  error
	cleanups []func() // in start order; Stop runs them backwards

	engine   *policies.Engine
	client   *agent.Client
	ful      *fulfill.Fulfiller
	grantReg *grantstore.Registry
	store    *state.Store
	runErr   error         // fulfill.Run's, once runDone is closed
	runDone  chan struct{} // closed when the fulfiller's Run has returned
	stopRun  context.CancelFunc
}

// New checks cfg and builds the sidecar; nothing runs until Start.
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
	return &Sidecar{cfg: cfg, log: cfg.Logger, ops: newOpsRuntime(cfg.Logger), runDone: make(chan struct{})}, nil
}

// onStop registers f to run when the sidecar stops, before whatever was
// registered earlier.
func (s *Sidecar) onStop(f func()) { s.cleanups = append(s.cleanups, f) }

// unwind runs the registered stops backwards.
func (s *Sidecar) unwind() {
	for _, f := range slices.Backward(s.cleanups) {
		f()
	}
	s.cleanups = nil
}

// Start starts every part, in order: the operations surface, the
// notifier, the policy (and shadow, and tool metadata), the store and
// its lease, the join, the elicitor, the grants, the watches, and the
// fulfiller. ctx bounds the starting only (the policy load, the store's
// opening, the join); what runs afterwards runs until Stop. On an error
// everything started so far is stopped again, and the error is a
// *StartError naming the part.
func (s *Sidecar) Start(ctx context.Context) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("sidecar: started twice, or after Stop")
	}
	s.started = true
	defer func() {
		if err != nil {
			s.unwind()
			s.stopped = true
			close(s.runDone)
		}
	}()
	cfg, log := &s.cfg, s.log

	// The operations surface starts first, so that probes answer (503)
	// while the policy loads and the agent joins. Registered first, so
	// it stops last: after the fulfiller has stopped and the elicitor
	// too, flush the decision log, then stop the HTTP server.
	if err := s.ops.start(cfg.Ops, cfg.Keys.Has); err != nil {
		return err
	}
	s.onStop(s.ops.close)
	// Before the join, so that a bad target stops the sidecar before it
	// answers anything; stopped after the elicitor: the prompt.ended of
	// the prompts cancelled at shutdown still go out.
	notifier := s.startNotifier()
	if notifier != nil {
		s.onStop(notifier.stop)
	}

	popts := cfg.Policy
	if popts.Logger == nil {
		popts.Logger = log
	}
	if r := popts.Remote; r != nil && r.Observer == nil {
		remote := *r
		remote.Observer = s.ops.metrics
		popts.Remote = &remote
	}
	engine, err := LoadPolicy(ctx, popts, log)
	if err != nil {
		return &StartError{Part: PartPolicy, Err: err}
	}
	s.engine = engine
	log.Info("policy loaded", "revision", engine.Revision(), "files", len(engine.Files()))
	var shadow *policies.Engine
	var shadowDecider fulfill.Decider // a nil *Engine in it would not be nil
	if cfg.Shadow != nil {
		sopts := *cfg.Shadow
		if sopts.Logger == nil {
			sopts.Logger = log.With("policy", "shadow")
		}
		if shadow, err = policies.Load(ctx, sopts); err != nil {
			return &StartError{Part: PartShadow, Err: err}
		}
		log.Info("shadow policy loaded; it is logged and counted, never acted on", "revision", shadow.Revision(), "files", len(shadow.Files()))
		shadowDecider = shadow
	}
	s.ops.source.SetPolicy(engine)
	if cfg.Keys != nil {
		s.ops.source.SetApproverKeys(cfg.Keys)
	}
	var meta *toolmeta.Watcher
	var toolMetadata fulfill.ToolMetadata // a nil *Watcher in it would not be nil
	if cfg.ToolMetadata != "" {
		if meta, err = toolmeta.Open(cfg.ToolMetadata, toolmeta.Options{Logger: log}); err != nil {
			return &StartError{Part: PartToolMetadata, Err: err}
		}
		log.Info("tool metadata loaded", "file", cfg.ToolMetadata, "entries", meta.Metadata().Len())
		toolMetadata = meta
	}

	// The store opens before the join: nothing is decided without
	// somewhere to keep it. Its lease outlives ctx (SIGTERM) so that
	// peers do not adopt work this process is still answering; Close,
	// run after the fulfiller and the client stopped, ends it: the lease
	// is removed, so peers adopt anything left at once.
	var store *state.Store
	if cfg.State != nil {
		if store, err = openStore(ctx, log, cfg.State, cfg.ID, cfg.Space, cfg.Fulfill.MaxPending, s.ops.metrics); err != nil {
			return &StartError{Part: PartState, Err: err}
		}
		s.store = store
		s.onStop(func() {
			if err := store.Close(); err != nil {
				log.Error("state store close", "err", err)
			}
		})
		// Its health is known to /readyz and the metrics, probed in the
		// background until just before it closes.
		probe := ops.NewStoreProbe(cfg.State.Mode.String(), store, 0)
		s.ops.source.SetStore(probe)
		probeCtx, stopProbe := context.WithCancel(context.WithoutCancel(ctx))
		probeDone := make(chan struct{})
		go func() { defer close(probeDone); probe.Run(probeCtx) }()
		s.onStop(func() { stopProbe(); <-probeDone })
	}
	maxAge := cfg.Fulfill.PendingTTL
	if maxAge <= 0 {
		maxAge = 10 * time.Minute // fulfill.Config's default
	}
	out, err := restoreOutbox(ctx, log, store, maxAge)
	if err != nil {
		return &StartError{Part: PartState, Err: err}
	}
	// The shutdown's account, once the client has closed (registered
	// before the client's close, so it runs after it): cancellations
	// that waited for a session are lost when the client closes.
	s.onStop(s.account)

	// Subscribed from the join on (DialSubscribed): a proposal sent the
	// moment the fulfiller appears in the roster would otherwise arrive
	// before Subscribe and never be answered. It sees every frame (All):
	// in a group an approver answers the member that asked, and when
	// that member's work was adopted, the adopter must hear the answer
	// too.
	client, subs, err := agent.DialSubscribed(ctx, agent.Config{
		URL: cfg.Gateway, Space: cfg.Space, Token: cfg.Token, ID: cfg.ID,
		MaxFrame: cfg.MaxFrame, JoinTimeout: cfg.JoinTimeout, Logger: log,
		RPCIDs: rpcIDSource(store), Outbox: out,
	}, agent.SubscribeOptions{All: true, Buffer: 1024, Impersonations: true})
	if err != nil {
		return &StartError{Part: PartJoin, Err: fmt.Errorf("join %s as %s: %w", cfg.Gateway, cfg.ID, err)}
	}
	s.client = client
	sub := subs[0]
	s.onStop(func() { _ = client.Close(); sub.Close() })
	// The agent's "joined space" line (gateway, id, the capabilities
	// granted and who else is there) is the one line a join logs.
	if why := ops.CannotAnswer(client.Capabilities()); why != "" {
		log.Error("fulfiller cannot answer proposals; /readyz reports not ready until the gateway grants more", "reason", why)
	}

	// Grants are offered wherever the policy's decision is grantable: the
	// policy, not a flag, decides whether people may grant.
	approvalObs := s.ops.approvalObserver()
	if notifier != nil {
		approvalObs = notifier.observer(approvalObs)
	}
	if extra := cfg.ApprovalObserver; extra != nil {
		next := approvalObs
		approvalObs = func(e elicit.Event) { next(e); extra(e) }
	}
	// The humans are asked by the fulfiller's core; elicit is the codec
	// of its prompts and answers, and the Event its observers read.
	ecfg := elicit.Config{DefaultApprovers: cfg.Approvers, Logger: log}
	if cfg.Keys != nil {
		ecfg.CurrentKeys = cfg.Keys.Keys
	}
	elicit.LogKeys(ecfg)
	approvals := &fulfill.Approvals{Codec: elicit.Codec{Signer: client.ID(), PromptKey: cfg.PromptKey, Logger: log}, OfferGrants: true,
		Observer: func(h lifecycle.Human) { approvalObs(elicit.EventOf(h)) }}
	if cfg.Keys != nil {
		keys := cfg.Keys
		approvals.CurrentKeys = func() lifecycle.KeySet { return keys.Keys() }
	}

	// Grants approvers make live in the store, mirrored in memory.
	grantReg := grantstore.NewRegistry(grantStore(store), log)
	grantReg.GatewayAuthenticatesFrom(cfg.GatewayAuthenticatesFrom)
	grantReg.OnExpire(func(grants.Grant) { s.ops.metrics.GrantExpired() })
	s.grantReg = grantReg
	s.ops.source.SetGrants(grantReg)

	fcfg := cfg.Fulfill
	fcfg.SpaceID = cfg.Space
	fcfg.Approvals = approvals
	fcfg.Observer = s.ops.observer()
	if cfg.Observer != nil {
		fcfg.Observer = fulfill.Observers{fcfg.Observer, cfg.Observer}
	}
	fcfg.Logger = log
	fcfg.Store = fulfillStore(store)
	fcfg.Grants = grantReg
	fcfg.Shadow = shadowDecider
	fcfg.ShadowTimeout = cfg.Policy.Timeout
	fcfg.ToolMetadata = toolMetadata
	if fcfg.Approvers == nil {
		fcfg.Approvers = cfg.Approvers
	}
	ful := fulfill.New(client, engine, fcfg)
	s.ful = ful
	s.ops.running(client, engine, ful, grantReg)

	// The watches: policy hot reload, the remote bundle's polling, the
	// grants' expiry, tool metadata, approver keys and shadow hot reload. Each reload
	// keeps the last good version when a change is broken (logged).
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	watch := func(what string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(watchCtx); err != nil && what != "" && !errors.Is(err, context.Canceled) {
				log.Error(what+" watch stopped; "+hotReloadOff(what), "err", err)
			}
		}()
	}
	watch("policy", engine.Watch)
	watch("", engine.PollBundle) // a remote bundle's downloads are logged and counted by the engine
	watch("", grantReg.Run)
	if meta != nil {
		watch("tool metadata", meta.Watch)
	}
	if cfg.Keys != nil {
		watch("approver keys", cfg.Keys.Watch)
	}
	if shadow != nil {
		watch("shadow policy", shadow.Watch)
	}
	s.onStop(func() { stopWatch(); wg.Wait() })

	// The fulfiller, last: it answers from here on, until Stop.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	s.stopRun = stopRun
	go func() {
		defer close(s.runDone)
		s.runErr = ful.Run(runCtx, sub.C())
	}()
	s.onStop(func() { stopRun(); <-s.runDone })
	return nil
}

// hotReloadOff is the end of the log line of a watch that stopped.
func hotReloadOff(what string) string {
	if what == "policy" {
		return "hot reload is off"
	}
	return "its hot reload is off"
}

// Done is closed once the fulfiller has stopped answering: after Stop,
// or earlier when its input ended (the client closed for good).
func (s *Sidecar) Done() <-chan struct{} { return s.runDone }

// Stop stops every part Start started, in reverse order: the fulfiller
// first (it stops taking proposals and answers every pending one,
// within Fulfill.ShutdownTimeout), then the watches, the elicitor, the
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
	s.unwind()
	return s.stopErr
}

// account, once the fulfiller and the client have stopped, says how the
// answers owed at shutdown went, and sets what Stop returns.
func (s *Sidecar) account() {
	if s.ful == nil {
		return
	}
	<-s.runDone
	log := s.log
	owed, lost := s.ful.ShutdownAnswers()
	kept := s.ful.ShutdownKept()
	unsent := s.client.Queued()
	if lost > 0 || unsent > 0 {
		msg := fmt.Sprintf("stopped; %d of %d answers were not delivered and %d cancellations were not sent", lost, owed, unsent)
		if kept > 0 {
			msg = fmt.Sprintf("stopped; %d answers could not be written and are kept in the state store, to be sent after a restart on it; %d of %d answers were lost and %d cancellations were not sent", kept, lost, owed, unsent)
		}
		log.Error(msg, "undelivered", lost, "kept", kept, "answers", owed, "cancellations_unsent", unsent)
		s.stopErr = &ShutdownError{Owed: owed, Lost: lost, Kept: kept, Unsent: unsent, msg: msg}
		return
	}
	if s.runErr != nil {
		s.stopErr = s.runErr
		return
	}
	if kept > 0 {
		// Not lost: the next run on this store sends them (docs/operations.md).
		log.Warn(fmt.Sprintf("stopped; %d of %d answers could not be written and are kept in the state store, to be sent after a restart on it", kept, owed), "kept", kept, "answers", owed)
		return
	}
	log.Info("stopped; every pending proposal was answered", "answers", owed)
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
	case <-s.runDone:
	}
	return s.Stop()
}

// Client is the sidecar's participant in the space.
func (s *Sidecar) Client() *agent.Client { return s.client }

// Policy is the live policy engine.
func (s *Sidecar) Policy() *policies.Engine { return s.engine }

// Fulfiller is the proposal lifecycle.
func (s *Sidecar) Fulfiller() *fulfill.Fulfiller { return s.ful }

// Grants is the registry of the grants approvers made.
func (s *Sidecar) Grants() *grantstore.Registry { return s.grantReg }

// Store is the state store; nil without one (Config.State nil).
func (s *Sidecar) Store() *state.Store { return s.store }

// OpsAddr is the address the operations listener bound ("" without
// one), once Start has returned.
func (s *Sidecar) OpsAddr() string { return s.ops.addr }

// LoadPolicy loads the live policy as the sidecar does (and `run
// --check`, which must fail exactly when run would), warning when it is
// the built-in one, which rejects everything, or when it reads data no
// document provides.
func LoadPolicy(ctx context.Context, opts policies.Options, log *slog.Logger) (*policies.Engine, error) {
	engine, err := policies.Load(ctx, opts)
	if err != nil {
		return nil, err
	}
	if engine.IsDefault() {
		log.Warn("no --policy given: the built-in policy rejects every proposal")
	}
	if missing := engine.MissingData(); len(missing) > 0 {
		log.Warn(fmt.Sprintf("the policies read %s, which no --data provides: such a read is undefined, so the rules that need it never match", strings.Join(missing, ", ")))
	}
	return engine, nil
}
