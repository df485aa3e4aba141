package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the time a Loop reads and its timers; tests control it.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, d from now, unless stop is called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now is time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Store persists Proposals. Write returns the record's new revision, or
// ErrExists (a claim found the id claimed), ErrConflict (revision or
// owner changed, or no record), or another error (unavailable: maybe
// applied). Read returns nil, nil when there is no record.
type Store interface {
	Write(ctx context.Context, w Write) (rev uint64, err error)
	Read(ctx context.Context, id string) (*Proposal, error)
	Owned(ctx context.Context) ([]Proposal, error)
}

// Wire carries the envelopes out. SendReject, SendRequest and SendRelay
// report whether the envelope was written; the others are best effort.
//
// FollowTask follows a task (tasks/get, with status notifications as
// hints) and reports each new status (TaskStatus) and its end
// (TaskEnded) with report, until the task ends or ctx does (the Loop
// ends it at the proposal's CancelTask, and at its own end). CancelTask
// sends tasks/cancel; the Loop has stopped the follower before.
type Wire interface {
	SendReject(ctx context.Context, r SendReject) error
	SendRequest(ctx context.Context, r SendRequest) error
	SendRelay(ctx context.Context, r SendRelay) error
	SendCancel(ctx context.Context, c SendCancel)
	Status(ctx context.Context, s Status)
	CancelAsk(ctx context.Context, c CancelAsk)
	FollowTask(ctx context.Context, f FollowTask, report func(Event))
	CancelTask(ctx context.Context, c CancelTask)
}

// ApproverChannel is the shell's way to the approvers of the core's
// escalations: a Wire that has it sends the
// prompts (SendPrompt reports whether the envelope was written; the
// Wire's CancelAsk cancels them), reports each step with the humans (Human: the
// decision log, metrics, notifications) and creates the grants approvers
// chose. A Wire without it drops these effects.
type ApproverChannel interface {
	SendPrompt(ctx context.Context, p SendPrompt) error
	Human(ctx context.Context, h Human)
	CreateGrant(ctx context.Context, g CreateGrant)
}

// IDReserver hands out JSON-RPC ids ahead (ReserveIDs): n ids never
// handed out before, or an error (the store is unavailable: the Loop
// tries again). The Wire of a Core with Config.ReserveIDs must be one.
type IDReserver interface {
	ReserveIDs(ctx context.Context, n int) ([]int64, error)
}

// Policy decides (the policy and routing). It never fails: an error is a
// fail-closed reject decision.
type Policy interface {
	Decide(ctx context.Context, d Decide) Decided
}

// Evaluators is implemented by a Policy that evaluates at most
// Evaluators() decisions at once (a bound of its own: the fulfiller's
// DecideWorkers). The Loop then asks it on that many goroutines of its
// own (deciders), the Decides queued for them in order, rather than on
// a worker each: a worker that waited for the policy's bound waited with
// a shallow stack, which the garbage collector shrank, so that nearly
// every evaluation (OPA's, deep) grew its goroutine's stack again
// (runtime.newstack and copystack: about 4 % of the fulfiller's CPU in
// the bench's profile, none in the lock-based build's, whose
// DecideWorkers goroutines evaluated every decision).
type Evaluators interface {
	Evaluators() int
}

// decideQueue is how many Decides wait for the deciders (Evaluators)
// before one more is asked on a worker, as without them: Run never waits
// for the queue.
const decideQueue = 1024

// Journal is the decision log, written ahead of the effects after a line.
// Log reports a line it could not write; for a line written ahead of a
// send (Line.Ahead) the Loop then fails closed (Unlogged): the send is
// not made. An error about any other line is the Journal's to report.
type Journal interface {
	Log(ctx context.Context, l Line) error
}

// Immediate is implemented by a Store, a Journal or a Wire some of
// whose effects return at once (no I/O, no wait: an in-process store's
// write, a decision-log line only observed, a front end's send that
// hands the message to a goroutine of its own): the Loop carries such an
// effect out on its own goroutine when it is next in its proposal's
// lane, and applies its result at once, instead of handing it to a
// worker and the result back (two goroutine hand-offs, which cost more
// than the effect). A Wire is asked only about its own effects (the
// sends, Status, CancelAsk, the task's and the approvers' channel's);
// an effect it calls Immediate must never wait for a peer, since the
// whole Loop would wait with it.
type Immediate interface {
	Immediate(e Effect) bool
}

// Loop is the thin shell around a Core: one goroutine applies Step to
// every event, in order; each proposal's effects are carried out in
// order, on a worker while they may wait (one worker runs a proposal's
// effects one after the other until one reports an event) and on the
// loop's goroutine when they cannot (Immediate), and their results come
// back as events. Timers post Fired. Make one with NewLoop, feed it with
// Post and run it with Run.
type Loop struct {
	core    *Core
	clock   Clock
	store   Store
	wire    Wire
	policy  Policy
	journal Journal
	retry   time.Duration

	// inputs brings Run what Post, PostAll, Match and Do hand it, on
	// one channel so that Run waits on three (inputs, done, its ctx),
	// not six: a select costs a lock and a queued waiter per channel.
	// done is the workers' reports and the deciders' Decided (result),
	// buffered: neither waits for Run to take its result.
	inputs  chan input
	done    chan laneDone
	stopped chan struct{} // closed when Run returns
	live    atomic.Int64  // Core.Live after the last step
	// handoffs counts the goroutine hand-offs (Handoffs); proposals the
	// proposals read (Proposed events).
	handoffs  atomic.Int64
	proposals atomic.Int64

	// Touched by Run's goroutine only.
	lanes map[string]*lane
	// effs is the buffer each step's effects are made in (apply): a
	// slice a step made and dropped was the core's most frequent
	// allocation.
	effs []Effect
	// timers are the timers set and not fired yet, by proposal: one
	// map keyed by the proposal's id, where a map of the Fired (whose
	// time.Time and strings are hashed at every look-up) and a second
	// map of the ids cost four look-ups a timer set and gone.
	timers map[string][]timer
	wg     sync.WaitGroup
	// freeLanes are lanes left empty, for the next proposals' (newLane).
	freeLanes []*lane

	// followers stop the task followers, by proposal; touched by the
	// lanes' goroutines (FollowTask, CancelTask). idleLanes are the
	// lanes a worker left empty, for Run's goroutine to forget (sweep);
	// nIdle counts them, so that Run looks without taking mu.
	// idleWorkers are the workers waiting for work, the one idle since
	// last at the end (see work).
	mu          sync.Mutex
	followers   map[string]*follower
	idleLanes   []string
	nIdle       atomic.Int32
	idleWorkers []*worker

	// The store's, the journal's and the wire's Immediate, when they
	// have one.
	storeNow, journalNow, wireNow Immediate

	// deciders is the policy's Evaluators (0: none); Run starts that
	// many goroutines that ask the policy the Decides on decideq (nil
	// until then, and under a sched, whose goroutines are its own).
	deciders int
	decideq  chan Decide

	// sched replaces the goroutines, channels and retry waits the Loop
	// runs its work with (nil: those); see sched.
	sched sched
}

// sched is how a Loop's work leaves its goroutine, comes back to it and
// waits to be tried again. Without one (Loop.sched nil) that is
// goroutines, channels and time.After, as in production (timers are the
// Clock's). The simulator (sim_test.go, simloop_test.go)
// sets its own before Run: each of the Loop's goroutines is a coroutine
// of the simulator, every input of Run one of its queues and every wait
// one of its turns, so that one thing runs at a time in the order the
// seed draws, and a seed replays exactly. Every place the Loop crosses
// goroutines or waits goes through here, and nothing else changes: the
// simulator runs the Loop's own code.
type sched interface {
	// spawn runs f beside the loop's goroutine: a worker, a task's
	// follower, the read of this member's records at start.
	spawn(f func())
	// recv waits for Run's next input; false once ctx ended.
	recv(ctx context.Context) (input, bool)
	// send hands Run an input (Post, PostAll, Match, Do, a lane's
	// result); it gives up when ctx ends.
	send(ctx context.Context, in input) error
	// pause is the wait before a retry (Loop.retry); false once ctx
	// ended.
	pause(ctx context.Context) bool
	// step is c.Step(now, ev): the simulator checks its invariants
	// around it.
	step(c *Core, now time.Time, ev Event) []Effect
}

// input is one of Run's inputs (Loop.inputs, or the sched's): the one
// field set says which (an event posted, a batch, a Match, a Do, a
// lane's result).
type input struct {
	ev     Event
	evs    []Event
	match  func(*Core) []Event
	query  func(*Core)
	done   laneDone
	isDone bool
}

type follower struct{ stop context.CancelFunc }

// lane is one proposal's effects not carried out yet. The map of lanes
// is Run's; a lane's effects and running are shared with the worker that
// runs it, under mu: a worker takes its effects one at a time, so a
// prune (Released, CancelAsk, Unlogged) drops exactly those not begun.
//
// A lane left empty is kept for the next proposal's (Loop.freeLanes),
// with its array and its run: a proposal's steps made and dropped a lane,
// its slice grown from nothing and a closure for its worker each.
type lane struct {
	mu      sync.Mutex
	effs    []Effect
	running bool // a worker runs the lane (it reports on done, or leaves it idle)
	// buf is the array effs is in, from its start: effs starts there
	// again once emptied (push, pop).
	buf []Effect
	// id is the proposal's, set by Run before the lane is shared; run
	// is runLane of this lane, made once (work).
	id  string
	run func()
}

// push queues e. The caller holds mu.
func (ln *lane) push(e Effect) {
	c := cap(ln.effs)
	ln.effs = append(ln.effs, e)
	if cap(ln.effs) != c {
		ln.buf = ln.effs[:0] // a new array, which effs starts
	}
}

// pop takes the first effect queued; the caller holds mu, and one is.
func (ln *lane) pop() Effect {
	e := ln.effs[0]
	ln.effs[0] = nil // not kept from the collector
	ln.effs = ln.effs[1:]
	if len(ln.effs) == 0 {
		ln.effs = ln.buf[:0]
	}
	return e
}

type laneDone struct {
	// ln is the lane the worker ran: still the proposal's in Run's map
	// (a lane a worker runs is never dropped), so Run need not look it
	// up again.
	ln     *lane
	result Event // nil: nothing to report
	// own: result is an event one of the Loop's own goroutines made (a
	// decider's Decided, see result), no lane's end.
	own bool
}

// NewLoop makes a Loop for core. retry is how long a failed Reload or
// Owned waits before it is tried again.
func NewLoop(core *Core, clock Clock, store Store, wire Wire, policy Policy, journal Journal, retry time.Duration) *Loop {
	l := &Loop{core: core, clock: clock, store: store, wire: wire, policy: policy, journal: journal, retry: retry,
		inputs: make(chan input), done: make(chan laneDone, 64), stopped: make(chan struct{}), lanes: map[string]*lane{}, timers: map[string][]timer{},
		followers: map[string]*follower{}}
	l.storeNow, _ = store.(Immediate)
	l.journalNow, _ = journal.(Immediate)
	l.wireNow, _ = wire.(Immediate)
	if ev, ok := policy.(Evaluators); ok {
		l.deciders = ev.Evaluators()
	}
	return l
}

// Post hands the loop an event (a frame read, a lease released, Closing).
// It returns once the loop has taken the event, which it applies before
// anything else: after Post(Released) nothing more is done about the
// proposal (its effects not carried out are dropped; one being carried
// out reports to a core that let go of it), so its record may be
// adopted.
// It blocks while the loop is busy, and gives up when ctx ends.
func (l *Loop) Post(ctx context.Context, ev Event) error {
	if l.sched != nil {
		return l.sched.send(ctx, input{ev: ev})
	}
	select {
	case l.inputs <- input{ev: ev}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PostAll is Post for events the loop must apply back to back, with
// nothing carried out in between (a record taken from another member is
// Resumed and at once Cancelled: the resumed prompts are never asked
// again before the cancel drops them).
func (l *Loop) PostAll(ctx context.Context, evs ...Event) error {
	if len(evs) == 0 {
		return nil // nothing to apply (and input's evs nil would be an event)
	}
	if l.sched != nil {
		return l.sched.send(ctx, input{evs: evs})
	}
	select {
	case l.inputs <- input{evs: evs}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Match hands the loop fn, which it calls with the Core on its goroutine
// between two events, and applies the events fn returns at once, in
// order: how the shell turns a frame only the core can place (a response,
// found by its request's envelope id) into events in one hand-off, where
// Do and then Post cost three. fn must only read the Core, and must not
// block or call the Loop. Match returns once the loop has taken fn, and
// gives up when ctx ends or Run has returned (ErrStopped).
func (l *Loop) Match(ctx context.Context, fn func(*Core) []Event) error {
	if l.sched != nil {
		return l.sched.send(ctx, input{match: fn})
	}
	select {
	case l.inputs <- input{match: fn}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stopped:
		return ErrStopped
	}
}

// Do calls fn with the Core on the loop's goroutine, between two events,
// and returns once it has: how the shell reads the core (the operator
// API's list, a proposal's state) without a second copy of it. fn must
// only read. Do gives up when ctx ends or Run has returned (ErrStopped).
func (l *Loop) Do(ctx context.Context, fn func(*Core)) error {
	ran := make(chan struct{})
	q := func(c *Core) { fn(c); close(ran) }
	if l.sched != nil {
		if err := l.sched.send(ctx, input{query: q}); err != nil {
			return err
		}
	} else {
		select {
		case l.inputs <- input{query: q}:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stopped:
			return ErrStopped
		}
	}
	<-ran
	return nil
}

// Handoffs reports how many times work crossed between goroutines
// (an event posted to the loop from another, an effect handed to a
// worker, a worker's result back, a Do's question and its answer) and how
// many proposals the loop read: each hand-off costs a wake-up and a trip
// through the scheduler, what a lock-based build did not pay, so their
// ratio is the engine's overhead per proposal (fulfiller bench reports
// it).
func (l *Loop) Handoffs() (handoffs, proposals int64) {
	return l.handoffs.Load(), l.proposals.Load()
}

// ErrStopped: the loop is not running.
var ErrStopped = errors.New("lifecycle: loop stopped")

// Live is the number of proposals pending here as of the last event
// (Core.Live): what the shell publishes with its lease, from any
// goroutine, for the group's "busy" (GroupLoad).
func (l *Loop) Live() int { return int(l.live.Load()) }

// Run applies events until ctx ends, this member's records from before
// (Store.Owned, tried until read) among them as one Resumed; it stops its
// timers and waits for the effects being carried out (they end with ctx)
// before it returns. It returns nil.
func (l *Loop) Run(ctx context.Context) error {
	defer close(l.stopped)
	defer func() {
		for _, ts := range l.timers {
			for _, t := range ts {
				t.stop()
			}
		}
		l.wg.Wait()
	}()
	if l.deciders > 0 && l.sched == nil {
		l.decideq = make(chan Decide, decideQueue)
		for range l.deciders {
			l.spawn(func() { l.decider(ctx) })
		}
	}
	// The first JSON-RPC ids are asked for now (Config.ReserveIDs),
	// not when the first request needs one.
	l.step(ctx, IDsReserved{})
	// This member's records from before are read beside the events, not
	// before them: a slow store at start must not stop the frames (the
	// core takes a record of a proposal it ended meanwhile as stale).
	l.spawn(func() {
		if recs, err := l.owned(ctx); err == nil {
			_ = l.Post(ctx, Resumed{Records: recs, How: "restart"})
		}
	})
	for {
		if l.nIdle.Load() > 0 {
			l.sweep()
		}
		if l.sched != nil {
			in, ok := l.sched.recv(ctx)
			if !ok {
				return nil
			}
			l.take(ctx, in)
			continue
		}
		// A report waiting is taken without a select over the three
		// channels (which locks each, and queues Run on each when it
		// waits): under load most of Run's inputs are reports, and
		// finishing what is under way before taking more is what a
		// busy loop should do. ctx is still seen: the reports end with
		// the workers and deciders, which end with it.
		select {
		case d := <-l.done:
			l.laneDone(ctx, d)
			continue
		default:
		}
		select {
		case in := <-l.inputs:
			l.take(ctx, in)
		case d := <-l.done:
			l.laneDone(ctx, d)
		case <-ctx.Done():
			return nil
		}
	}
}

// take applies one of Run's inputs (under a sched, a lane's result
// too).
func (l *Loop) take(ctx context.Context, in input) {
	switch {
	case in.isDone:
		l.laneDone(ctx, in.done)
	case in.query != nil:
		l.handoffs.Add(2) // the question, and the answer the caller waits for
		in.query(l.core)
	case in.match != nil:
		l.handoffs.Add(1)
		l.applyAll(ctx, in.match(l.core))
	case in.evs != nil:
		l.handoffs.Add(1)
		l.applyAll(ctx, in.evs)
	default:
		l.posted(ctx, in.ev)
	}
}

// posted applies an event Post handed over (a timer's Fired among them).
func (l *Loop) posted(ctx context.Context, ev Event) {
	l.handoffs.Add(1)
	if f, ok := ev.(Fired); ok {
		l.fired(f)
	}
	l.step(ctx, ev)
}

// applyAll applies evs back to back, then starts the lanes they touched
// (Match, PostAll).
func (l *Loop) applyAll(ctx context.Context, evs []Event) {
	var buf [4]string
	touched := buf[:0]
	for _, ev := range evs {
		touched = l.apply(ctx, ev, touched)
	}
	for _, id := range touched {
		l.dispatch(ctx, id)
	}
}

// laneDone takes a worker's report on a lane: the lane is idle again,
// its result is applied, and its next effects start.
func (l *Loop) laneDone(ctx context.Context, d laneDone) {
	if d.own {
		l.posted(ctx, d.result) // no lane ended (result)
		return
	}
	l.handoffs.Add(1)
	ln := d.ln
	id := ln.id // Run's to change, and the lane is not dropped while it runs
	ln.mu.Lock()
	ln.running = false
	ln.mu.Unlock()
	if d.result != nil {
		l.step(ctx, d.result)
	}
	l.dispatch(ctx, id)
}

// spawn runs f on a goroutine Run waits for (or the sched's).
func (l *Loop) spawn(f func()) {
	if l.sched != nil {
		l.sched.spawn(f)
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// pause waits l.retry before a retry; false once ctx ended.
func (l *Loop) pause(ctx context.Context) bool {
	if l.sched != nil {
		return l.sched.pause(ctx)
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(l.retry):
		return true
	}
}

func (l *Loop) owned(ctx context.Context) ([]Proposal, error) {
	for {
		recs, err := l.store.Owned(ctx)
		if err == nil {
			return recs, nil
		}
		if !l.pause(ctx) {
			return nil, fmt.Errorf("lifecycle: own records not read: %w", err)
		}
	}
}

// step applies ev, queues its effects and starts them.
func (l *Loop) step(ctx context.Context, ev Event) {
	var buf [2]string // room for what a step touches, without an allocation
	for _, id := range l.apply(ctx, ev, buf[:0]) {
		l.dispatch(ctx, id)
	}
}

// apply applies ev and queues its effects; it returns touched with the
// proposals whose lanes got effects appended.
func (l *Loop) apply(ctx context.Context, ev Event, touched []string) []string {
	if r, ok := ev.(Released); ok {
		// Nothing more is done about it here before another member may
		// adopt its record (see Released).
		l.release(r.ID)
	}
	if u, ok := ev.(Unlogged); ok {
		l.unlogged(u.ID)
	}
	now := l.clock.Now()
	if _, ok := ev.(Proposed); ok {
		l.proposals.Add(1)
	}
	var effs []Effect
	if l.sched != nil {
		effs = l.sched.step(l.core, now, ev)
	} else {
		// Into the loop's own buffer: apply is done with the effects
		// (queued in their lanes, or carried out) before it returns,
		// and no step runs within another's apply.
		effs = l.core.StepAppend(now, ev, l.effs[:0])
		defer func() {
			clear(effs) // not kept from the collector
			l.effs = effs[:0]
		}()
	}
	for _, id := range l.core.forgotten {
		l.unschedule(id) // before the Schedules of a record that replaced it
	}
	for _, e := range effs {
		if s, ok := e.(Schedule); ok {
			l.schedule(ctx, s, now)
			continue
		}
		if r, ok := e.(ReserveIDs); ok {
			l.reserve(ctx, r)
			continue
		}
		if lg, ok := e.(Log); ok && lg.Line.Stage == "ignored" && !lg.Line.Ahead {
			// A frame set aside changes nothing the proposal's effects
			// do: its line is written now, not behind them (a replay
			// or a spoof read while the claim is being written).
			_ = l.journal.Log(ctx, lg.Line)
			continue
		}
		id := effectID(e)
		ln := l.lanes[id]
		if ln == nil {
			ln = l.newLane(ctx, id)
			l.lanes[id] = ln
		}
		ln.mu.Lock()
		if _, ok := e.(CancelAsk); ok {
			// A prompt or a Status not yet carried out is dropped (see
			// CancelAsk).
			ln.prune(func(q Effect) bool {
				switch q.(type) {
				case SendPrompt, Status:
					return true
				}
				return false
			})
		}
		ln.push(e)
		ln.mu.Unlock()
		if n := len(touched); n == 0 || touched[n-1] != id {
			touched = append(touched, id) // a step's effects are mostly one proposal's
		}
	}
	l.live.Store(int64(l.core.Live()))
	return touched
}

// decide asks the policy beside the proposal's lane: it starts in the
// lane's order (after the lines before it), but an evaluation may take as
// long as the policy's timeout, and what else happens to the proposal
// meanwhile (its withdrawal, its record's delete) must not wait for it,
// so the lane goes on while a decider (Evaluators) asks it, or, without
// one, runLane hands the lane on before it calls decide on its worker.
// Nothing of the proposal waits in its lane for the answer either: the
// core emits the effects that follow a decision once Decided comes back
// (and ignores one the proposal no longer waits for).
func (l *Loop) decide(ctx context.Context, d Decide) {
	l.result(ctx, l.policy.Decide(ctx, d))
}

// result hands Run ev, an event made on one of the Loop's own
// goroutines (a decider's or a worker's Decided), on the buffered
// channel of the workers' reports rather than as Post does: Post waits
// until Run takes the event, so a decider that finished while Run was
// busy parked, and was woken again when Run took it (two goroutine
// switches more for each decision, and no next evaluation meanwhile).
// Nothing waits for ev to be applied: a Decided the proposal no longer
// waits for is ignored by the core, and no order binds it to another
// goroutine's Post.
func (l *Loop) result(ctx context.Context, ev Event) {
	l.report(ctx, laneDone{result: ev, own: true})
}

// decider asks the policy the Decides queued for it (toDecider), one
// at a time, until ctx ends: one of the Loop's deciders (Evaluators).
func (l *Loop) decider(ctx context.Context) {
	for {
		select {
		case d := <-l.decideq:
			l.decide(ctx, d)
		case <-ctx.Done():
			return
		}
	}
}

// toDecider queues d for the deciders; false if there are none, or the
// queue is full (the caller asks the policy on a worker, as without
// them). The caller's lane goes on at once: nothing of the proposal
// waits for the answer (see decide).
func (l *Loop) toDecider(d Decide) bool {
	if l.decideq == nil {
		return false
	}
	select {
	case l.decideq <- d:
		l.handoffs.Add(1)
		return true
	default:
		return false
	}
}

// reserve reserves r.N JSON-RPC ids on a worker, tried until it is made
// (or ctx ends), and posts them (IDsReserved): the store's compare-and-set
// that a block of ids may need is never waited for in Step.
func (l *Loop) reserve(ctx context.Context, r ReserveIDs) {
	res, ok := l.wire.(IDReserver)
	if !ok {
		panic("lifecycle: Config.ReserveIDs with a Wire that is no IDReserver")
	}
	l.work(ctx, func() {
		for {
			ids, err := res.ReserveIDs(ctx, r.N)
			if err == nil {
				_ = l.Post(ctx, IDsReserved{IDs: ids})
				return
			}
			if !l.pause(ctx) {
				return
			}
		}
	})
}

// workerIdle is how long a worker waits for more work before it ends.
const workerIdle = 2 * time.Second

// worker is one of the Loop's goroutines that carry out effects (work).
type worker struct {
	// job hands the worker its next f (nil: end). It has room for one:
	// whoever takes the worker off idleWorkers sends it exactly one.
	job chan func()
	// since is when the worker last went idle (under Loop.mu).
	since time.Time
}

// work runs f on one of the loop's workers: the one that went idle
// last, if one waits, else a new one. Reusing goroutines keeps the stacks
// grown to what the store and the policy need (a goroutine per effect
// spent about a tenth of the fulfiller's CPU growing stacks:
// runtime.newstack in the bench's profile), and taking the worker idle
// since last, not the one idle longest, gives the work to a goroutine
// whose stack the garbage collector has not shrunk since (it halves the
// stack of a goroutine that uses little of it): with the workers taken
// in turn, nearly every policy evaluation grew a stack again. A worker
// idle for workerIdle ends at the next work, so a burst's workers do not
// stay; workers end with ctx, and Run waits for them.
func (l *Loop) work(ctx context.Context, f func()) {
	l.handoffs.Add(1)
	if l.sched != nil {
		l.sched.spawn(f)
		return
	}
	var w, old *worker
	l.mu.Lock()
	if n := len(l.idleWorkers); n > 0 {
		w = l.idleWorkers[n-1]
		l.idleWorkers[n-1] = nil
		l.idleWorkers = l.idleWorkers[:n-1]
		if n > 1 {
			// The one idle longest ends if it has been idle too long:
			// at most one a call, which is enough to drain a burst's.
			if first := l.idleWorkers[0]; time.Since(first.since) >= workerIdle {
				old = first
				l.idleWorkers = slices.Delete(l.idleWorkers, 0, 1)
			}
		}
	}
	l.mu.Unlock()
	if old != nil {
		old.job <- nil
	}
	if w != nil {
		w.job <- f
		return
	}
	l.wg.Add(1)
	go l.worker(ctx, &worker{job: make(chan func(), 1)}, f)
}

// worker runs f, then the work handed to w (work), until it is handed
// nil or ctx ends. It waits on its own channel alone: a timer in the
// wait cost a runtime timer's add and removal per effect.
func (l *Loop) worker(ctx context.Context, w *worker, f func()) {
	defer l.wg.Done()
	for {
		f()
		l.mu.Lock()
		// Real time, not l.clock: how long a goroutine idles is no part
		// of any proposal's lifecycle.
		w.since = time.Now()
		l.idleWorkers = append(l.idleWorkers, w)
		l.mu.Unlock()
		select {
		case f = <-w.job:
		case <-ctx.Done():
			if l.leave(w) {
				return
			}
			f = <-w.job // taken off idleWorkers: its work is on its way
		}
		if f == nil {
			return
		}
	}
}

// leave takes w off idleWorkers; false if work took it off first.
func (l *Loop) leave(w *worker) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.idleWorkers, w)
	if i >= 0 {
		l.idleWorkers = slices.Delete(l.idleWorkers, i, i+1)
	}
	return i >= 0
}

// timer is a timer set (schedule) and not fired yet.
type timer struct {
	f    Fired
	stop func() bool
}

func (l *Loop) schedule(ctx context.Context, s Schedule, now time.Time) {
	f := Fired{ID: s.ID, At: s.At, Kind: s.Kind}
	ts := l.timers[f.ID]
	for _, t := range ts {
		if t.f == f {
			return // the same timer is set already
		}
	}
	stop := l.clock.AfterFunc(s.At.Sub(now), func() { _ = l.Post(ctx, f) })
	l.timers[f.ID] = append(ts, timer{f: f, stop: stop})
}

// fired forgets timer f, which went off.
func (l *Loop) fired(f Fired) {
	ts, ok := l.timers[f.ID]
	if !ok {
		return // let go of before it fired (unschedule)
	}
	ts = slices.DeleteFunc(ts, func(t timer) bool { return t.f == f })
	if len(ts) == 0 {
		delete(l.timers, f.ID)
	} else {
		l.timers[f.ID] = ts
	}
}

// unschedule stops the timers of proposal id, which the core let go of:
// their firing would change nothing, and each holds memory until then.
func (l *Loop) unschedule(id string) {
	ts, ok := l.timers[id]
	if !ok {
		return
	}
	for _, t := range ts {
		t.stop()
	}
	delete(l.timers, id)
}

// dispatch carries out the effects at the head of proposal id's lane
// that are Immediate, applying their results at once, and hands the rest
// to a worker (runLane), unless one runs the lane already.
func (l *Loop) dispatch(ctx context.Context, id string) {
	for {
		ln := l.lanes[id]
		if ln == nil {
			return
		}
		ln.mu.Lock()
		if ln.running {
			ln.mu.Unlock()
			return
		}
		if len(ln.effs) == 0 {
			ln.mu.Unlock()
			l.dropLane(ln)
			return
		}
		e := ln.effs[0]
		if d, ok := e.(Decide); ok && l.toDecider(d) {
			ln.pop()
			ln.mu.Unlock()
			continue
		}
		if !l.immediate(e) {
			ln.running = true
			ln.mu.Unlock()
			l.work(ctx, ln.run)
			return
		}
		ln.pop()
		ln.mu.Unlock()
		if res := l.carryOut(ctx, e); res != nil {
			l.step(ctx, res) // which dispatches the lane again: the loop looks afresh
		}
	}
}

// immediate reports whether e returns at once (Immediate), so that Run's
// goroutine carries it out.
func (l *Loop) immediate(e Effect) bool {
	switch e.(type) {
	case Log:
		return l.journalNow != nil && l.journalNow.Immediate(e)
	case Write:
		return l.storeNow != nil && l.storeNow.Immediate(e)
	case SendReject, SendRequest, SendRelay, SendCancel, Status, CancelAsk, CancelTask, SendPrompt, Human, CreateGrant:
		return l.wireNow != nil && l.wireNow.Immediate(e)
	}
	return false
}

// runLane carries out the effects of proposal id's lane in order, on a
// worker, until one reports an event (handed to Run, which applies it and
// dispatches the lane again) or none is left (the lane is left idle, for
// Run to forget): a proposal's lines and the send they precede cost one
// hand-off, not one each. A Decide goes to the deciders (Evaluators), or
// without them hands the lane on before the policy is asked (see decide).
func (l *Loop) runLane(ctx context.Context, ln *lane) {
	id := ln.id // Run sets it before it hands the lane over, and not while it runs
	for {
		ln.mu.Lock()
		if len(ln.effs) == 0 {
			ln.running = false
			ln.mu.Unlock()
			l.laneIdle(id)
			return
		}
		e := ln.pop()
		if d, ok := e.(Decide); ok && l.toDecider(d) {
			ln.mu.Unlock()
			continue
		} else if ok {
			more := len(ln.effs) > 0
			if !more {
				ln.running = false
			}
			ln.mu.Unlock()
			if more {
				l.work(ctx, ln.run)
			} else {
				l.laneIdle(id)
			}
			l.decide(ctx, d)
			return
		}
		ln.mu.Unlock()
		if res := l.carryOut(ctx, e); res != nil {
			l.report(ctx, laneDone{ln: ln, result: res})
			return
		}
	}
}

// report hands Run a worker's result on a lane, or an event of one of
// the Loop's own goroutines (result), without waiting for Run to take it
// while there is room (Run's laneDone).
func (l *Loop) report(ctx context.Context, d laneDone) {
	if l.sched != nil {
		_ = l.sched.send(ctx, input{done: d, isDone: true})
		return
	}
	select {
	case l.done <- d:
	case <-ctx.Done():
	}
}

// laneIdle tells Run that a worker left proposal id's lane empty.
func (l *Loop) laneIdle(id string) {
	l.mu.Lock()
	l.idleLanes = append(l.idleLanes, id)
	l.mu.Unlock()
	l.nIdle.Add(1)
}

// sweep forgets the lanes workers left empty (laneIdle) that are still
// empty and idle: those of proposals whose last effects have run.
func (l *Loop) sweep() {
	l.mu.Lock()
	ids := l.idleLanes
	l.idleLanes = nil
	l.nIdle.Store(0)
	l.mu.Unlock()
	for _, id := range ids {
		ln := l.lanes[id]
		if ln == nil {
			continue
		}
		ln.mu.Lock()
		drop := !ln.running && len(ln.effs) == 0
		ln.mu.Unlock()
		if drop {
			l.dropLane(ln)
		}
	}
}

// carryOut does one effect and returns the event that reports it.
func (l *Loop) carryOut(ctx context.Context, e Effect) Event {
	switch e := e.(type) {
	case Log:
		if err := l.journal.Log(ctx, e.Line); err != nil && e.Line.Ahead {
			return Unlogged{ID: e.Line.ProposalID, Stage: e.Line.Stage}
		}
	case Write:
		rev, err := l.store.Write(ctx, e)
		return Stored{ID: e.ID, Seq: e.Seq, Rev: rev, Err: err}
	case Reload:
		for {
			rec, err := l.store.Read(ctx, e.ID)
			if err == nil {
				return Reloaded{ID: e.ID, Record: rec}
			}
			if !l.pause(ctx) {
				return nil
			}
		}
	case Decide:
		l.decide(ctx, e)
	case SendReject:
		return Sent{ID: e.ID, EnvelopeID: e.EnvelopeID, Err: l.wire.SendReject(ctx, e)}
	case SendRequest:
		return Sent{ID: e.ID, EnvelopeID: e.EnvelopeID, Err: l.wire.SendRequest(ctx, e)}
	case SendRelay:
		return Sent{ID: e.ID, EnvelopeID: e.EnvelopeID, Err: l.wire.SendRelay(ctx, e)}
	case FollowTask:
		l.follow(ctx, e)
	case CancelTask:
		l.unfollow(e.ID)
		if e.Reason != DropReason {
			l.wire.CancelTask(ctx, e)
		}
	case SendCancel:
		l.wire.SendCancel(ctx, e)
	case Status:
		l.wire.Status(ctx, e)
	case CancelAsk:
		l.wire.CancelAsk(ctx, e)
	case SendPrompt:
		ch, ok := l.wire.(ApproverChannel)
		if !ok {
			break
		}
		err := ch.SendPrompt(ctx, e)
		if !e.Again {
			return PromptSent{ID: e.ID, EnvelopeID: e.EnvelopeID, Err: err}
		}
	case Human:
		if ch, ok := l.wire.(ApproverChannel); ok {
			ch.Human(ctx, e)
		}
	case CreateGrant:
		if ch, ok := l.wire.(ApproverChannel); ok {
			ch.CreateGrant(ctx, e)
		}
	}
	return nil
}

// follow starts f's follower, on a goroutine the Loop owns: it ends with
// the task, at the proposal's CancelTask, or with Run.
func (l *Loop) follow(ctx context.Context, f FollowTask) {
	fctx, cancel := context.WithCancel(ctx)
	me := &follower{stop: cancel}
	l.mu.Lock()
	if old := l.followers[f.ID]; old != nil {
		old.stop() // followed again (resumed): one follower per proposal
	}
	l.followers[f.ID] = me
	l.mu.Unlock()
	l.spawn(func() {
		l.wire.FollowTask(fctx, f, func(ev Event) { _ = l.Post(fctx, ev) })
		cancel()
		l.mu.Lock()
		if l.followers[f.ID] == me {
			delete(l.followers, f.ID)
		}
		l.mu.Unlock()
	})
}

// unfollow stops the follower of proposal id's task, if one runs.
func (l *Loop) unfollow(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.followers[id]; f != nil {
		f.stop()
		delete(l.followers, id)
	}
}

// release drops the effects of proposal id not carried out yet: nothing
// more is done about it here before another member may adopt its record
// (see Released).
func (l *Loop) release(id string) {
	if ln := l.lanes[id]; ln != nil {
		ln.mu.Lock()
		ln.prune(func(Effect) bool { return true })
		ln.mu.Unlock()
	}
}

// unlogged drops what proposal id's line written ahead (Line.Ahead) was
// ahead of, not carried out yet: its request, its prompts and its
// Status are not sent, as the decision log does not have them (fail
// closed); the writes, lines and answers the core has queued since are
// kept: it waits for their results.
func (l *Loop) unlogged(id string) {
	if ln := l.lanes[id]; ln != nil {
		ln.mu.Lock()
		ln.prune(func(q Effect) bool {
			switch q.(type) {
			case SendRequest, SendPrompt, Status:
				return true
			}
			return false
		})
		ln.mu.Unlock()
	}
}

// prune drops the lane's effects not carried out yet that drop reports.
// A CancelAsk, a Released and an Unlogged prune the proposal's lane,
// each of what no longer happens. The caller holds ln.mu.
func (ln *lane) prune(drop func(Effect) bool) {
	kept := ln.effs[:0]
	for _, e := range ln.effs {
		if !drop(e) {
			kept = append(kept, e)
		}
	}
	clear(ln.effs[len(kept):]) // not kept from the collector
	ln.effs = kept
}

// maxFreeLanes bounds the lanes kept for reuse (Loop.freeLanes): enough
// for the proposals of a busy loop, not a burst's all.
const maxFreeLanes = 1024

// newLane is a lane for proposal id: one left empty before, or a new
// one. Run's goroutine only.
func (l *Loop) newLane(ctx context.Context, id string) *lane {
	var ln *lane
	if n := len(l.freeLanes); n > 0 {
		ln = l.freeLanes[n-1]
		l.freeLanes[n-1] = nil
		l.freeLanes = l.freeLanes[:n-1]
	} else {
		ln = &lane{}
		ln.run = func() { l.runLane(ctx, ln) }
	}
	ln.id = id
	return ln
}

// dropLane forgets ln, empty and run by no worker, and keeps it for
// reuse. Run's goroutine only.
func (l *Loop) dropLane(ln *lane) {
	delete(l.lanes, ln.id)
	if len(l.freeLanes) < maxFreeLanes {
		l.freeLanes = append(l.freeLanes, ln)
	}
}

func effectID(e Effect) string {
	switch e := e.(type) {
	case Write:
		return e.ID
	case Reload:
		return e.ID
	case Decide:
		return e.ID
	case SendReject:
		return e.ID
	case SendRequest:
		return e.ID
	case SendCancel:
		return e.ID
	case SendRelay:
		return e.ID
	case FollowTask:
		return e.ID
	case CancelTask:
		return e.ID
	case Status:
		return e.ID
	case CancelAsk:
		return e.ID
	case Log:
		return e.Line.ProposalID
	case SendPrompt:
		return e.ID
	case Human:
		return e.ID
	case CreateGrant:
		return e.ID
	}
	panic(fmt.Sprintf("lifecycle: effect %T has no proposal", e))
}
