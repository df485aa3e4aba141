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
package mcpserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/agent/mcpfront/mcpbind"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/sidecar"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// Config is a front end's configuration, parsed and checked by the
// command. Zero values take the packages' defaults.
type Config struct {
	// Upstreams are the servers the clients' calls go to (stdio: one).
	Upstreams []mcpfront.Upstream
	// Policy is how the policy loads.
	Policy policies.Options
	// State is where pins and grants are kept: a directory (shared by
	// every process on it) or memory.
	State state.Mode
	// ToolMetadata is the file of tool annotations the operator declares
	// per upstream NAME and tool ("": none); hot-reloaded.
	ToolMetadata string
	// DecisionLog is the decision log's path ("": none).
	DecisionLog string
	// ClientID is the proposer of a client no bearer token names
	// ["local"].
	ClientID string
	// ApprovalTimeout, FulfillTimeout, PendingTTL, MaxPending,
	// MaxInflight and ShutdownTimeout are fulfill.Config's.
	ApprovalTimeout, FulfillTimeout, PendingTTL, ShutdownTimeout time.Duration
	MaxPending, MaxInflight                                      int
	// Approvers are asked when an escalating decision names none.
	Approvers []string
	// Version is fulfiller's, in the clientInfo the upstreams see.
	Version string
	// Logger logs to stderr, never stdout [discarded].
	Logger *slog.Logger
}

// Server is a running front end: the engine, the front end facing the
// clients and the upstreams, and what they keep. Serve clients with
// ServeStdio or Handler; Close stops it all.
type Server struct {
	front  *mcpfront.Front
	engine *fulfill.Engine
	store  *state.Store
	dlog   *decisionlog.Logger
	log    *slog.Logger

	// Run's goroutines: each stopped by its cancel, done when it has
	// returned.
	stopEngine, stopFront, stopWatches context.CancelFunc
	engineDone, frontDone              chan struct{}
	watches                            sync.WaitGroup
	runErr                             error // the engine's Run's, once engineDone is closed
	once                               sync.Once
}

// StartError names the part that failed to start (for the flag to
// blame): "policy", "tool metadata", "state", "decision log", "front
// end".
type StartError struct {
	Part string
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Start loads and opens everything cfg names and runs the engine and the
// front end (the upstreams started) until Close. ctx bounds the start
// only.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Policy.Logger == nil {
		cfg.Policy.Logger = log
	}
	policy, err := sidecar.LoadPolicy(ctx, cfg.Policy, log)
	if err != nil {
		return nil, &StartError{Part: "policy", Err: err}
	}
	log.Info("policy loaded", "revision", policy.Revision(), "files", len(policy.Files()))
	s := &Server{log: log}
	var meta *toolmeta.Watcher
	if cfg.ToolMetadata != "" {
		if meta, err = toolmeta.Open(cfg.ToolMetadata, toolmeta.Options{Logger: log}); err != nil {
			return nil, &StartError{Part: "tool metadata", Err: err}
		}
	}
	if cfg.DecisionLog != "" {
		if s.dlog, err = decisionlog.Open(cfg.DecisionLog, decisionlog.Options{Logger: log}); err != nil {
			return nil, &StartError{Part: "decision log", Err: err}
		}
	}
	if s.store, err = openStore(ctx, cfg.State, log); err != nil {
		s.closeLog()
		return nil, &StartError{Part: "state", Err: err}
	}
	grantReg := grantstore.NewRegistry(s.store, log)
	// A client's id is its bearer token's (serve) or the local user's
	// (stdio), never a claim in a message: a grant may name it.
	grantReg.GatewayAuthenticatesFrom(true)

	bind := mcpbind.New(mcpbind.Options{Logger: log})
	front, err := mcpfront.New(mcpfront.Config{Engine: bind, Pins: s.store, ClientID: cfg.ClientID, Version: cfg.Version, Logger: log}, cfg.Upstreams...)
	if err != nil {
		s.closeStore()
		s.closeLog()
		return nil, &StartError{Part: "front end", Err: err}
	}
	s.front = front
	approvals := &fulfill.Approvals{Codec: elicit.Codec{Logger: log}, OfferGrants: true}
	var obs fulfill.Observer = fulfill.Observers(nil)
	if s.dlog != nil {
		obs = s.dlog
		dl := s.dlog
		approvals.Observer = func(h lifecycle.Human) { dl.ObserveHuman(h) }
	}
	fcfg := fulfill.Config{
		MaxPending: cfg.MaxPending, MaxInflight: cfg.MaxInflight, PendingTTL: cfg.PendingTTL,
		FulfillTimeout: cfg.FulfillTimeout, ApprovalTimeout: cfg.ApprovalTimeout, ShutdownTimeout: cfg.ShutdownTimeout,
		StatusChats: true, Approvals: approvals, Approvers: cfg.Approvers,
		Observer: obs, Logger: log, Grants: grantReg, ShadowTimeout: cfg.Policy.Timeout,
	}
	if meta != nil {
		fcfg.ToolMetadata = meta
	}
	s.engine = fulfill.NewEngine(bind, policy, fcfg)
	bind.Bind(s.engine, front)

	// The engine and the front end run until Close: the engine first
	// (the front end's events go to it), stopped last (the calls the
	// front end still holds are answered before it ends).
	watchCtx, stopWatches := context.WithCancel(context.WithoutCancel(ctx))
	engCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	frontCtx, stopFront := context.WithCancel(context.WithoutCancel(ctx))
	s.stopEngine, s.stopFront, s.stopWatches = stopEngine, stopFront, stopWatches
	s.engineDone, s.frontDone = make(chan struct{}), make(chan struct{})
	// What the engine reads is kept fresh until Close, as run's watches
	// do: the policy's hot reload, the grants in the store mirrored and
	// expired (the policy step waits for them before its first
	// decision), the tool metadata's hot reload.
	s.watch(watchCtx, "policy", policy.Watch)
	s.watch(watchCtx, "grants", grantReg.Run)
	if meta != nil {
		s.watch(watchCtx, "tool metadata", meta.Watch)
	}
	go func() {
		defer close(s.engineDone)
		s.runErr = s.engine.Run(engCtx)
	}()
	go func() {
		defer close(s.frontDone)
		_ = front.Run(frontCtx)
	}()
	return s, nil
}

// watch runs f (a hot reload, the grants' mirror) until Close; when it
// ends earlier by an error, the log says what no longer reloads.
func (s *Server) watch(ctx context.Context, what string, f func(context.Context) error) {
	s.watches.Add(1)
	go func() {
		defer s.watches.Done()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			s.log.Error(what+" watch stopped; it is no longer kept fresh", "err", err)
		}
	}()
}

// StoreSpace is the space of fulfiller mcp's store: every `fulfiller
// mcp` on one --state keeps its pins and grants in this one set of
// buckets, keyed by upstream NAME, and `fulfiller mcp accept-tools`
// reads them there.
const StoreSpace = "mcp"

// openStore opens m for pins and grants: a directory is one every
// `fulfiller mcp` on it shares (state.SharedDir), each process a member
// of its own.
func openStore(ctx context.Context, m state.Mode, log *slog.Logger) (*state.Store, error) {
	if m.Kind == state.Dir {
		m.Kind = state.SharedDir
	}
	member := "mcp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	store, err := state.Open(ctx, state.Config{Mode: m, Space: StoreSpace, Member: member, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", m, err)
	}
	log.Info("state store open", "state", m.String(), "member", member)
	return store, nil
}

// Front is the front end, for Handler and Ready.
func (s *Server) Front() *mcpfront.Front { return s.front }

// ServeStdio serves one client on t (stdio) in front of upstream name,
// until the client leaves or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, name string, t mcp.Transport) error {
	return s.front.ServeStdio(ctx, name, t)
}

// Handler serves the upstreams over Streamable HTTP at /mcp/NAME.
func (s *Server) Handler(opts mcpfront.HTTPOptions) http.Handler { return s.front.Handler(opts) }

// Close stops the front end (calls still held are answered "other"), then
// the engine, and closes the store and the decision log. It returns the
// engine's error (answers owed at shutdown not delivered).
func (s *Server) Close() error {
	s.once.Do(func() {
		s.stopFront()
		<-s.frontDone
		s.stopEngine()
		<-s.engineDone
		s.stopWatches()
		s.watches.Wait()
		s.closeStore()
		s.closeLog()
	})
	return s.runErr
}

func (s *Server) closeStore() {
	if s.store != nil {
		if err := s.store.Close(); err != nil {
			s.log.Error("state store close", "err", err)
		}
	}
}

func (s *Server) closeLog() {
	if s.dlog != nil {
		if err := s.dlog.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			s.log.Error("decision log close", "err", err)
		}
	}
}
