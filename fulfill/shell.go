package fulfill

import (
	"context"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// Fulfiller is the MEW front end on an Engine, which owns every
// pending proposal of this member: the shell turns a space's frames
// into the core's events (shellframes.go), its Space, catalog and wire
// are the Engine's FrontEnd (frontend_mew.go), and it serves the group
// (shellgroup.go) and the operator (shelloperator.go) by asking the
// engine's loop, never by keeping a copy of a proposal's state.
type Fulfiller struct {
	// Engine is the engine this front end feeds; its methods (Post,
	// KeysChanged, Handoffs, ShutdownAnswers, the operator's reads) are
	// the Fulfiller's, but Run, which reads the space.
	*Engine
	space   Space
	wire    *wire
	catalog *catalog

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

// New makes a Fulfiller: the MEW front end over space, on an Engine
// made with cfg. Nothing runs until Run.
func New(space Space, decider Decider, cfg Config) *Fulfiller {
	cfg.setDefaults()
	if cfg.Store == nil {
		cfg.Store = state.NewLocal(space.ID())
	}
	s := &Fulfiller{space: space, present: map[string]bool{}, deferred: map[string]string{}, undecided: make(chan agent.Envelope),
		peerResps: newPeerResponses()}
	s.answered, _ = lru.New[string, *answeredResponse](answeredRequests)
	s.told, _ = lru.New[string, struct{}](answeredRequests)
	s.catalog = newCatalog(space, cfg.Logger, 5*time.Second, cfg.DiscoverySettle, 4)
	s.catalog.onSpoof = func(server, request string) {
		s.emit(Event{Stage: StageDiscoveryConflict, Target: server, By: []string{server},
			Message: fmt.Sprintf("two different answers to tools/list request %s in the name of %s; neither trusted", request, server)})
	}
	s.wire = newWire(space, wireConfig{FulfillTimeout: cfg.FulfillTimeout}, cfg.Logger)
	fe := &mewFront{space: space, catalog: s.catalog, wire: s.wire, spaceID: cfg.SpaceID, wait: cfg.DiscoveryWait}
	s.Engine = NewEngine(fe, decider, cfg)
	return s
}

// Run handles envelopes from in until ctx ends or in is closed, then
// shuts down (Engine.Run): with a live group member its pending work is
// handed over (handOver), the rest is answered "other"; it returns once
// the loop has stopped.
func (s *Fulfiller) Run(ctx context.Context, in <-chan agent.Envelope) error {
	return s.run(ctx, runHooks{
		before: s.start,
		serve: func(base context.Context) {
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
			s.read(ctx, in)
			stopStore()
			storeWG.Wait()
		},
		handOver: s.handOver,
		// Discoveries still running end with base, not at their timeout,
		// and the proposals waiting for them are dropped with the process
		// (the gateway replays nothing: a proposal read and not yet ours
		// was never claimed).
		after: func() {
			s.catalog.wait()
			s.deferWG.Wait()
		},
	})
}

// start is what the Fulfiller does before the loop starts. The space may
// already hold tool owners: they are discovered now rather than at the
// next welcome, and before the loop starts: the records it resumes may
// be decided at once, and routing waits for a discovery under way, not
// for one not yet begun (it found no owner and rejected "incapable").
// Who is here is stepped before the loop resumes any record: an
// escalation asks only approvers present. Stepped directly: nothing else
// runs the core yet.
func (s *Fulfiller) start(base context.Context) {
	var roster []string
	for _, p := range s.space.Roster() {
		s.present[p.ID] = true
		roster = append(roster, p.ID)
		s.catalog.refresh(base, p.ID)
	}
	s.checkVetoHolders(s.space.Roster())
	s.core.Step(s.cfg.Clock.Now(), lifecycle.Roster{Present: roster})
}

// read handles envelopes from in until ctx ends or in is closed.
func (s *Fulfiller) read(ctx context.Context, in <-chan agent.Envelope) {
	for {
		select {
		case env, ok := <-in:
			if !ok {
				return
			}
			s.handle(env)
		case env := <-s.undecided:
			s.undecidedBack(env)
		case <-ctx.Done():
			return
		}
	}
}

// answeredRequests bounds the record of answered fulfilment requests:
// entries are made only by our own fulfilments, and a late conflicting
// answer normally comes within seconds of the first.
const answeredRequests = 4096

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
