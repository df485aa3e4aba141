// Package mcpserve is the composition root of `fulfiller mcp` (the MCP
// front end, agent/mcpfront) as internal/sidecar is `fulfiller run`'s:
// it loads the policy, opens the state directory (tool pins and grants,
// shared by every `fulfiller mcp` process on it), the decision log, and
// wires the front end to the engine (fulfill.Engine) through
// agent/mcpfront/mcpbind. The command only parses flags.
//
// What is kept where: the pending proposals' records live in this
// process only (the engine's state.Local): nothing is owed after a
// crash in the MCP front end, a client's request ends with its
// connection, so no call waits for a disk sync. Pins and grants are in
// --state (a directory several processes share, or memory), the
// decision log in --decision-log.
//
// It is built of `run`'s parts (internal/sidecar: the operations
// surface, the notifier, the policy, the watches, one Runner starting
// them in order and stopping them in reverse) and its own: the state
// store, the grants, the team inbox hosted in-process (its approvers
// reached through an approver.Local, the in-process channel that
// stands for a space), the engine and the front end.
package mcpserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/agent/mcpfront/mcpbind"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/sidecar"
	"github.com/mewkit/fulfiller/policies"
)

// Config is a front end's configuration, parsed and checked by the
// command. Zero values take the packages' defaults.
type Config struct {
	// Upstreams are the servers the clients' calls go to (stdio: one).
	Upstreams []mcpfront.Upstream
	// Policy is how the policy loads.
	Policy policies.Options
	// State is where pins and grants are kept: a directory (shared by
	// every process on it), memory, or a NATS cluster (External: shared
	// by every instance on it, see "Several instances" in docs/mcp.md).
	State state.Mode
	// StateCreds is the NATS credentials file of an External State ("":
	// none).
	StateCreds string
	// ToolMetadata is the file of tool annotations the operator declares
	// per upstream NAME and tool ("": none); hot-reloaded.
	ToolMetadata string
	// DecisionLog is the decision log's path ("": none); reopened on
	// SIGHUP.
	DecisionLog string
	// HTTP is the address of /healthz, /readyz, /metrics and the
	// operator API ("": none; port 0 picks one, which OpsAddr names),
	// HTTPToken the operator API's bearer token ("": /v1/ answers 401).
	// The metrics are kept only with it.
	HTTP, HTTPToken string
	// ClientID is the proposer of a client no bearer token names
	// ["local"].
	ClientID string
	// LostCallSweep is how often an instance on a NATS cluster looks
	// for calls held by instances that are gone, past their deadline,
	// to end them [DefaultLostCallSweep]. StateLease is its lease in the
	// cluster, how long after it is gone the others count it lost
	// [state.DefaultLease].
	LostCallSweep, StateLease time.Duration
	// ApprovalTimeout, FulfillTimeout, PendingTTL, MaxPending,
	// MaxInflight and ShutdownTimeout are fulfill.Config's.
	ApprovalTimeout, FulfillTimeout, PendingTTL, ShutdownTimeout time.Duration
	MaxPending, MaxInflight                                      int
	// Approvers are asked when an escalating decision names none.
	Approvers []string
	// Keys are the approvers whose answers count only when signed (the
	// --approver-keys file, reloaded while it runs; nil: none).
	Keys *approverkeys.Watcher
	// Inbox, when set, is the team inbox hosted in this process, served
	// on InboxListener: over HTTPS with InboxCertFile and InboxKeyFile
	// (PEM), else plain HTTP (loopback, or behind a proxy that
	// terminates TLS). Its enrolled approvers are reached through it,
	// every approver id but "@caller".
	Inbox                       *teaminbox.Server
	InboxListener               net.Listener
	InboxCertFile, InboxKeyFile string
	// Notify are the targets told of prompts opening and ending (none:
	// no notifier); InboxURL the page their notifications link to.
	Notify   []notify.Target
	InboxURL string
	// ApprovalObserver, when set, also sees every step with the humans,
	// after the decision log, the metrics and the notifier.
	ApprovalObserver func(elicit.Event)
	// Version is fulfiller's, in the clientInfo the upstreams see.
	Version string
	// Logger logs to stderr, never stdout [discarded].
	Logger *slog.Logger
}

// FulfillerID is who the prompts to the team inbox's approvers come
// from: the approver clients show only what this id asks.
const FulfillerID = "fulfiller"

// Server is a running front end: the engine, the front end facing the
// clients and the upstreams, and what they keep. Serve clients with
// ServeStdio or Handler; Close stops it all.
type Server struct {
	log   *slog.Logger
	parts *sidecar.Runner
	ops   *sidecar.Ops
	store *storePart
	eng   *enginePart
	front *frontPart

	once     sync.Once
	closeErr error
}

// StartError names the part that failed to start (for the flag to
// blame): "policy", "tool metadata", "state", "decision log", "http",
// "front end".
type StartError struct {
	Part string
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Start loads and opens everything cfg names and runs the engine and the
// front end (the upstreams started) until Close. ctx bounds the start
// only. The parts start in order: the operations surface (the decision
// log and the listener), the notifier, the policy, the state store, the
// grants, the engine's binding and the team inbox, the watches, the
// engine, and the front end; Close stops them in reverse.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		cfg.Logger = log
	}
	if cfg.Policy.Logger == nil {
		cfg.Policy.Logger = log
	}
	s := &Server{log: log, parts: sidecar.NewRunner(log)}
	s.ops = sidecar.NewOps(log, sidecar.OpsConfig{DecisionLog: cfg.DecisionLog, HTTP: cfg.HTTP, HTTPToken: cfg.HTTPToken}, cfg.Keys.Has)
	s.parts.Add("operations", s.ops)
	notifier := sidecar.NewNotifier(cfg.Notify, cfg.InboxURL, s.ops.Metrics(), log)
	if notifier != nil {
		s.parts.Add("notifier", notifier)
	}
	policy := sidecar.NewPolicy(cfg.Policy, cfg.ToolMetadata, cfg.Keys, s.ops, log)
	s.parts.Add("policy", policy)
	s.store = &storePart{mode: cfg.State, creds: cfg.StateCreds, lease: cfg.StateLease, log: log}
	s.parts.Add("state store", s.store)
	gp := &grantsPart{store: s.store, ops: s.ops, log: log}
	s.parts.Add("grants", gp)
	s.eng = &enginePart{cfg: &cfg, log: log, ops: s.ops, notifier: notifier, policy: policy, store: s.store, grants: gp, done: make(chan struct{})}
	s.front = &frontPart{cfg: &cfg, log: log, store: s.store}
	s.eng.front = s.front
	if cfg.State.Kind == state.External {
		// Instances on one cluster share the calls held for approval:
		// a client's retry re-attaches on whichever it reaches.
		r := &reattacher{store: s.store, log: log}
		s.parts.Add("held calls", r)
		s.front.reattach, s.eng.reattach = r, r
	}
	// The binding and the front end are made before the team inbox, so
	// that its approvers' answers have somewhere to go.
	s.parts.Add("front end", &makeFront{f: s.front})
	if cfg.Inbox != nil {
		s.parts.Add("team inbox", &inboxPart{cfg: &cfg, log: log, front: s.front})
	}
	s.parts.Add("watches", sidecar.NewWatches(log, policy, cfg.Keys, func(ctx context.Context) error { return gp.reg.Run(ctx) }))
	s.parts.Add("engine", s.eng)
	if r := s.front.reattach; r != nil {
		every := cfg.LostCallSweep
		if every <= 0 {
			every = DefaultLostCallSweep
		}
		s.parts.Add("lost calls", &lostCalls{eng: s.eng, reattach: r, every: every, log: log})
	}
	s.parts.Add("front end run", s.front)
	if err := s.parts.Start(ctx); err != nil {
		return nil, startError(err)
	}
	return s, nil
}

// startError is the StartError of a part's failure: run's parts name
// theirs in a *sidecar.StartError.
func startError(err error) error {
	var own *StartError
	if errors.As(err, &own) {
		return own
	}
	var se *sidecar.StartError
	if errors.As(err, &se) {
		return &StartError{Part: string(se.Part), Err: se.Err}
	}
	return err
}

// storePart opens the store of pins and grants; Stop closes it.
type storePart struct {
	mode  state.Mode
	creds string
	lease time.Duration
	log   *slog.Logger
	store *state.Store
}

func (p *storePart) Start(ctx context.Context) error {
	store, err := openStore(ctx, p.mode, p.creds, p.lease, p.log)
	if err != nil {
		return &StartError{Part: "state", Err: err}
	}
	if p.mode.Kind == state.External {
		// The others tell this instance is gone by its lease lapsing:
		// only then do they end the calls it held (lostCalls). Close
		// removes it.
		if err := store.StartLease(context.WithoutCancel(ctx)); err != nil {
			_ = store.Close()
			return &StartError{Part: "state", Err: err}
		}
	}
	p.store = store
	return nil
}

func (p *storePart) Stop() error {
	if err := p.store.Close(); err != nil {
		p.log.Error("state store close", "err", err)
	}
	return nil
}

// grantsPart is the registry of the grants approvers make, kept in the
// store; its expiry and following of the store are a watch.
type grantsPart struct {
	store *storePart
	ops   *sidecar.Ops
	log   *slog.Logger
	reg   *grantstore.Registry
}

func (p *grantsPart) Start(context.Context) error {
	p.reg = grantstore.NewRegistry(p.store.store, p.log)
	// A client's id is its bearer token's (serve) or the local user's
	// (stdio), never a claim in a message: a grant may name it.
	p.reg.GatewayAuthenticatesFrom(true)
	metrics := p.ops.Metrics()
	p.reg.OnExpire(func(grants.Grant) { metrics.GrantExpired() })
	return nil
}

func (p *grantsPart) Stop() error { return nil }

// frontPart is the front end: made (with the engine's binding and the
// approvers' channel) by makeFront, run from its own Start until its
// Stop, the first to stop (the calls it still holds are answered
// "other" by the engine, which stops after it).
type frontPart struct {
	cfg   *Config
	log   *slog.Logger
	store *storePart

	bind      *mcpbind.Binding
	approvers *approver.Local // nil without the team inbox
	reattach  *reattacher     // nil unless on a NATS cluster
	front     *mcpfront.Front
	running   sync.WaitGroup
	stop      context.CancelFunc
}

// makeFront is the part that makes the front end and the binding, so
// that the team inbox, started after it, has the approvers' channel.
type makeFront struct{ f *frontPart }

func (m *makeFront) Start(context.Context) error {
	f := m.f
	opts := mcpbind.Options{Logger: f.log}
	if f.cfg.Inbox != nil {
		// The answers go to the binding, made just below: the channel's
		// deliver is only called once an approver answers a prompt.
		f.approvers = approver.NewLocal(FulfillerID, func(ctx context.Context, env agent.Envelope) error {
			return f.bind.ApproverAnswered(ctx, env)
		})
		opts.Approvers = f.approvers
	}
	f.bind = mcpbind.New(opts)
	fcfg := mcpfront.Config{Engine: f.bind, Pins: f.store.store, ClientID: f.cfg.ClientID, Version: f.cfg.Version, Logger: f.log}
	if f.reattach != nil {
		fcfg.Reattach = f.reattach
	}
	front, err := mcpfront.New(fcfg, f.cfg.Upstreams...)
	if err != nil {
		return &StartError{Part: "front end", Err: err}
	}
	f.front = front
	return nil
}

func (m *makeFront) Stop() error { return nil }

// Start runs the front end (its upstreams started) until Stop.
func (f *frontPart) Start(ctx context.Context) error {
	fctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	f.running.Go(func() { _ = f.front.Run(fctx) })
	return nil
}

// Stop stops the front end: the calls it still holds are answered.
func (f *frontPart) Stop() error {
	f.stop()
	f.running.Wait()
	return nil
}

// inboxPart is the team inbox hosted in this process: its page and API
// on the listener, and an approver client per enrolled approver joined
// to the approvers' channel, from before the engine runs until after it
// has stopped (the prompts it cancels at shutdown reach the cards).
type inboxPart struct {
	cfg   *Config
	log   *slog.Logger
	front *frontPart

	stop    context.CancelFunc
	running sync.WaitGroup
}

func (p *inboxPart) Start(ctx context.Context) error {
	ictx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p.stop = stop
	inbox, ln, local := p.cfg.Inbox, p.cfg.InboxListener, p.front.approvers
	join := func(_ context.Context, id string) (approver.Link, error) { return local.Join(id) }
	p.running.Go(func() {
		if err := inbox.Serve(ictx, ln, p.cfg.InboxCertFile, p.cfg.InboxKeyFile); err != nil {
			p.log.Error("team inbox stopped serving", "err", err)
		}
	})
	p.running.Go(func() {
		_ = inbox.Run(ictx, join, approver.Options{Fulfillers: []string{FulfillerID}, Open: webCards})
	})
	p.log.Info("team inbox serving", "listen", ln.Addr().String(), "enrolled", inbox.Enrolled())
	return nil
}

// webCards is how many cards the inbox's page shows at once, as inbox
// serve's.
const webCards = 64

func (p *inboxPart) Stop() error {
	p.stop()
	p.running.Wait()
	return nil
}

// enginePart is the engine: made with its observers, the approvals and
// the grants, and run from its Start until its Stop (after the front
// end's), which answers what is still open.
type enginePart struct {
	cfg      *Config
	log      *slog.Logger
	ops      *sidecar.Ops
	notifier *sidecar.Notifier
	policy   *sidecar.Policy
	store    *storePart
	grants   *grantsPart
	front    *frontPart
	reattach *reattacher // nil unless on a NATS cluster

	engine  *fulfill.Engine
	runErr  error         // Run's, once done is closed
	done    chan struct{} // closed when Run has returned
	stop    context.CancelFunc
	running sync.WaitGroup
}

func (p *enginePart) Start(ctx context.Context) error {
	cfg, log := p.cfg, p.log
	approvalObs := func(elicit.Event) {}
	var obs fulfill.Observer = fulfill.Observers(nil)
	if cfg.HTTP != "" {
		// The metrics cost the hot path something: kept only when served.
		obs, approvalObs = p.ops.Observer(), p.ops.ApprovalObserver()
	} else if dl := p.ops.DecisionLog(); dl != nil {
		obs, approvalObs = dl, dl.ObserveApproval
	}
	if local := p.front.approvers; local != nil {
		obs = fulfill.Observers{obs, outcomes{local}}
	}
	approvalObs = p.notifier.Observer(approvalObs)
	if extra := cfg.ApprovalObserver; extra != nil {
		next := approvalObs
		approvalObs = func(e elicit.Event) { next(e); extra(e) }
	}
	approvals := &fulfill.Approvals{Codec: elicit.Codec{Signer: FulfillerID, Logger: log}, OfferGrants: true,
		Observer: func(h lifecycle.Human) { approvalObs(elicit.EventOf(h)) }}
	if keys := cfg.Keys; keys != nil {
		approvals.CurrentKeys = func() lifecycle.KeySet { return keys.Keys() }
		elicit.LogKeys(elicit.Config{DefaultApprovers: cfg.Approvers, CurrentKeys: keys.Keys, Logger: log})
	}
	fcfg := fulfill.Config{
		MaxPending: cfg.MaxPending, MaxInflight: cfg.MaxInflight, PendingTTL: cfg.PendingTTL,
		FulfillTimeout: cfg.FulfillTimeout, ApprovalTimeout: cfg.ApprovalTimeout, ShutdownTimeout: cfg.ShutdownTimeout,
		StatusChats: true, Approvals: approvals, Approvers: cfg.Approvers,
		Observer: obs, Logger: log, Grants: p.grants.reg, ShadowTimeout: cfg.Policy.Timeout,
		ToolMetadata: p.policy.ToolMetadata(),
	}
	if p.reattach != nil {
		// The held calls' records are in the cluster, where the
		// instance a client's retry reaches takes them over.
		fcfg.Store = p.store.store
	}
	f := p.front
	p.engine = fulfill.NewEngine(f.bind, p.policy.Engine(), fcfg)
	if p.reattach != nil {
		p.reattach.eng = p.engine
	}
	f.bind.Bind(p.engine, f.front)
	p.ops.Running(sidecar.Live{Gateway: frontGateway{}, Policy: p.policy.Engine(), Counter: p.engine, Operator: operator{e: p.engine, front: f.front, meta: p.policy.ToolMetadata(), log: log}, Grants: p.grants.reg})
	ectx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p.stop = stop
	p.running.Go(func() {
		defer close(p.done)
		p.runErr = p.engine.Run(ectx)
	})
	return nil
}

// Stop stops the engine, which answers what is open "other"; its error
// (answers owed not delivered) is Close's.
func (p *enginePart) Stop() error {
	p.stop()
	p.running.Wait()
	return p.runErr
}

// StoreSpace is the space of fulfiller mcp's store: every `fulfiller
// mcp` on one --state keeps its pins and grants in this one set of
// buckets, keyed by upstream NAME, and `fulfiller mcp accept-tools`
// reads them there.
const StoreSpace = "mcp"

// openStore opens m for pins and grants: a directory is one every
// `fulfiller mcp` on it shares (state.SharedDir), a NATS cluster one
// every instance on it shares, each process a member of its own.
func openStore(ctx context.Context, m state.Mode, creds string, lease time.Duration, log *slog.Logger) (*state.Store, error) {
	if m.Kind == state.Dir {
		m.Kind = state.SharedDir
	}
	member := "mcp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	if m.Kind == state.External {
		// Instances on several machines share the cluster: the host
		// tells their members apart where a pid would not.
		if host, err := os.Hostname(); err == nil && host != "" {
			member = "mcp-" + memberSafe(host) + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
		}
	}
	store, err := state.Open(ctx, state.Config{Mode: m, Creds: creds, Space: StoreSpace, Member: member, Lease: lease, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", m, err)
	}
	log.Info("state store open", "state", m.String(), "member", member)
	return store, nil
}

// Front is the front end, for Handler and Ready.
func (s *Server) Front() *mcpfront.Front { return s.front.front }

// Engine is the engine deciding the calls.
func (s *Server) Engine() *fulfill.Engine { return s.eng.engine }

// Approvers is the in-process channel to the team inbox's approvers
// (nil without Config.Inbox).
func (s *Server) Approvers() *approver.Local { return s.front.approvers }

// Store is the store of pins and grants.
func (s *Server) Store() *state.Store { return s.store.store }

// OpsAddr is the address the operations listener bound ("" without
// Config.HTTP).
func (s *Server) OpsAddr() string { return s.ops.Addr() }

// ServeStdio serves one client on t (stdio) in front of upstream name,
// until the client leaves or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, name string, t mcp.Transport) error {
	return s.front.front.ServeStdio(ctx, name, t)
}

// Handler serves the upstreams over Streamable HTTP at /mcp/NAME.
func (s *Server) Handler(opts mcpfront.HTTPOptions) http.Handler { return s.front.front.Handler(opts) }

// Close stops the front end (calls still held are answered "other"),
// then the engine, the team inbox, the watches, the store, the notifier
// (letting the last notifications out), the decision log and the
// listener. It returns the engine's error (answers owed at shutdown not
// delivered).
func (s *Server) Close() error {
	s.once.Do(func() { s.closeErr = s.parts.Stop() })
	return s.closeErr
}

// memberSafe is host as part of a member id: at most 64 bytes (the id
// must stay under the store's limit; a member id is keyed, so any bytes
// are safe in it).
func memberSafe(host string) string {
	if len(host) > 64 {
		return host[:64]
	}
	return host
}
