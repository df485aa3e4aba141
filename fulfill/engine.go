package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/policies"
)

// FrontEnd is where proposals come from and answers go: the MEW
// participant (the Fulfiller's), the MCP front end (fulfiller mcp). The
// engine asks it what only it knows; it brings proposals in with
// Engine.Post (lifecycle.Proposed with FrontEnd set to its Name, and
// the other events of its peers) and carries the core's effects out
// with its Wire. One engine has one front end: no effect is routed
// between front ends.
type FrontEnd interface {
	// Name is input.front_end of its proposals ("mew", "mcp") and what
	// their lifecycle.Proposed.FrontEnd says; the decision log's lines
	// carry it.
	Name() string
	// Wire carries the core's effects to its peers. When it also
	// implements PromptSender the escalations' prompts go through it
	// (CancelAsk cancels them); without it no prompt can be sent, and an
	// approver can only be reached by another channel. When it also
	// implements lifecycle.IDReserver, the JSON-RPC ids of its requests
	// are reserved ahead through it; otherwise IDs().RPCID mints each,
	// and must return at once.
	//
	// A SendReject, SendRequest or SendRelay that returns nil was
	// written (the engine tells the decision log's watchers then); one
	// that returns an error was not (lifecycle.ErrAway: held for its
	// peer's return; any other: reported undelivered).
	Wire() lifecycle.Wire
	// IDs mints the ids the core puts on the wire and in records.
	IDs() lifecycle.IDs
	// Input fills in what only the front end knows of a proposal's policy
	// input (in has the proposal, method, params, tool and grants
	// already): input.proposer (the engine leaves {id: From} when it sets
	// none), input.space, input.agent.id. The load (input.agent's
	// pending, inflight, max_pending) is the engine's, set after.
	Input(ctx context.Context, p *lifecycle.Proposal, in *policies.Input)
	// Tool is input.tool of p's call to target (the route as known at
	// that step, "" before any) with params (the proposal's, or an
	// approver's edit), nil when p calls no tool: Name and Arguments
	// from params; Server, Description, OwnerAnnotations, Execution and
	// Changed/Digest/PinnedDigest as the front end knows the tool (left
	// out when it does not); and the tool's input schema (for the
	// approvers' form). The engine lays Config.ToolMetadata over the
	// owner's annotations (Tool.Annotations) once Server is known, and
	// matches grants on Server and Name: for MCP Server is the
	// upstream's name, for MEW the tool owner's id.
	Tool(p *lifecycle.Proposal, target string, params json.RawMessage) (tool *policies.Tool, inputSchema json.RawMessage)
	// Route is, for a fulfil or escalate decision d, who carries the call
	// out (d.Target, else current: the addressee or the route already
	// chosen, else whoever the front end finds), or, with target "", why
	// nobody can: the proposal is then rejected "incapable" and no human
	// is asked. Whether the call goes out as an MCP task the engine
	// reads from Tool's Execution at that target.
	Route(ctx context.Context, p *lifecycle.Proposal, current string, d decision.Decision) (target, incapable string)
}

// PromptSender is a front end's Wire that writes the prompts of the
// core's escalations (lifecycle.ApproverChannel's SendPrompt): it
// reports whether the prompt was written.
type PromptSender interface {
	SendPrompt(ctx context.Context, p lifecycle.SendPrompt) error
}

// Engine decides and carries out proposals for one FrontEnd: the
// lifecycle core and its Loop, the policy step (input, routing, grants,
// the shadow policy), the record store, the decision log and the
// approvals' steps. Make one with NewEngine, run it with Run, and feed
// it with Post; the Fulfiller is the MEW front end on one.
type Engine struct {
	cfg Config
	fe  FrontEnd
	log *slog.Logger
	obs Observer

	core    *lifecycle.Core
	loop    *lifecycle.Loop
	journal *journal
	records *ownWrites
	// recordStore is under records; the group's records taken over are
	// completed by it (migrate) as the core's are.
	recordStore *recordStore
	wire        *engineWire
	policy      *policyStep

	// base outlives Run's context until shutdown is done: what the loop
	// runs under and events are posted with.
	base context.Context
	// kept: answers owed at shutdown left in the store for the next run.
	kept    atomic.Int64
	owed    int
	lost    int
	mu      sync.Mutex // guards owed and lost
	closing atomic.Bool
}

// engineAttacher is a front end of this package that hooks into the
// engine as it is made (the MEW wire reports to the journal itself).
type engineAttacher interface{ attach(*Engine) }

// NewEngine makes an Engine for fe, deciding with decider. cfg is the
// Fulfiller's Config; SpaceID, DiscoveryWait and DiscoverySettle are
// the MEW front end's and unused here. A nil cfg.Store is a
// state.Local in this process only, its member named after fe. Nothing
// runs until Run.
func NewEngine(fe FrontEnd, decider Decider, cfg Config) *Engine {
	cfg.setDefaults()
	if cfg.Store == nil {
		cfg.Store = state.NewLocal(fe.Name())
	}
	e := &Engine{cfg: cfg, fe: fe, log: cfg.Logger, obs: cfg.Observer, base: context.Background()}
	e.journal = newJournal(cfg.Observer, cfg.Logger)
	e.journal.peers = cfg.PeerFulfillers
	e.journal.frontEnd = fe.Name()
	e.policy = newPolicyStep(fe, decider, policyConfigOf(cfg), cfg.Observer,
		newShadowing(cfg.Shadow, cfg.ShadowTimeout, cfg.ShadowQueue), cfg.Grants, cfg.Logger, cfg.Clock)
	e.wire = newEngineWire(fe.Wire(), e.journal, cfg, cfg.Logger)
	e.recordStore = newRecordStore(cfg.Store, cfg.PendingTTL, cfg.FulfillTimeout, cfg.Logger)
	e.records = newOwnWrites(e.recordStore, cfg.Store.Shared())
	e.records.failed = e.journal.storeFailed
	lcfg := coreConfig(cfg)
	if e.wire.reserver == nil {
		lcfg.ReserveIDs = 0 // every id from IDs().RPCID
	}
	if a := cfg.Approvals; a != nil {
		lcfg.Codec = codecOf(a, e.promptContext)
	}
	e.core = lifecycle.New(lcfg, fe.IDs())
	e.loop = lifecycle.NewLoop(e.core, cfg.Clock, e.records, e.wire, e.policy, e.journal, retryStore)
	if a, ok := fe.(engineAttacher); ok {
		a.attach(e)
	}
	return e
}

// FrontEnd is the front end the engine was made with.
func (e *Engine) FrontEnd() FrontEnd { return e.fe }

// coreConfig is the lifecycle's configuration of cfg.
func coreConfig(cfg Config) lifecycle.Config {
	c := lifecycle.Config{
		Member:                 cfg.Store.Member(),
		MaxPending:             cfg.MaxPending,
		MaxPendingPerProposer:  cfg.MaxPendingPerProposer,
		MaxPendingBytes:        cfg.MaxPendingBytes,
		MaxInflight:            cfg.MaxInflight,
		MaxInflightPerProposer: cfg.MaxInflightPerProposer,
		PendingTTL:             cfg.PendingTTL,
		FulfillTimeout:         cfg.FulfillTimeout,
		OwnerRejoinGrace:       cfg.OwnerRejoinGrace,
		TaskTimeout:            cfg.TaskTimeout,
		StatusChats:            cfg.StatusChats,
		ApprovalTimeout:        cfg.ApprovalTimeout,
		RetryAfter:             retryStore,
		Approvers:              cfg.Approvers,
		UnloggedMessage:        auditFailedMessage,
		Alone:                  !cfg.Store.Shared(),
		ReserveIDs:             reservedIDs,
	}
	if a := cfg.Approvals; a != nil {
		c.Keys, c.OfferGrants = a.Keys, a.OfferGrants
		if a.CurrentKeys != nil {
			c.Keys = a.CurrentKeys()
		}
	}
	return c
}

// describe is what the humans are shown of p's tool: what the policy
// sees of it at its route (else its addressee), and its input schema.
func (e *Engine) describe(p *lifecycle.Proposal) (*policies.Tool, json.RawMessage) {
	if p.Tool == "" {
		return nil, nil
	}
	target := p.Addressee
	if p.Decision != nil && p.Decision.Target != "" {
		target = p.Decision.Target
	}
	return e.policy.toolDescription(p, target, p.Params)
}

// promptContext is what a prompt of p shows beside the record: its tool
// and input schema (describe), and whether its deadline is the
// proposer's hint (the stored decision says).
func (e *Engine) promptContext(p *lifecycle.Proposal) (*policies.Tool, json.RawMessage, bool) {
	sd, _ := policyDecision(p.Decision)
	tool, schema := e.describe(p)
	return tool, schema, sd.DeadlineByProposer
}

// Post hands the core an event: a proposal read (lifecycle.Proposed,
// its FrontEnd the front end's Name), a peer's answer (Responded,
// Answer), a withdrawal (WithdrawnBy), the approvers present (Roster,
// ParticipantJoined, ParticipantLeft). It returns once the loop has
// taken the event, never waiting for what follows of it; an error (ctx
// ended, or the engine stopped) means it was not taken.
func (e *Engine) Post(ctx context.Context, ev lifecycle.Event) error {
	return e.loop.Post(ctx, ev)
}

// Match hands the loop fn, which it calls with the core between two
// events, and applies the events fn returns at once (lifecycle.Loop.Match):
// how a front end turns an answer only the core can place (by its
// request's or prompt's id) into events in one hand-off. fn must only
// read the core, and must not block or call the engine.
func (e *Engine) Match(ctx context.Context, fn func(*lifecycle.Core) []lifecycle.Event) error {
	return e.loop.Match(ctx, fn)
}

// Do calls fn with the core on the loop's goroutine, between two events,
// and returns once it has (lifecycle.Loop.Do): how to read a proposal's
// state without a copy of it. fn must only read.
func (e *Engine) Do(ctx context.Context, fn func(*lifecycle.Core)) error {
	return e.loop.Do(ctx, fn)
}

// KeysChanged tells the core the approver key set now in force (the keys
// file was reloaded): answers read from now on are verified under it.
func (e *Engine) KeysChanged(keys lifecycle.KeySet) {
	e.post(lifecycle.KeysChanged{Keys: keys})
}

// Handoffs reports the goroutine hand-offs of the core's loop and the
// proposals it read (lifecycle.Loop.Handoffs), for the bench.
func (e *Engine) Handoffs() (handoffs, proposals int64) { return e.loop.Handoffs() }

// post hands the loop an event; it gives up only when the engine stops.
func (e *Engine) post(ev lifecycle.Event) {
	if err := e.loop.Post(e.base, ev); err != nil {
		e.log.Debug("event not taken: stopping", "event", fmt.Sprintf("%T", ev))
	}
}

// ask runs fn on the loop's goroutine (lifecycle.Loop.Do); false when
// the loop has stopped.
func (e *Engine) ask(ctx context.Context, fn func(*lifecycle.Core)) bool {
	return e.loop.Do(ctx, fn) == nil
}

// Run runs the engine until ctx ends: the loop resumes the records this
// member owns in the store and takes events (Post); the shadow policy
// runs beside it. Then it shuts down: every open proposal is answered
// "other" (lifecycle.Closing) and those answers are waited for, at most
// Config.ShutdownTimeout. It returns once the loop has stopped; an error
// wrapping ErrUndelivered when answers owed were neither written nor
// kept in the store for the next run.
func (e *Engine) Run(ctx context.Context) error {
	return e.run(ctx, runHooks{})
}

// runHooks are what a front end of this package does at the steps of
// run; each may be nil.
type runHooks struct {
	// before runs before the loop starts: the core may be stepped
	// directly (nothing else runs it yet).
	before func(base context.Context)
	// serve runs while the loop does, and returns when the front end
	// takes no more work (nil: when ctx ends). base outlives ctx.
	serve func(base context.Context)
	// handOver runs at shutdown before Closing: pending work a live
	// group member can take is handed to it.
	handOver func(ctx context.Context)
	// after runs once the loop has stopped and base has ended.
	after func()
}

// run is Run with the front end's hooks.
func (e *Engine) run(ctx context.Context, h runHooks) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	e.base = base
	if h.before != nil {
		h.before(base)
	}

	loopCtx, stopLoop := context.WithCancel(base)
	defer stopLoop()
	loopDone := make(chan error, 1)
	go func() { loopDone <- e.loop.Run(loopCtx) }()
	// The shadow stops after the loop, the last to hand it decisions;
	// what is queued then is dropped and counted.
	shadowCtx, stopShadow := context.WithCancel(base)
	shadowDone := make(chan struct{})
	go func() {
		defer close(shadowDone)
		e.policy.runShadow(shadowCtx)
	}()
	defer func() {
		stopShadow()
		<-shadowDone
	}()

	if h.serve != nil {
		h.serve(base)
	} else {
		<-ctx.Done()
	}
	e.shutdown(base, h.handOver)
	stopLoop()
	err := <-loopDone
	cancelBase()
	if h.after != nil {
		h.after()
	}
	if owed, lost := e.ShutdownAnswers(); lost > 0 {
		return fmt.Errorf("%d of %d answers owed at shutdown were not delivered: %w", lost, owed, ErrUndelivered)
	}
	return err
}

// shutdown hands this member's pending work to a live group member
// (handOver, when set), or answers it "other" (the core's Closing), and
// waits for those answers until --shutdown-timeout.
func (e *Engine) shutdown(base context.Context, handOver func(context.Context)) {
	ctx, cancel := context.WithTimeout(base, e.cfg.ShutdownTimeout)
	defer cancel()
	e.closing.Store(true)
	if handOver != nil {
		handOver(ctx)
	}
	e.journal.closed()
	e.post(lifecycle.Closing{})
	e.drain(ctx)
	owed, unwritten := e.journal.shutdownAnswers()
	if unwritten > 0 && e.cfg.Store.Persistent() {
		// Their records are in the store, phase answered: the next run
		// on it sends them, the same envelopes.
		e.kept.Store(int64(unwritten))
		e.log.Warn("answers owed at shutdown could not be written; they are kept in the state store and sent by the next run on it", "kept", unwritten, "answers", owed)
		unwritten = 0
	}
	e.mu.Lock()
	e.owed, e.lost = owed, unwritten
	e.mu.Unlock()
	if unwritten > 0 {
		e.log.Error("answers owed at shutdown were not delivered", "undelivered", unwritten, "answers", owed)
	}
}

// drainPoll is how often drain looks whether the core still holds work.
const drainPoll = 5 * time.Millisecond

// drain waits until the core holds no proposal (every answer written,
// every record ended), or every answer it still holds was tried once
// (one not written stays in the store, its record says so, for the next
// run: the core would only try it again), or ctx ends.
func (e *Engine) drain(ctx context.Context) {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		var held []string
		if !e.ask(ctx, func(c *lifecycle.Core) { held = c.Held() }) || len(held) == 0 || e.journal.allTried(held) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ShutdownAnswers reports how many answers were owed once shutdown began
// and how many of them were neither written nor kept for the next run
// (ShutdownKept). Both are final once Run has returned.
func (e *Engine) ShutdownAnswers() (owed, lost int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owed, e.lost
}

// ShutdownKept reports how many of the answers owed at shutdown were left
// in the state store for the next run on it to send.
func (e *Engine) ShutdownKept() int { return int(e.kept.Load()) }

// emit tells the observers of an event the core has no line for (frames
// that never became a proposal, spoofs of answers, the catalog's).
func (e *Engine) emit(ev Event) {
	if ev.FrontEnd == "" {
		ev.FrontEnd = e.fe.Name()
	}
	stamp(&ev)
	e.obs.Observe(ev)
}

// retryStore is how long recover waits before trying the store again.
const retryStore = time.Second

// ErrUndelivered is wrapped by Run's error when answers owed at shutdown
// could not be delivered.
var ErrUndelivered = errors.New("answers not delivered")

// errNoPrompts: the front end's Wire sends no prompts (it is no
// PromptSender).
var errNoPrompts = errors.New("fulfill: this front end cannot send prompts to approvers")
