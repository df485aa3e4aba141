package fulfill

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/policies"
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
	Decide(ctx context.Context, in *policies.Input) policies.Decision
}

// Config tunes a Fulfiller. Zero values take the defaults in brackets.
type Config struct {
	SpaceID        string        // reported to policies as input.space.id
	MaxPending     int           // [1000] proposals waiting at once; more are rejected "busy"
	PendingTTL     time.Duration // [10m] longest a proposal may wait before "timeout"
	MaxInflight    int           // [64] fulfilment requests outstanding at once; more wait in a queue
	FulfillTimeout time.Duration // [30s] wait for the tool owner's mcp/response
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

	// ShutdownTimeout [10s] bounds how long shutdown waits for a session
	// to write its answers: during a gateway outage the answers are then
	// given up (and counted) instead of holding the process.
	ShutdownTimeout time.Duration
	// DiscoverySettle [500ms] is how long after a tools/list answer a
	// second, different (forged) answer is awaited before the owner's
	// tools and their annotations are believed; see catalog.
	DiscoverySettle time.Duration
	// MaxPendingBytes [256 MiB] bounds the frame bytes of the proposals
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
	// Store [nil: in this process only] keeps pending work across crashes
	// and shares it with a group; see Store.
	Store Store
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
		c.MaxPendingBytes = 256 << 20
	}
	if c.MaxPendingPerProposer <= 0 {
		c.MaxPendingPerProposer = max(c.MaxPending/4, 1)
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
	log     *slog.Logger
	obs     Observer
	store   *pendingStore
	catalog *catalog
	// answered remembers fulfilment requests that got their response
	// (by request envelope id), to notice a conflicting second one.
	answered *lru.Cache[string, *answeredRequest]

	mu        sync.Mutex
	live      int                  // proposals not yet in a terminal state
	inflight  int                  // fulfilment requests awaiting a response
	queue     []*proposal          // approved, waiting for a fulfilment slot (FIFO)
	byRequest map[string]*proposal // our fulfilment request envelope id → proposal
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
	// owed and lost count the answers shutdown wrote and could not write.
	owed, lost int
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
	wg           sync.WaitGroup
}

// New makes a Fulfiller. Nothing runs until Run.
func New(space Space, decider Decider, cfg Config) *Fulfiller {
	cfg.setDefaults()
	f := &Fulfiller{
		cfg:       cfg,
		space:     space,
		decider:   decider,
		log:       cfg.Logger,
		obs:       cfg.Observer,
		store:     newPendingStore(cfg.MaxPending, cfg.PendingTTL),
		byRequest: map[string]*proposal{},
		rejects:   newRejectLog(),
		// As many as may be live at once, so that the reader never waits
		// for a worker: it must keep reading withdrawals, responses and
		// approvals while the policy is slow. --max-pending (rule 3) is
		// the backpressure; this costs a pointer per pending proposal.
		jobs: make(chan *proposal, cfg.MaxPending),
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
// reason "other", and waits for its goroutines. It returns nil after a
// clean shutdown.
func (f *Fulfiller) Run(ctx context.Context, in <-chan agent.Envelope) error {
	f.base, f.cancelBase = context.WithCancel(context.WithoutCancel(ctx))
	defer f.cancelBase()
	f.decideCtx, f.cancelDecide = context.WithCancel(f.base)
	defer f.cancelDecide()
	f.sendsCtx, f.stopSends = context.WithCancel(f.base)
	defer f.stopSends()
	f.runCtx = ctx

	for range f.cfg.DecideWorkers {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for p := range f.jobs {
				f.decide(p)
			}
		}()
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
	f.shutdown()
	f.cancelDecide()
	close(f.jobs)
	close(evictDone)
	f.wg.Wait()
	f.cancelBase()
	f.catalog.wait()
	if owed, lost := f.ShutdownAnswers(); lost > 0 {
		return fmt.Errorf("%d of %d answers owed at shutdown were not delivered: %w", lost, owed, ErrUndelivered)
	}
	return nil
}

// handle routes one envelope from the space.
func (f *Fulfiller) handle(env agent.Envelope) {
	if env.From == f.space.ID() {
		return // our own echo; the agent drops these too
	}
	switch env.Kind {
	case agent.KindProposal:
		f.onProposal(env)
	case agent.KindWithdraw:
		f.onWithdraw(env)
	case agent.KindResponse:
		f.onResponse(env)
	case agent.KindRequest:
		f.onOtherRequest(env)
	case agent.KindReject:
		f.onOtherReject(env)
	case agent.KindWelcome:
		if env.AddressedTo(f.space.ID()) {
			f.catalog.reset()
			for _, p := range f.space.Roster() {
				f.catalog.refresh(f.base, p.ID)
			}
			f.checkOwners()
		}
	case agent.KindPresence:
		f.onPresence(env)
	case agent.KindError:
		f.onRefusal(env)
	}
}

func (f *Fulfiller) onProposal(env agent.Envelope) {
	if env.ID == "" || env.From == "" {
		f.log.Warn("proposal without id or from skipped", "id", env.ID, "from", env.From)
		return
	}
	if f.store.known(env.ID) {
		// Rule 5: never reject a replayed id: the reject would name the
		// id and fail the original proposal at its proposer.
		f.log.Warn("proposal id seen before; ignored", "proposal", env.ID, "from", env.From)
		f.emit(Event{Stage: StageIgnored, ProposalID: env.ID, Proposer: env.From, Reason: "duplicate", Message: "proposal id seen before"})
		return
	}
	c, err := parsePayload(env.Payload)
	method := c.method
	p := &proposal{env: env, method: c.method, params: c.params, tool: c.tool, received: time.Now()}
	if target, mine := f.addressee(env, p.tool); !mine {
		f.log.Debug("proposal addressed to another fulfiller; left alone", "proposal", env.ID, "to", env.To)
		f.store.seen.Add(env.ID, struct{}{})
		f.emit(Event{Stage: StageIgnored, ProposalID: env.ID, Proposer: env.From, Method: method, Tool: p.tool, Reason: "addressed_elsewhere", Message: fmt.Sprintf("addressed to %v", env.To)})
		return
	} else {
		p.target = target
	}
	f.emit(p.event(StageReceived))

	if err != nil {
		f.store.seen.Add(env.ID, struct{}{})
		f.answerReject(p, "invalid", err.Error())
		return
	}

	f.mu.Lock()
	switch {
	case f.closing:
		f.mu.Unlock()
		f.store.seen.Add(env.ID, struct{}{})
		f.answerReject(p, "other", "fulfiller is shutting down; propose again later")
		return
	case f.live >= f.cfg.MaxPending:
		f.mu.Unlock()
		f.store.seen.Add(env.ID, struct{}{})
		f.answerReject(p, "busy", fmt.Sprintf("%d proposals are pending (the limit); propose again later", f.cfg.MaxPending))
		return
	case f.byProposer[env.From] >= f.cfg.MaxPendingPerProposer:
		f.mu.Unlock()
		f.store.seen.Add(env.ID, struct{}{})
		f.answerReject(p, "busy", fmt.Sprintf("%d of your proposals are pending (the limit per proposer); propose again when one is answered", f.cfg.MaxPendingPerProposer))
		return
	case f.liveBytes+p.size() > f.cfg.MaxPendingBytes:
		f.mu.Unlock()
		f.store.seen.Add(env.ID, struct{}{})
		f.answerReject(p, "busy", fmt.Sprintf("pending proposals hold %d of %d bytes (the limit), too few for this %d-byte one; propose again later", f.liveBytes, f.cfg.MaxPendingBytes, p.size()))
		return
	}
	f.live++
	f.liveBytes += p.size()
	f.byProposer[env.From]++
	p.state.Store(int32(StateDeciding))
	f.store.add(p)
	f.mu.Unlock()

	// Does not block while fewer than MaxPending proposals are live (the
	// queue has room for all of them); only proposals withdrawn or expired
	// while queued can crowd it, and workers drop those at once. On
	// shutdown the proposal is in the store, so shutdown answers it.
	select {
	case f.jobs <- p:
	case <-f.runCtx.Done():
	}
}

// addressee applies the package's reading of `to` (see the package doc):
// whether the proposal is ours to handle, and the participant it names as
// target, if any.
func (f *Fulfiller) addressee(env agent.Envelope, tool string) (target string, mine bool) {
	if len(env.To) == 0 || slices.Contains(env.To, f.space.ID()) {
		return "", true
	}
	sawFulfiller := false
	for _, id := range env.To {
		p, ok := f.space.Participant(id)
		if !ok {
			continue
		}
		if tool != "" {
			if _, offers := f.catalog.tool(id, tool); offers {
				return id, true
			}
		}
		if agent.Permits(p.Capabilities, agent.KindRequest, json.RawMessage(`{"method":"tools/call"}`)) {
			sawFulfiller = true
			continue
		}
		return id, true
	}
	if sawFulfiller {
		return "", false
	}
	return "", true // nobody named is here: ours, and routing will say incapable
}

// decide runs on a worker: ask the policy and act on its answer.
func (f *Fulfiller) decide(p *proposal) {
	if p.State().Terminal() {
		return // withdrawn or expired while queued for a worker
	}
	in := f.input(p, p.params, nil)
	start := time.Now()
	d := f.decider.Decide(f.decideCtx, in)
	p.decided(d.Revision, false)
	// The decision record is buffered, not awaited: the record of the
	// answer that follows (fulfilling, escalated, rejected) is, and the
	// log keeps its order, so that wait covers this line too.
	ev := p.event(StageDecided)
	ev.Decision, ev.Latency, ev.Input = &d, time.Since(start), in
	if d.Err != nil {
		f.log.Error("policy failed closed", "proposal", p.env.ID, "err", d.Err)
	}
	f.emit(ev)
	f.mu.Lock()
	p.decision = d
	f.mu.Unlock()
	f.act(p, d, p.params)
}

// act carries out a decision for p with the given params.
func (f *Fulfiller) act(p *proposal, d policies.Decision, params json.RawMessage) {
	switch d.Action {
	case policies.Fulfill:
		target, why := f.route(p, d)
		if target == "" {
			f.reject(p, "incapable", why)
			return
		}
		f.fulfil(p, target, params)
	case policies.Escalate:
		target, why := f.route(p, d)
		if target == "" {
			f.reject(p, "incapable", why) // rule 1: nobody asked about a call nobody can carry out
			return
		}
		f.escalate(p, d, target)
	default:
		reason := d.Reason
		if reason == "" {
			reason = "policy"
		}
		f.reject(p, reason, d.Message)
	}
}

// route decides who carries the call out, or says why nobody can.
func (f *Fulfiller) route(p *proposal, d policies.Decision) (target, why string) {
	target = d.Target
	if target == "" {
		target = p.target
	}
	if target == "" && p.method == agent.MethodToolsCall && p.tool != "" {
		ctx, cancel := context.WithTimeout(f.base, f.cfg.DiscoveryWait)
		owners := f.catalog.lookup(ctx, p.tool)
		cancel()
		switch len(owners) {
		case 0:
			return "", fmt.Sprintf("no participant in the space offers tool %q", p.tool)
		case 1:
			target = owners[0].Server
		default:
			names := make([]string, len(owners))
			for i, o := range owners {
				names[i] = o.Server
			}
			return "", fmt.Sprintf("tool %q is offered by %v; address the proposal to one of them", p.tool, names)
		}
	}
	if target == "" {
		return "", fmt.Sprintf("no participant to send %s to; address the proposal to one", p.method)
	}
	if _, ok := f.space.Participant(target); !ok {
		return "", fmt.Sprintf("%s is not in the space", target)
	}
	payload, _ := json.Marshal(map[string]string{"method": p.method})
	if !f.space.Can(agent.KindRequest, payload) {
		return "", fmt.Sprintf("fulfiller's capabilities do not allow mcp/request %s", p.method)
	}
	return target, ""
}

func (f *Fulfiller) escalate(p *proposal, d policies.Decision, target string) {
	if f.cfg.Escalator == nil {
		f.reject(p, "policy", "the policy asks for human approval, but escalation is not configured on this fulfiller")
		return
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = f.cfg.ApprovalTimeout
	}
	// Fail closed: no human is asked before the record that says so is
	// written (and with it the decision before it). Not for a proposal
	// withdrawn or expired meanwhile: nobody will be asked about it.
	if p.State() != StateDeciding {
		return
	}
	ev := p.event(StageEscalated)
	ev.Target, ev.By, ev.Message = target, d.Approvers, d.Message
	if err := f.record(ev); err != nil {
		f.unrecorded(p, "escalation", err)
		return
	}
	f.mu.Lock()
	if p.State() != StateDeciding {
		f.mu.Unlock()
		return
	}
	p.state.Store(int32(StateAwaitingApproval))
	p.target = target
	p.deadline = time.Now().Add(timeout)
	f.mu.Unlock()
	f.announce(ev)

	esc := Escalation{Proposal: p.env, DecisionID: p.governor().id, Method: p.method, Params: p.params, Target: target, Decision: d, Deadline: p.deadline}
	if p.tool != "" {
		esc.Tool = f.toolInput(p, target, p.params)
		if info, ok := f.catalog.tool(target, p.tool); ok {
			esc.InputSchema = info.InputSchema
		}
	}
	f.cfg.Escalator.Escalate(f.base, esc, func(v Verdict) { f.onVerdict(p, v) })
}

// onVerdict applies a human verdict (rule 7 of DESIGN.md).
func (f *Fulfiller) onVerdict(p *proposal, v Verdict) {
	if p.State() != StateAwaitingApproval {
		return
	}
	switch {
	case v.Superseded:
		if _, ok := f.transition(p, StateSuperseded, notAnswered); ok {
			ev := p.event(StageSuperseded)
			ev.By, ev.Message = v.By, v.Message
			f.emit(ev)
		}
		return
	case !v.Approved:
		reason := v.Reason
		if reason == "" {
			reason = "disagree"
		}
		f.reject(p, reason, v.Message)
		return
	}
	ev := p.event(StageApproved)
	ev.By = v.By
	f.emit(ev)
	f.mu.Lock()
	p.approvedBy = v.By
	f.mu.Unlock()
	if v.Params == nil {
		f.fulfil(p, p.target, p.params)
		return
	}
	// Edited arguments: the edited call must pass the policy on its own.
	in := f.input(p, v.Params, &policies.Approval{By: v.By, Content: v.Content})
	d := f.decider.Decide(f.decideCtx, in)
	p.decided(d.Revision, true) // a new decision: it governs what follows
	dev := p.event(StageDecided)
	dev.Decision, dev.Input = &d, in
	f.emit(dev)
	switch d.Action {
	case policies.Fulfill:
	case policies.Escalate:
		if !approvalsSatisfy(v.By, d) {
			f.reject(p, "policy", "the edited call needs other approval: "+d.Message)
			return
		}
	default:
		reason := d.Reason
		if reason == "" {
			reason = "policy"
		}
		f.reject(p, reason, d.Message)
		return
	}
	target := p.target
	if d.Target != "" {
		target = d.Target
	}
	f.fulfil(p, target, v.Params)
}

// approvalsSatisfy reports whether the approvers who already approved meet
// an escalate decision's approvers and quorum.
func approvalsSatisfy(by []string, d policies.Decision) bool {
	quorum := max(d.Quorum, 1)
	n := 0
	for _, who := range by {
		if len(d.Approvers) == 0 || slices.Contains(d.Approvers, who) {
			n++
		}
	}
	return n >= quorum
}

// fulfil sends the fulfilment request, or queues it when --max-inflight
// requests are already out.
func (f *Fulfiller) fulfil(p *proposal, target string, params json.RawMessage) {
	f.mu.Lock()
	s := p.State()
	if s != StateDeciding && s != StateAwaitingApproval {
		f.mu.Unlock()
		return
	}
	p.target = target
	p.finalParams = params
	if f.inflight >= f.cfg.MaxInflight || f.closing {
		p.state.Store(int32(StateQueued))
		f.queue = append(f.queue, p)
		f.mu.Unlock()
		f.emit(p.event(StageQueued))
		return
	}
	f.startLocked(p)
	f.mu.Unlock()
	f.sendRequest(p)
}

// startLocked claims a fulfilment slot for p. Called with f.mu held.
func (f *Fulfiller) startLocked(p *proposal) {
	f.inflight++
	p.state.Store(int32(StateFulfilling))
	p.rpcID = f.space.NextRPCID()
	p.requestID = agent.NewID(f.space.ID())
	p.requestSent = time.Now()
	p.written = make(chan struct{})
	f.byRequest[p.requestID] = p
	p.fulfilTimer = time.AfterFunc(f.cfg.FulfillTimeout, func() { f.fulfilTimedOut(p) })
}

// sendRequest puts the fulfilment mcp/request on the wire: to the target,
// correlated to the proposal, method and params as proposed (or as edited
// by an approver and re-checked by the policy).
func (f *Fulfiller) sendRequest(p *proposal) {
	if _, here := f.space.Participant(p.target); !here {
		// The gateway replays nothing: a request sent while the owner is
		// away (its link dropped, the space restarting) would be lost and
		// the proposer would wait for the fulfil timeout. Hold it for the
		// owner's rejoin grace instead; see releaseHeld and ownerGone.
		f.mu.Lock()
		p.held = true
		f.mu.Unlock()
		f.log.Info("tool owner not in the space; fulfilment request held until it is back", "proposal", p.env.ID, "target", p.target)
		f.ownerLeft(p)
		return
	}
	payload := agent.RPCRequest{JSONRPC: "2.0", ID: json.RawMessage(strconv.FormatInt(p.rpcID, 10)), Method: p.method, Params: p.finalParams}
	env := agent.Envelope{
		ID:            p.requestID,
		To:            []string{p.target},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{p.env.ID},
		Payload:       agent.MustPayload(payload),
	}
	// Written ahead (fail closed): no call is carried out without its
	// record. Observers that only watch hear of it once it is written.
	ev := p.event(StageFulfilling)
	if err := f.record(ev); err != nil {
		if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
			f.log.Error("decision log cannot be written; fulfilment refused", "proposal", p.env.ID, "err", err)
			close(p.written)
			f.answerReject(p, policies.ReasonOther, auditFailedMessage)
		}
		return
	}
	err := f.send(env)
	if err == nil || errors.Is(err, agent.ErrSessionLost) {
		// Reported once written (or maybe written), and before the
		// response or a refusal can be: they wait for p.written.
		f.announce(ev)
		close(p.written)
	}
	if err == nil {
		return
	}
	if errors.Is(err, agent.ErrSessionLost) {
		// The link died during the write: the request may have reached
		// the tool owner. Sending it again could run the call twice,
		// and rejecting now could contradict a request that did go
		// out; so wait as if sent. Its response, or the fulfil
		// timeout, ends the proposal.
		f.log.Warn("fulfilment request may not have been sent; waiting for its response or the fulfil timeout", "proposal", p.env.ID, "target", p.target, "err", err)
		return
	}
	f.log.Error("fulfilment request not delivered: not written", "proposal", p.env.ID, "target", p.target, "err", err)
	f.undelivered(p, agent.KindRequest, UndeliveredNotWritten, err.Error())
	close(p.written)
	if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
		f.answerReject(p, "other", "the fulfilment request could not be sent")
	}
}

// onResponse ends a fulfilment when its target answers. The gateway does
// not authenticate from, and everyone sees our request (its envelope id
// and JSON-RPC id), so a participant can answer in the tool owner's name
// before the owner does. That first answer cannot be told from a real one;
// what can be seen is a second, different answer to the same request, so
// answered requests are remembered (boundedly) and a conflict is logged,
// counted and recorded as a spoof attempt.
func (f *Fulfiller) onResponse(env agent.Envelope) {
	cid := env.CorrelationID.First()
	if f.catalog.observe(f.base, env) {
		return // an answer to our discovery
	}
	f.mu.Lock()
	p, ok := f.byRequest[cid]
	f.mu.Unlock()
	if !ok {
		f.checkAnswered(cid, env)
		return // not a fulfilment of ours (the agent matches its own requests)
	}
	if env.From != p.target {
		f.log.Warn("response for our fulfilment from a participant it was not sent to; ignored",
			"proposal", p.env.ID, "target", p.target, "from", env.From)
		return
	}
	var resp agent.RPCResponse
	if err := json.Unmarshal(env.Payload, &resp); err != nil || string(resp.ID) != strconv.FormatInt(p.rpcID, 10) {
		if p.spoofed.Swap(true) {
			f.log.Debug("another response with a wrong JSON-RPC id ignored", "proposal", p.env.ID, "envelope", env.ID)
			return // recorded once per proposal: a flood must not flood the decision log
		}
		f.log.Warn("response for our fulfilment with another JSON-RPC id; ignored (spoof attempt?)",
			"proposal", p.env.ID, "target", p.target, "request", cid, "rpc_id", p.rpcID, "got", string(resp.ID), "envelope", env.ID)
		ev := p.event(StageIgnored)
		ev.Reason, ev.By = ReasonWrongRPCID, []string{env.From}
		ev.Message = fmt.Sprintf("response %s to fulfilment request %s has JSON-RPC id %s, not %d", env.ID, cid, resp.ID, p.rpcID)
		f.emit(ev)
		return
	}
	f.waitWritten(p)
	if _, ok := f.transition(p, StateFulfilled, isState(StateFulfilling)); !ok {
		return
	}
	f.answered.Add(cid, &answeredRequest{p: p, response: env.ID, digest: sha256.Sum256(env.Payload)})
	ev := p.event(StageFulfilled)
	ev.Result, ev.Latency = resp.Result, time.Since(p.requestSent)
	if resp.Error != nil {
		ev.RPCError = agent.MustPayload(resp.Error)
	}
	ev.By = p.approvedBy
	f.emit(ev)
}

// Reasons of StageIgnored events about answers that claim to come from a
// tool owner: spoof attempts, counted and recorded in the decision log.
const (
	ReasonConflictingResponse = "conflicting_response" // a second, different response to a fulfilment request already answered
	ReasonWrongRPCID          = "wrong_rpc_id"         // a response to our request with a JSON-RPC id that is not the request's
)

// answeredRequest is a fulfilment request that got its response, kept so
// that a second, different response to it is noticed.
type answeredRequest struct {
	p          *proposal
	response   string // envelope id of the response that counted
	digest     [sha256.Size]byte
	conflicted atomic.Bool // recorded once; later conflicts are only counted in the log
}

// answeredRequests bounds the record of answered fulfilment requests:
// entries are made only by our own fulfilments, and a late conflicting
// answer normally comes within seconds of the first.
const answeredRequests = 4096

// checkAnswered looks at a response to a fulfilment request that is no
// longer in flight: the same answer again is harmless (a re-delivery), a
// different one from the tool owner means one of the two was forged.
func (f *Fulfiller) checkAnswered(cid string, env agent.Envelope) {
	a, ok := f.answered.Get(cid)
	if !ok || env.From != a.p.target || sha256.Sum256(env.Payload) == a.digest {
		return
	}
	if a.conflicted.Swap(true) {
		f.log.Debug("another conflicting response ignored", "proposal", a.p.env.ID, "envelope", env.ID)
		return // recorded once per request: a flood of forgeries must not flood the logs
	}
	f.log.Warn("a second, different response to an answered fulfilment request: one of them was forged (spoof attempt)",
		"proposal", a.p.env.ID, "target", a.p.target, "request", cid, "counted", a.response, "conflicting", env.ID)
	ev := a.p.event(StageIgnored)
	ev.Reason, ev.By = ReasonConflictingResponse, []string{env.From}
	ev.Message = fmt.Sprintf("response %s to fulfilment request %s differs from response %s, which ended the proposal; one of them was forged", env.ID, cid, a.response)
	ev.Result = env.Payload
	f.emit(ev)
}

// fulfilTimedOut applies rule 4: cancel at the tool owner, reject "timeout".
func (f *Fulfiller) fulfilTimedOut(p *proposal) {
	f.mu.Lock()
	held := p.held
	f.mu.Unlock()
	if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); !ok {
		return
	}
	if !held { // a held request never went out: nothing to cancel
		f.cancelRequest(p, "timeout")
	}
	f.answerReject(p, "timeout", fmt.Sprintf("%s did not answer within %s", p.target, f.cfg.FulfillTimeout))
}

// cancelRequest tells the tool owner to stop working on our request.
func (f *Fulfiller) cancelRequest(p *proposal, reason string) {
	params := agent.MustPayload(cancelledParams{RequestID: p.rpcID, Reason: reason})
	env := agent.Envelope{
		To:            []string{p.target},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{p.requestID},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", Method: agent.MethodCancelled, Params: params}),
	}
	if q, ok := f.space.(Queuer); ok {
		ctx, cancel := f.sendContext()
		defer cancel()
		if _, queued, err := q.SendOrQueue(ctx, env); err != nil {
			f.log.Warn("cancellation not sent", "proposal", p.env.ID, "target", p.target, "err", err)
		} else if queued {
			f.log.Warn("cancellation kept until the link is back", "proposal", p.env.ID, "target", p.target)
		}
		return
	}
	if err := f.send(env); err != nil {
		f.log.Warn("cancellation not sent", "proposal", p.env.ID, "target", p.target, "err", err)
	}
}

func (f *Fulfiller) onWithdraw(env agent.Envelope) {
	pid := env.CorrelationID.First()
	p, ok := f.store.get(pid)
	if !ok {
		f.log.Debug("withdrawal of an unknown or finished proposal", "proposal", pid, "from", env.From)
		return
	}
	if env.From != p.env.From {
		f.log.Warn("withdrawal by someone other than the proposer ignored (spoof attempt?)",
			"proposal", pid, "proposer", p.env.From, "from", env.From)
		f.mu.Lock() // a decision worker may be setting p.target
		ev := p.event(StageIgnored)
		f.mu.Unlock()
		ev.Reason, ev.Message = "spoofed_withdraw", "withdrawal from "+env.From
		f.emit(ev)
		return
	}
	prev, ok := f.transition(p, StateWithdrawn, notAnswered)
	if !ok {
		f.log.Info("late withdrawal ignored: the proposal was already answered", "proposal", pid, "state", p.State())
		f.waitWritten(p) // keep the proposal's events in order: fulfilling first
		f.mu.Lock()
		ev := p.event(StageIgnored)
		f.mu.Unlock()
		ev.Reason, ev.Message = "late_withdraw", "withdrawn after it was "+p.State().String()
		f.emit(ev)
		return
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(pid, "withdrawn")
	}
	ev := p.event(StageWithdrawn)
	ev.Reason = reasonOf(env.Payload)
	f.emit(ev)
}

// onOtherRequest sees other participants' requests: a fulfilment of a
// proposal we hold supersedes ours; a tools/list_changed refreshes discovery.
func (f *Fulfiller) onOtherRequest(env agent.Envelope) {
	var req agent.RPCRequest
	if json.Unmarshal(env.Payload, &req) != nil {
		return
	}
	switch req.Method {
	case agent.MethodToolsListChanged:
		f.catalog.refresh(f.base, env.From)
		return
	case agent.MethodElicitationCreate, agent.MethodCancelled:
		return // asking or telling someone about a proposal is not fulfilling it
	}
	if strings.HasPrefix(req.Method, "notifications/") {
		return // a notification (a tool server's progress, say) fulfils nothing
	}
	f.supersede(env, "fulfilled by "+env.From)
}

// onOtherReject: someone else already said no to a proposal we hold (an
// approver answering directly, or another fulfiller). The proposer has its
// answer; a second one from us would break rule 2.
func (f *Fulfiller) onOtherReject(env agent.Envelope) {
	f.supersede(env, "rejected by "+env.From+" ("+reasonOf(env.Payload)+")")
}

func (f *Fulfiller) supersede(env agent.Envelope, why string) {
	p, ok := f.store.get(env.CorrelationID.First())
	if !ok {
		return
	}
	prev, ok := f.transition(p, StateSuperseded, notAnswered)
	if !ok {
		if p.State() == StateFulfilling {
			f.log.Warn("proposal answered by another participant after our fulfilment request", "proposal", p.env.ID, "by", env.From)
		}
		return
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(p.env.ID, "superseded")
	}
	ev := p.event(StageSuperseded)
	ev.By, ev.Message = []string{env.From}, why
	ev.KnownFulfiller = f.knownFulfiller(env.From)
	if !ev.KnownFulfiller {
		f.log.Warn("a proposal was ended by a participant that is not a known fulfiller; nobody waits for our answer any more",
			"proposal", p.env.ID, "by", env.From, "how", why)
	}
	f.emit(ev)
}

func (f *Fulfiller) onPresence(env agent.Envelope) {
	var pr struct {
		Event       string `json:"event"`
		Participant struct {
			ID string `json:"id"`
		} `json:"participant"`
	}
	if json.Unmarshal(env.Payload, &pr) != nil || pr.Participant.ID == "" || pr.Participant.ID == f.space.ID() {
		return
	}
	switch pr.Event {
	case "join":
		f.catalog.refresh(f.base, pr.Participant.ID)
		if who, ok := f.space.Participant(pr.Participant.ID); ok {
			f.checkVetoHolders([]agent.Participant{who})
		}
		f.releaseHeld(pr.Participant.ID)
	case "leave":
		f.catalog.drop(pr.Participant.ID)
		f.mu.Lock()
		var orphans []*proposal
		for _, p := range f.byRequest {
			if p.target == pr.Participant.ID {
				orphans = append(orphans, p)
			}
		}
		f.mu.Unlock()
		for _, p := range orphans {
			f.ownerLeft(p)
		}
	}
}

// checkOwners runs after our own reconnect: a tool owner that left while
// our link was down sent its leave to nobody we could hear, so each
// fulfilment whose owner is not in the new roster gets the same grace as
// after a leave.
func (f *Fulfiller) checkOwners() {
	f.mu.Lock()
	var fulfilling []*proposal
	for _, p := range f.byRequest {
		fulfilling = append(fulfilling, p)
	}
	f.mu.Unlock()
	for _, p := range fulfilling {
		if _, here := f.space.Participant(p.target); !here {
			f.ownerLeft(p)
		} else {
			f.releaseHeld(p.target)
		}
	}
}

// releaseHeld sends the fulfilment requests held for owner, which is back.
// Whoever clears p.held sends it, so a request goes out once.
func (f *Fulfiller) releaseHeld(owner string) {
	f.mu.Lock()
	var ready []*proposal
	for _, p := range f.byRequest {
		if p.held && p.target == owner && p.State() == StateFulfilling {
			p.held = false
			if p.goneTimer != nil {
				p.goneTimer.Stop()
				p.goneTimer = nil
			}
			ready = append(ready, p)
		}
	}
	f.mu.Unlock()
	for _, p := range ready {
		f.sendRequest(p)
	}
}

// ownerLeft starts p's rejoin grace: its tool owner left while p was being
// fulfilled.
func (f *Fulfiller) ownerLeft(p *proposal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.State() != StateFulfilling || p.goneTimer != nil || f.closing {
		return
	}
	f.log.Info("tool owner left during a fulfilment; waiting for it to come back", "proposal", p.env.ID, "target", p.target, "grace", f.cfg.OwnerRejoinGrace)
	p.goneTimer = time.AfterFunc(f.cfg.OwnerRejoinGrace, func() { f.ownerGone(p) })
}

// ownerGone ends p's rejoin grace. An owner that is back keeps p: a held
// request goes out now, a sent one waits for its response or the fulfil
// timeout. An owner still away will not answer, so p is rejected
// "incapable". Taking p.held here decides, with releaseHeld, who alone may
// send a held request.
func (f *Fulfiller) ownerGone(p *proposal) {
	f.mu.Lock()
	p.goneTimer = nil
	closing, held := f.closing, p.held
	p.held = false
	f.mu.Unlock()
	if closing {
		return
	}
	if _, here := f.space.Participant(p.target); here {
		if held {
			f.sendRequest(p)
			return
		}
		f.log.Info("tool owner is back; still waiting for its response", "proposal", p.env.ID, "target", p.target)
		return
	}
	msg := fmt.Sprintf("%s left the space before answering", p.target)
	if held {
		msg = fmt.Sprintf("%s was not in the space to carry the call out, and did not come back within %s", p.target, f.cfg.OwnerRejoinGrace)
	}
	if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
		f.answerReject(p, "incapable", msg)
	}
}

// drainEvictions handles proposals the pending store let go of.
func (f *Fulfiller) drainEvictions(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-f.store.signal:
		}
		for _, ev := range f.store.drain() {
			p := ev.p
			s := p.State()
			switch {
			case s.Terminal():
			case !ev.expired:
				f.reject(p, "busy", "pending work was full")
			case s == StateFulfilling:
				f.store.readd(p) // its own fulfil timeout ends it
			case s == StateAwaitingApproval && time.Now().Before(p.deadline):
				f.store.readd(p) // rule 8: the TTL never cuts a human prompt short
			default:
				f.reject(p, "timeout", fmt.Sprintf("not decided within %s", f.cfg.PendingTTL))
			}
		}
	}
}

// shutdown answers every proposal not yet answered with "other", and
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
	// Stop tracking whatever is left so no timer fires after Run returns.
	f.mu.Lock()
	for id, p := range f.byRequest {
		p.fulfilTimer.Stop()
		if p.goneTimer != nil {
			p.goneTimer.Stop()
		}
		delete(f.byRequest, id)
	}
	owed, lost := f.owed, f.lost
	f.mu.Unlock()
	if lost > 0 {
		f.log.Error("answers owed at shutdown were not delivered", "undelivered", lost, "answers", owed)
	}
}

// reject ends p with an mcp/reject, unless it has already been answered.
func (f *Fulfiller) reject(p *proposal, reason, message string) {
	prev, ok := f.transition(p, StateRejected, notAnswered)
	if !ok {
		return
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(p.env.ID, reason)
	}
	f.answerReject(p, reason, message)
}

// answerReject sends mcp/reject to the proposer, and a chat explaining it
// when there is a message. It reports whether the reject was written.
// The rejected record is written ahead (the decision log has it before the
// proposer does); observers that only watch hear of it once it is written
// (DESIGN rule 9), and of an undelivered one otherwise. A refusal by the
// gateway, which comes later as a system/error, is reported by onRefusal.
func (f *Fulfiller) answerReject(p *proposal, reason, message string) bool {
	ev := p.event(StageRejected)
	ev.Reason, ev.Message = reason, message
	if err := f.record(ev); err != nil {
		// Denying is always safe: the reject goes out without its record
		// rather than leave the proposer waiting.
		f.log.Error("reject not recorded in the decision log; sending it anyway", "proposal", p.env.ID, "reason", reason, "err", err)
	}
	env := agent.Envelope{
		ID:            agent.NewID(f.space.ID()),
		To:            []string{p.env.From},
		Kind:          agent.KindReject,
		CorrelationID: agent.CorrelationIDs{p.env.ID},
		Payload:       agent.MustPayload(rejectPayload{Reason: reason}),
	}
	// Tracked before the write: the refusal may be read before Send
	// returns; it waits for written.
	sent := &sentReject{p: p, written: make(chan struct{})}
	f.rejects.Add(env.ID, sent)
	rej, err := f.sendAndGet(env)
	f.countShutdownAnswer(err == nil)
	if err != nil {
		f.rejects.Remove(env.ID)
		close(sent.written)
		f.log.Error("reject not delivered: not written", "proposal", p.env.ID, "reason", reason, "err", err)
		f.undelivered(p, agent.KindReject, UndeliveredNotWritten, err.Error())
		return false
	}
	f.announce(ev)
	close(sent.written)
	if message == "" {
		return true
	}
	if _, err := f.sendAndGet(agent.Envelope{
		To:            []string{p.env.From},
		Kind:          agent.KindChat,
		CorrelationID: agent.CorrelationIDs{rej.ID},
		Payload:       agent.MustPayload(chatPayload{Text: message, Format: "plain"}),
	}); err != nil {
		f.log.Warn("reject explanation not sent", "proposal", p.env.ID, "err", err)
	}
	return true
}

func (f *Fulfiller) send(env agent.Envelope) error {
	_, err := f.sendAndGet(env)
	return err
}

func (f *Fulfiller) sendAndGet(env agent.Envelope) (agent.Envelope, error) {
	ctx, cancel := f.sendContext()
	defer cancel()
	return f.space.Send(ctx, env)
}

// transition moves p into the terminal state to if allowed(current state),
// releasing whatever p held: its fulfilment slot, its place in the pending
// store. Exactly one caller can end a proposal; the others get ok=false.
func (f *Fulfiller) transition(p *proposal, to State, allowed func(State) bool) (prev State, ok bool) {
	f.mu.Lock()
	prev = p.State()
	if prev.Terminal() || !allowed(prev) {
		f.mu.Unlock()
		return prev, false
	}
	p.state.Store(int32(to))
	f.live--
	f.liveBytes -= p.size()
	if f.byProposer[p.env.From]--; f.byProposer[p.env.From] <= 0 {
		delete(f.byProposer, p.env.From)
	}
	var next []*proposal
	if prev == StateFulfilling {
		p.fulfilTimer.Stop()
		if p.goneTimer != nil {
			p.goneTimer.Stop()
			p.goneTimer = nil
		}
		delete(f.byRequest, p.requestID)
		f.inflight--
		next = f.dequeueLocked()
	}
	f.mu.Unlock()
	f.store.remove(p)
	for _, q := range next {
		f.sendRequest(q)
	}
	return prev, true
}

// dequeueLocked starts queued fulfilments while slots are free. Called with
// f.mu held; the caller sends the returned requests after unlocking.
func (f *Fulfiller) dequeueLocked() []*proposal {
	var started []*proposal
	for len(f.queue) > 0 && f.inflight < f.cfg.MaxInflight && !f.closing {
		q := f.queue[0]
		f.queue[0] = nil
		f.queue = f.queue[1:]
		if q.State() != StateQueued {
			continue
		}
		f.startLocked(q)
		started = append(started, q)
	}
	return started
}

// Payloads fulfiller writes. Structs keep the key order of PROTOCOL.md on
// the wire, which makes envelopes easy to read and to compare.
type (
	rejectPayload struct {
		Reason string `json:"reason"`
	}
	chatPayload struct {
		Text   string `json:"text"`
		Format string `json:"format"`
	}
	cancelledParams struct {
		RequestID int64  `json:"requestId"`
		Reason    string `json:"reason"`
	}
)

func notAnswered(s State) bool { return !s.answered() }

func isState(want State) func(State) bool { return func(s State) bool { return s == want } }

func reasonOf(payload json.RawMessage) string {
	var r struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(payload, &r)
	return r.Reason
}

func (f *Fulfiller) emit(e Event) {
	stamp(&e)
	f.obs.Observe(e)
}

// record writes ahead the record of an answer, before the answer goes out
// (see Recorder): it blocks while the Recorders write it. The observers
// that only watch are told by announce once the answer is written, so an
// answer that never left is never reported to them as sent.
func (f *Fulfiller) record(e Event) error {
	stamp(&e)
	if r, ok := f.obs.(Recorder); ok {
		return r.Record(e)
	}
	return nil
}

// announce tells the observers that are not Recorders of an answer that
// was written; the Recorders had it from record.
func (f *Fulfiller) announce(e Event) {
	stamp(&e)
	switch o := f.obs.(type) {
	case Observers:
		o.observeWatchers(e)
	case Recorder:
	default:
		o.Observe(e)
	}
}

// stamp fills what every event carries: its time, and a decision id even
// for frames that never became a proposal (a duplicate id, another
// fulfiller's proposal): nothing decided those, so the line is its own.
func stamp(e *Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.DecisionID == "" {
		e.DecisionID = NewDecisionID()
	}
}

// auditFailedMessage is the reject message while the decision log cannot
// be written.
const auditFailedMessage = "the decision log cannot be written, so this fulfiller neither fulfils nor escalates until it can; propose again later"

// unrecorded refuses p because the record of what would happen next (an
// escalation) could not be written: fail closed, reject "other".
func (f *Fulfiller) unrecorded(p *proposal, what string, err error) {
	f.log.Error("decision log cannot be written; "+what+" refused", "proposal", p.env.ID, "err", err)
	f.reject(p, policies.ReasonOther, auditFailedMessage)
}

func (p *proposal) event(stage Stage) Event {
	g := p.governor()
	return Event{Stage: stage, ProposalID: p.env.ID, DecisionID: g.id, Revision: g.revision, Proposer: p.env.From, Method: p.method, Tool: p.tool, Target: p.target}
}
