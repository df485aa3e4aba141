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

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/policies"
)

// Fulfiller owns every pending proposal of this member: one
// lifecycle.Loop owns every pending proposal; the shell turns frames
// into the core's events (frames.go), carries out its effects through
// the record store, the wire and the policy step, writes its lines to
// the observers (journal.go), and serves the group (shellgroup.go) and
// the operator (shelloperator.go) by asking the loop, never by keeping a
// copy of a proposal's state.
type Fulfiller struct {
	cfg   Config
	space Space
	log   *slog.Logger
	obs   Observer

	core    *lifecycle.Core
	loop    *lifecycle.Loop
	journal *journal
	records *ownWrites
	// recordStore is under records; the group's records taken over are
	// completed by it (migrate) as the core's are.
	recordStore *recordStore
	wire        *wire
	policy      *policyStep
	catalog     *catalog

	// Reader-owned (handle's goroutine): the participants present as
	// last heard, for the roster diff after this member's reconnect.
	present map[string]bool
	// deferred are the proposals held while their addressee's tools are
	// asked (deferProposal), by id: the proposer, or "" once withdrawn.
	// They come back to the reader on undecided.
	deferred  map[string]string
	undecided chan agent.Envelope
	deferWG   sync.WaitGroup
	// answered remembers fulfilment requests whose response counted (by
	// request envelope id), to notice a second, different one
	// (checkAnswered); told the proposals whose proposer was told of an
	// impersonation, once each.
	answered *lru.Cache[string, *answeredResponse]
	told     *lru.Cache[string, struct{}]
	// peerResps keeps responses to the group's other members' requests,
	// for an adoption that follows them (see peerResponses).
	peerResps *peerResponses
	group     groupView

	// base outlives Run's context until shutdown is done: what the
	// catalog's discoveries and the loop run under.
	base context.Context
	// kept: answers owed at shutdown left in the store for the next run.
	kept    atomic.Int64
	owed    int
	lost    int
	mu      sync.Mutex // guards owed and lost
	closing atomic.Bool
}

// answeredResponse is a fulfilment request that got its response, kept
// so that a second, different response to it is noticed.
type answeredResponse struct {
	ev         Event // the proposal's fields, for the ignored line
	target     string
	response   string // envelope id of the response that counted
	digest     [32]byte
	conflicted bool
}

// New makes a Fulfiller. Nothing runs until Run.
func New(space Space, decider Decider, cfg Config) *Fulfiller {
	cfg.setDefaults()
	if cfg.Store == nil {
		cfg.Store = state.NewLocal(space.ID())
	}
	s := &Fulfiller{cfg: cfg, space: space, log: cfg.Logger, obs: cfg.Observer, present: map[string]bool{}, deferred: map[string]string{}, undecided: make(chan agent.Envelope),
		peerResps: newPeerResponses(), base: context.Background()}
	s.answered, _ = lru.New[string, *answeredResponse](answeredRequests)
	s.told, _ = lru.New[string, struct{}](answeredRequests)
	s.catalog = newCatalog(space, cfg.Logger, 5*time.Second, cfg.DiscoverySettle, 4)
	s.catalog.onSpoof = func(server, request string) {
		s.emit(Event{Stage: StageDiscoveryConflict, Target: server, By: []string{server},
			Message: fmt.Sprintf("two different answers to tools/list request %s in the name of %s; neither trusted", request, server)})
	}
	s.journal = newJournal(cfg.Observer, cfg.Logger)
	s.journal.peers = cfg.PeerFulfillers
	s.policy = newPolicyStep(space, decider, s.catalog, policyConfigOf(cfg), cfg.Observer,
		newShadowing(cfg.Shadow, cfg.ShadowTimeout, cfg.ShadowQueue), cfg.Grants, cfg.Logger, cfg.Clock)
	s.wire = newWire(space, cfg.Grants, wireConfig{SpaceID: cfg.SpaceID, FulfillTimeout: cfg.FulfillTimeout},
		wireHooks{events: s.journal, method: s.journal.method}, cfg.Logger)
	s.recordStore = newRecordStore(cfg.Store, cfg.PendingTTL, cfg.FulfillTimeout, cfg.Logger)
	s.records = newOwnWrites(s.recordStore)
	s.records.failed = s.journal.storeFailed
	lcfg := coreConfig(cfg)
	if a := cfg.Approvals; a != nil {
		lcfg.Codec = codecOf(a, s.promptContext)
		s.wire.approvals = a
	}
	s.core = lifecycle.New(lcfg, shellIDs{space})
	s.loop = lifecycle.NewLoop(s.core, cfg.Clock, s.records, s.wire, s.policy, s.journal, retryStore)
	return s
}

// describe is what the humans are shown of p's tool: what the policy
// sees of it, and its input schema from its owner's tools/list.
func (s *Fulfiller) describe(p *lifecycle.Proposal) (*policies.Tool, json.RawMessage) {
	if p.Tool == "" {
		return nil, nil
	}
	target := p.Addressee
	if p.Decision != nil && p.Decision.Target != "" {
		target = p.Decision.Target
	}
	t := s.policy.toolDescription(p.Tool, target, p.Params)
	if info, ok := s.catalog.tool(t.Server, p.Tool); ok {
		return t, info.InputSchema
	}
	return t, nil
}

// shellIDs mints the ids the core puts on the wire: envelope ids named
// after this participant, JSON-RPC ids from the space's one sequence
// (no peer sees an id twice), decision ids as OPA's decision logs do.
type shellIDs struct{ space Space }

func (i shellIDs) EnvelopeID() string { return agent.NewID(i.space.ID()) }
func (i shellIDs) RPCID() int64       { return i.space.NextRPCID() }
func (i shellIDs) DecisionID() string { return NewDecisionID() }

// PromptID is random (crypto), as elicit's prompt ids are: a forger
// cannot tell the next one.
func (i shellIDs) PromptID() string { return agent.NewID(i.space.ID() + "-elicit") }

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

// Handoffs reports the goroutine hand-offs of the core's loop and the
// proposals it read (lifecycle.Loop.Handoffs), for the bench.
func (s *Fulfiller) Handoffs() (handoffs, proposals int64) { return s.loop.Handoffs() }

// post hands the loop an event; it gives up only when the shell stops.
func (s *Fulfiller) post(ev lifecycle.Event) {
	if err := s.loop.Post(s.base, ev); err != nil {
		s.log.Debug("event not taken: stopping", "event", fmt.Sprintf("%T", ev))
	}
}

// ask runs fn on the loop's goroutine (lifecycle.Loop.Do); false when
// the loop has stopped.
func (s *Fulfiller) ask(ctx context.Context, fn func(*lifecycle.Core)) bool {
	return s.loop.Do(ctx, fn) == nil
}

// Run handles envelopes from in until ctx ends or in is closed, then
// shuts down: with a live group member its pending work is handed over
// (handOver), the rest is answered "other"; it returns once the loop has
// stopped.
func (s *Fulfiller) Run(ctx context.Context, in <-chan agent.Envelope) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	s.base = base
	// The space may already hold tool owners: discover them now rather
	// than waiting for the next welcome, and before the loop starts: the
	// records it resumes may be decided at once, and routing waits for a
	// discovery under way, not for one not yet begun (it found no owner
	// and rejected "incapable").
	var roster []string
	for _, p := range s.space.Roster() {
		s.present[p.ID] = true
		roster = append(roster, p.ID)
		s.catalog.refresh(base, p.ID)
	}
	s.checkVetoHolders(s.space.Roster())
	// Who is here, before the loop resumes any record: an escalation
	// asks only approvers present. Stepped directly: nothing else runs
	// the core yet.
	s.core.Step(s.cfg.Clock.Now(), lifecycle.Roster{Present: roster})

	loopCtx, stopLoop := context.WithCancel(base)
	defer stopLoop()
	loopDone := make(chan error, 1)
	go func() { loopDone <- s.loop.Run(loopCtx) }()
	// The shadow stops after the loop, the last to hand it decisions;
	// what is queued then is dropped and counted.
	shadowCtx, stopShadow := context.WithCancel(base)
	shadowDone := make(chan struct{})
	go func() {
		defer close(shadowDone)
		s.policy.runShadow(shadowCtx)
	}()
	defer func() {
		stopShadow()
		<-shadowDone
	}()

	storeCtx, stopStore := context.WithCancel(base)
	var storeWG sync.WaitGroup
	s.refreshGroup(storeCtx)
	watches := []func(context.Context){s.watchGroup, s.adoptLapsed}
	if s.cfg.Store.Shared() {
		// Alone on its store no other member writes its records: the
		// watch would only read back each of its own writes.
		watches = append(watches, s.watchRecords)
	}
	for _, watch := range watches {
		storeWG.Add(1)
		go func() {
			defer storeWG.Done()
			watch(storeCtx)
		}()
	}

loop:
	for {
		select {
		case env, ok := <-in:
			if !ok {
				break loop
			}
			s.handle(env)
		case env := <-s.undecided:
			s.undecidedBack(env)
		case <-ctx.Done():
			break loop
		}
	}
	stopStore()
	storeWG.Wait()
	s.shutdown(base)
	stopLoop()
	err := <-loopDone
	// Discoveries still running end now, not at their timeout, and the
	// proposals waiting for them are dropped with the process (the
	// gateway replays nothing: a proposal read and not yet ours was
	// never claimed).
	cancelBase()
	s.catalog.wait()
	s.deferWG.Wait()
	if owed, lost := s.ShutdownAnswers(); lost > 0 {
		return fmt.Errorf("%d of %d answers owed at shutdown were not delivered: %w", lost, owed, ErrUndelivered)
	}
	return err
}

// shutdown hands this member's pending work to a live group member, or
// answers it "other" (the core's Closing), and waits for those answers
// until --shutdown-timeout.
func (s *Fulfiller) shutdown(base context.Context) {
	ctx, cancel := context.WithTimeout(base, s.cfg.ShutdownTimeout)
	defer cancel()
	s.closing.Store(true)
	s.handOver(ctx)
	s.journal.closed()
	s.post(lifecycle.Closing{})
	s.drain(ctx)
	owed, unwritten := s.journal.shutdownAnswers()
	if unwritten > 0 && s.cfg.Store.Persistent() {
		// Their records are in the store, phase answered: the next run
		// on it sends them, the same envelopes.
		s.kept.Store(int64(unwritten))
		s.log.Warn("answers owed at shutdown could not be written; they are kept in the state store and sent by the next run on it", "kept", unwritten, "answers", owed)
		unwritten = 0
	}
	s.mu.Lock()
	s.owed, s.lost = owed, unwritten
	s.mu.Unlock()
	if unwritten > 0 {
		s.log.Error("answers owed at shutdown were not delivered", "undelivered", unwritten, "answers", owed)
	}
}

// drainPoll is how often drain looks whether the core still holds work.
const drainPoll = 5 * time.Millisecond

// drain waits until the core holds no proposal (every answer written,
// every record ended), or every answer it still holds was tried once
// (one not written stays in the store, its record says so, for the next
// run: the core would only try it again), or ctx ends.
func (s *Fulfiller) drain(ctx context.Context) {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		var held []string
		if !s.ask(ctx, func(c *lifecycle.Core) { held = c.Held() }) || len(held) == 0 || s.journal.allTried(held) {
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
func (s *Fulfiller) ShutdownAnswers() (owed, lost int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owed, s.lost
}

// ShutdownKept reports how many of the answers owed at shutdown were left
// in the state store for the next run on it to send.
func (s *Fulfiller) ShutdownKept() int { return int(s.kept.Load()) }

// emit tells the observers of an event the core has no line for (frames
// that never became a proposal, spoofs of answers, the catalog's).
func (s *Fulfiller) emit(e Event) {
	stamp(&e)
	s.obs.Observe(e)
}

// answeredRequests bounds the record of answered fulfilment requests:
// entries are made only by our own fulfilments, and a late conflicting
// answer normally comes within seconds of the first.
const answeredRequests = 4096

// retryStore is how long recover waits before trying the store again.
const retryStore = time.Second

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ErrUndelivered is wrapped by Run's error when answers owed at shutdown
// could not be delivered.
var ErrUndelivered = errors.New("answers not delivered")
