package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/grantstore"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/state"
	"github.com/mewkit/fulfiller/toolmeta"
)

// Space is what the Fulfiller needs of the MEW session; *agent.Client
// provides it. Envelopes come in through Run's channel.
type Space interface {
	ID() string
	Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error)
	Can(kind string, payload json.RawMessage) bool
	Roster() []agent.Participant
	Participant(id string) (agent.Participant, bool)
	// RequestEnvelope sends an MCP request and waits for the answer from
	// its addressee (discovery); the Fulfiller sees every answer as well,
	// to notice forged ones.
	RequestEnvelope(ctx context.Context, env agent.Envelope) (agent.RPCResponse, error)
	// NextRPCID hands out the JSON-RPC ids of the fulfilment requests,
	// from the same sequence as the space's own requests (discovery) and
	// the elicitations, so that no peer sees an id twice.
	NextRPCID() int64
}

// Decider answers "what should happen to this proposal"; *policies.Engine
// provides it. Decide never fails: errors come back as fail-closed rejects.
type Decider interface {
	Decide(ctx context.Context, in *policies.Input) decision.Decision
}

// Config tunes a Fulfiller. Zero values take the defaults in brackets.
type Config struct {
	SpaceID     string        // reported to policies as input.space.id
	MaxPending  int           // [1000] proposals waiting at once; more are rejected "busy"
	PendingTTL  time.Duration // [10m] longest a proposal may wait before "timeout"
	MaxInflight int           // [64] fulfilment requests outstanding at once; more wait in a queue
	// MaxInflightPerProposer [MaxInflight/4, at least 1] bounds the
	// fulfilment slots one proposer holds at once, so that one sender's
	// calls to a tool that hangs cannot make everyone else's wait.
	MaxInflightPerProposer int
	FulfillTimeout         time.Duration // [30s] wait for the tool owner's mcp/response
	// TaskTimeout [1h] bounds an MCP task once its owner created it,
	// when the decision sets no task_timeout; see task.go.
	TaskTimeout time.Duration
	// StatusChats: tell the proposer, in a chat correlated to its
	// proposal with a machine-readable _meta, when it waits for humans,
	// for a fulfilment slot, or on a task (see status.go).
	StatusChats bool
	// OwnerRejoinGrace [5s] is how long a tool owner that left during a
	// fulfilment may take to come back before the proposal is rejected
	// "incapable": a dropped link or a gateway restart is a leave too,
	// and the owner's answer, sent after its reconnect, still counts.
	OwnerRejoinGrace time.Duration
	ApprovalTimeout  time.Duration // [5m] a human's deadline when the decision sets none
	DiscoveryWait    time.Duration // [2s] how long routing waits for a running tools/list
	DecideWorkers    int           // [GOMAXPROCS] concurrent policy evaluations
	Escalator        Escalator     // nil: escalations are rejected "policy" (not configured)
	Observer         Observer      // nil: no events
	Logger           *slog.Logger  // nil: discard
	// Clock [the system's] is the time of the lifecycle's deadlines and
	// timers (pending TTL, fulfil timeout, rejoin grace, task deadline);
	// tests move a clocktest.Manual instead of waiting.
	Clock lifecycle.Clock

	// ShutdownTimeout [10s] bounds how long shutdown waits for a session
	// to write its answers: during a gateway outage the answers are then
	// given up (and counted) instead of holding the process.
	ShutdownTimeout time.Duration
	// DiscoverySettle [500ms] is how long after a tools/list answer a
	// second, different (forged) answer is awaited before the owner's
	// tools and their annotations are believed; see catalog.
	DiscoverySettle time.Duration
	// MaxPendingBytes [16 MiB] bounds the frame bytes of the proposals
	// pending at once; more are rejected "busy".
	MaxPendingBytes int64
	// MaxPendingPerProposer [MaxPending/4, at least 1] bounds the
	// proposals one proposer has pending at once, so that one sender
	// cannot make everyone else's work come back "busy".
	MaxPendingPerProposer int
	// PeerFulfillers are the other fulfillers of this space: their
	// rejects and fulfilments of our proposals are expected.
	PeerFulfillers []string
	// Approvers are the humans asked by default (--approvers); they may
	// hold mcp/reject to turn proposals down directly.
	Approvers []string
	// Store [nil: a state.Local, in this process only] keeps pending work
	// across crashes and shares it with a group; see Store.
	Store Store

	// Grants [nil: none] are the grants approvers made (docs/design.md "Grants"):
	// those covering a call are input.grants, and an approval that
	// chooses a grant makes one here.
	Grants *grantstore.Registry
	// Shadow [nil: none] is a second policy asked about every decision
	// the live one makes (--shadow-policy). It is never acted on: its
	// answers are StageShadow events. See shadowing.
	Shadow Decider
	// ShadowTimeout [policies.DefaultTimeout] bounds one shadow
	// evaluation, like the live policy's timeout.
	ShadowTimeout time.Duration
	// ShadowQueue [64] is how many decisions may wait for the shadow;
	// more are not shadowed (StageShadow with Dropped set).
	ShadowQueue int
	// ToolMetadata [nil: none] is the tool metadata the operator declared
	// (--tool-metadata; DESIGN "Tool metadata the owner does not send"):
	// its annotations are laid over each tool owner's in input.tool
	// (and in approval prompts), the owner's kept as
	// input.tool.owner_annotations. A *toolmeta.Watcher (hot-reloaded)
	// or a *toolmeta.Metadata provides it.
	ToolMetadata ToolMetadata
}

// ToolMetadata gives the annotations a policy sees for a tool: the
// owner's (nil when it sent none) with the operator's declared keys laid
// over them, and the declaration that applied (nil: none, and owner comes
// back as it is). *toolmeta.Watcher and *toolmeta.Metadata provide it;
// both declare nothing when nil.
type ToolMetadata interface {
	Annotate(server, tool string, owner json.RawMessage) (json.RawMessage, *toolmeta.Entry)
}

func (c *Config) setDefaults() {
	if c.MaxPending <= 0 {
		c.MaxPending = 1000
	}
	if c.PendingTTL <= 0 {
		c.PendingTTL = 10 * time.Minute
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 64
	}
	if c.FulfillTimeout <= 0 {
		c.FulfillTimeout = 30 * time.Second
	}
	if c.TaskTimeout <= 0 {
		c.TaskTimeout = time.Hour
	}
	if c.OwnerRejoinGrace <= 0 {
		c.OwnerRejoinGrace = 5 * time.Second
	}
	if c.ApprovalTimeout <= 0 {
		c.ApprovalTimeout = 5 * time.Minute
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.DiscoveryWait <= 0 {
		c.DiscoveryWait = 2 * time.Second
	}
	if c.DiscoverySettle <= 0 {
		c.DiscoverySettle = 500 * time.Millisecond
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = 16 << 20
	}
	if c.MaxPendingPerProposer <= 0 {
		c.MaxPendingPerProposer = max(c.MaxPending/4, 1)
	}
	if c.MaxInflightPerProposer <= 0 {
		c.MaxInflightPerProposer = max(c.MaxInflight/4, 1)
	}
	if c.DecideWorkers <= 0 {
		c.DecideWorkers = runtime.GOMAXPROCS(0)
	}
	if c.Observer == nil {
		c.Observer = Observers(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = lifecycle.SystemClock{}
	}
}

// Errors the operator-facing methods return.
var (
	ErrUnknownProposal = errors.New("no such pending proposal")
	ErrAnswered        = errors.New("proposal already answered")
)

// sendTimeout bounds one envelope write, so a wedged link cannot hold a
// lifecycle step forever; the agent reconnects underneath.
const sendTimeout = 10 * time.Second

// Fulfiller owns every pending proposal. Make one with New and start it
// with Run.
type Fulfiller struct {
	cfg     Config
	space   Space
	decider Decider
	clock   lifecycle.Clock
	// inProcess: Config.Store answers without I/O (InProcess), so claims
	// need no workers of their own.
	inProcess bool
	shadows   *shadowing // nil without Config.Shadow
	log       *slog.Logger
	obs       Observer
	store     *pendingStore
	catalog   *catalog
	// answered remembers fulfilment requests that got their response
	// (by request envelope id), to notice a conflicting second one.
	answered *lru.Cache[string, *answeredRequest]

	mu        sync.Mutex
	live      int                  // proposals not yet in a terminal state
	slots     *slots               // who holds the fulfilment slots, and who waits for one
	byRequest map[string]*proposal // our fulfilment request envelope id → proposal
	byTask    map[string]*proposal // taskKey(owner, task id) → proposal in StateTask
	closing   bool
	// sendsCtx bounds the sends made before shutdown; shutdown cancels
	// it (stopSends), so that none of them holds shutdown up, and its own
	// sends use stopCtx (--shutdown-timeout), nil before.
	sendsCtx  context.Context
	stopSends context.CancelFunc
	stopCtx   context.Context
	// rejects maps the envelope ids of recent rejects to their proposals,
	// so that a refusal by the gateway (system/error) can be reported.
	rejects *rejectLog
	// owed counts the answers shutdown owed; lost those it could neither
	// write nor keep, kept those left in the store for the next run
	// (keepAnswered).
	owed, lost, kept int
	// liveBytes and byProposer count what live proposals hold, for
	// --max-pending-bytes and --max-pending-per-proposer.
	liveBytes  int64
	byProposer map[string]int

	// base outlives Run's context until shutdown has answered everything;
	// evaluations use decideCtx, which ends when shutdown begins, so a
	// slow policy cannot hold shutdown up.
	base         context.Context
	cancelBase   context.CancelFunc
	runCtx       context.Context
	decideCtx    context.Context
	cancelDecide context.CancelFunc
	jobs         chan *proposal
	evalSlots    chan struct{} // one per concurrent policy evaluation (DecideWorkers)
	wg           sync.WaitGroup

	// claims feeds the claim workers (with a store): a claim is a store
	// round trip, kept off the reader (see onProposal). claiming holds the
	// proposals between reader and admission, under mu, so that a
	// withdrawal or a replay meanwhile finds them.
	claims   chan claimJob
	claiming map[string]*proposal
	claimWG  sync.WaitGroup

	// grantsLate logs once that decisions went ahead before the store's
	// grants were loaded (awaitGrants).
	grantsLate sync.Once

	// group is what this member last read of its group (Config.Store).
	group groupView
	// peerResps keeps responses to the group's other members' requests,
	// for an adoption that follows them (see peerResponses).
	peerResps *peerResponses
}

// New makes a Fulfiller. Nothing runs until Run.
func New(space Space, decider Decider, cfg Config) *Fulfiller {
	cfg.setDefaults()
	if cfg.Store == nil {
		cfg.Store = state.NewLocal(space.ID())
	}
	ip, _ := cfg.Store.(interface{ InProcess() bool })
	f := &Fulfiller{
		cfg:       cfg,
		space:     space,
		decider:   decider,
		clock:     cfg.Clock,
		inProcess: ip != nil && ip.InProcess(),
		shadows:   newShadowing(cfg.Shadow, cfg.ShadowTimeout, cfg.ShadowQueue),
		log:       cfg.Logger,
		obs:       cfg.Observer,
		store:     newPendingStore(cfg.MaxPending),
		byRequest: map[string]*proposal{},
		slots:     newSlots(cfg.MaxInflight, cfg.MaxInflightPerProposer),
		byTask:    map[string]*proposal{},
		rejects:   newRejectLog(),
		// As many as may be live at once, so that the reader never waits
		// for a worker: it must keep reading withdrawals, responses and
		// approvals while the policy is slow. --max-pending (rule 3) is
		// the backpressure; this costs a pointer per pending proposal.
		jobs: make(chan *proposal, cfg.MaxPending),

		claims:   make(chan claimJob),
		claiming: map[string]*proposal{},

		peerResps: newPeerResponses(),
	}
	f.byProposer = map[string]int{}
	f.answered, _ = lru.New[string, *answeredRequest](answeredRequests)
	f.catalog = newCatalog(space, cfg.Logger, 5*time.Second, cfg.DiscoverySettle, 4)
	f.catalog.onSpoof = func(server, request string) {
		f.emit(Event{Stage: StageDiscoveryConflict, Target: server, By: []string{server},
			Message: fmt.Sprintf("two different answers to tools/list request %s in the name of %s; neither trusted", request, server)})
	}
	f.base, f.cancelBase = context.WithCancel(context.Background())
	f.decideCtx, f.cancelDecide = context.WithCancel(f.base)
	f.sendsCtx, f.stopSends = context.WithCancel(f.base)
	f.runCtx = f.base
	return f
}

// Run handles envelopes from in until ctx ends or in is closed, then shuts
// down: it stops taking proposals, rejects every one not yet answered with
// reason "other" (in a group with a live peer it hands them over to the
// group instead, see handOver), and waits for its goroutines. It returns nil after a
// clean shutdown.
func (f *Fulfiller) Run(ctx context.Context, in <-chan agent.Envelope) error {
	f.base, f.cancelBase = context.WithCancel(context.WithoutCancel(ctx))
	defer f.cancelBase()
	f.decideCtx, f.cancelDecide = context.WithCancel(f.base)
	defer f.cancelDecide()
	f.sendsCtx, f.stopSends = context.WithCancel(f.base)
	defer f.stopSends()
	f.runCtx = ctx

	// A worker waits for its writes to reach the disk (shared syncs,
	// milliseconds) between policy evaluations, so more workers than
	// CPUs keep them busy; evalSlots still bounds concurrent
	// evaluations to DecideWorkers. A store in this process never makes
	// them wait: one per evaluation is enough, and claims are made on
	// the reader (see onProposal).
	f.evalSlots = make(chan struct{}, f.cfg.DecideWorkers)
	workers, claimers := max(f.cfg.DecideWorkers, storeWorkers), storeWorkers
	if f.inProcess {
		workers, claimers = f.cfg.DecideWorkers, 0
	}
	startWorkers(&f.wg, workers, f.jobs, f.decide)
	startWorkers(&f.claimWG, claimers, f.claims, f.claimAndAdmit)
	// The shadow stops after the decide workers, the last to hand it
	// decisions; what is queued then is dropped and counted.
	shadowCtx, stopShadow := context.WithCancel(f.base)
	defer stopShadow()
	shadowDone := make(chan struct{})
	if f.shadows != nil {
		go func() {
			defer close(shadowDone)
			f.runShadow(shadowCtx)
		}()
	} else {
		close(shadowDone)
	}
	evictDone := make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.drainEvictions(evictDone)
	}()

	// The space may already hold tool owners: discover them now rather
	// than waiting for the next welcome.
	for _, p := range f.space.Roster() {
		f.catalog.refresh(f.base, p.ID)
	}
	f.checkVetoHolders(f.space.Roster())

	// The store's goroutines stop before shutdown, so that nothing is
	// resumed or adopted after shutdown has answered what is here.
	storeCtx, stopStore := context.WithCancel(f.base)
	defer stopStore()
	var storeWG sync.WaitGroup
	f.refreshGroup(storeCtx) // a first view of the group before the first proposal
	storeWG.Add(3)
	go func() {
		defer storeWG.Done()
		f.watchGroup(storeCtx)
	}()
	go func() {
		defer storeWG.Done()
		f.recoverWork(storeCtx)
	}()
	go func() {
		defer storeWG.Done()
		f.watchRecords(storeCtx)
	}()

loop:
	for {
		select {
		case env, ok := <-in:
			if !ok {
				break loop
			}
			f.handle(env)
		case <-ctx.Done():
			break loop
		}
	}
	// Proposals read before the loop ended are claimed and admitted
	// (shutdown answers them), none after.
	close(f.claims)
	f.claimWG.Wait()
	stopStore()
	storeWG.Wait()
	f.shutdown()
	f.cancelDecide()
	close(f.jobs)
	close(evictDone)
	f.wg.Wait()
	stopShadow()
	<-shadowDone
	f.cancelBase()
	f.catalog.wait()
	if owed, lost := f.ShutdownAnswers(); lost > 0 {
		return fmt.Errorf("%d of %d answers owed at shutdown were not delivered: %w", lost, owed, ErrUndelivered)
	}
	return nil
}

// drainEvictions handles proposals the pending store let go of.
func (f *Fulfiller) drainEvictions(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-f.store.signal:
		}
		for _, p := range f.store.drain() {
			if !p.State().Terminal() {
				f.reject(p, "busy", "pending work was full")
			}
		}
	}
}

// stopTimer stops a timer armed on the Fulfiller's clock (nil: none).
func stopTimer(stop func() bool) {
	if stop != nil {
		stop()
	}
}

// armTTLLocked starts p's pending TTL (--pending-ttl) as it becomes
// pending. Called with f.mu held.
func (f *Fulfiller) armTTLLocked(p *proposal) {
	p.stopTTL = f.clock.AfterFunc(f.cfg.PendingTTL, func() { f.pendingExpired(p) })
}

// pendingExpired ends p at its pending TTL if it is still deciding or
// queued ("timeout"). One waiting for its own deadline is left to it (the
// fulfil timeout, the task's deadline, or the escalation's: rule 8, the
// TTL never cuts a human prompt short, and one timer, the Escalator's,
// ends a prompt at its deadline), and its TTL starts again: an approved
// proposal that then waits in the queue still times out.
func (f *Fulfiller) pendingExpired(p *proposal) {
	f.mu.Lock()
	switch s := p.State(); {
	case s.Terminal():
		f.mu.Unlock()
		return
	case s == StateFulfilling, s == StateTask, s == StateAwaitingApproval:
		f.armTTLLocked(p)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	f.reject(p, "timeout", fmt.Sprintf("not decided within %s", f.cfg.PendingTTL))
}

// startWorkers starts n goroutines that do work on what jobs carries
// until it is closed; wg waits for them.
func startWorkers[T any](wg *sync.WaitGroup, n int, jobs <-chan T, work func(T)) {
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				work(j)
			}
		}()
	}
}

// shutdown hands this member's pending work over to the group when a
// peer is live (handOver); it answers every proposal left with "other", and
// cancels the fulfilments still running at their tool owners (their
// proposers get reject "other": no response will come). All its sends
// share one deadline, --shutdown-timeout, so a gateway outage cannot hold
// the process; what could not be delivered is counted (ShutdownAnswers).
func (f *Fulfiller) shutdown() {
	ctx, cancel := context.WithTimeout(f.base, f.cfg.ShutdownTimeout)
	defer cancel()
	f.mu.Lock()
	f.closing = true
	f.stopCtx = ctx
	f.mu.Unlock()
	// A send still waiting for a session gives up now: one held past
	// the shutdown deadline would hold the process, and a fulfilment
	// request written after its proposal was answered would run a call
	// nobody waits for.
	f.stopSends()
	// In a group with a live peer, the pending work is the group's to
	// answer, not ours to reject (a rolling restart): see handOver.
	// What it could not hand over is answered below.
	f.handOver(ctx)
	const why = "fulfiller is shutting down; propose again later"
	for _, p := range f.store.all() {
		f.reject(p, "other", why)
	}
	// Held requests never went out: those proposals still need their
	// answer. Requests that are out are cancelled at their owners.
	f.mu.Lock()
	var held, running []*proposal
	for _, p := range f.byRequest {
		if p.held {
			p.held = false
			held = append(held, p)
		} else {
			running = append(running, p)
		}
	}
	f.mu.Unlock()
	for _, p := range held {
		if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
			f.answerReject(p, "other", why)
		}
	}
	for _, p := range running {
		if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
			f.cancelRequest(p, "shutdown")
			f.answerReject(p, "other", "fulfiller is shutting down; the call was cancelled at "+p.target)
		}
	}
	// Tasks are cancelled at their owners the same way.
	f.mu.Lock()
	tasks := slices.Collect(maps.Values(f.byTask))
	f.mu.Unlock()
	for _, p := range tasks {
		if _, ok := f.transition(p, StateRejected, isState(StateTask)); ok {
			f.cancelTask(p, p.task)
			f.answerReject(p, "other", "fulfiller is shutting down; task "+p.task.id+" was cancelled at "+p.target)
		}
	}
	// Stop tracking whatever is left so no timer fires after Run returns.
	f.mu.Lock()
	for id, p := range f.byRequest {
		stopTimer(p.stopFulfil)
		stopTimer(p.stopGone)
		delete(f.byRequest, id)
	}
	owed, lost, kept := f.owed, f.lost, f.kept
	f.mu.Unlock()
	if kept > 0 {
		f.log.Warn("answers owed at shutdown could not be written; they are kept in the state store and sent by the next run on it", "kept", kept, "answers", owed)
	}
	if lost > 0 {
		f.log.Error("answers owed at shutdown were not delivered", "undelivered", lost, "answers", owed)
	}
}
