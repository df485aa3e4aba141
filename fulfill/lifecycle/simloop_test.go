package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"
)

// shell is one incarnation of a simulated member's shell: the real Loop
// around its Core, run by the simulator one thing at a time (shell is the
// Loop's sched) over adapters into the simulated world (shell is its
// Store, Wire, ApproverChannel, IDReserver, Policy, Journal and Clock).
//
// Each goroutine the Loop would start (Run itself, a worker, a task's
// follower, the read of the member's records) is a coroutine (iter.Pull):
// it runs only when the simulator resumes it, until it waits again. A
// call into the world waits (block) until the simulator resumes its
// coroutine, which then carries the call out: a store write, a line, a
// frame, a policy decision each are one turn of the seed, in an order
// the seed draws, and a crash finds each of them either done or not. Run
// waits for its inputs (recv) in the same way; what the world posts
// (Post, PostAll, Match, Do: frames read, timers, leases) is taken at
// once (after the inputs before it), what the Loop's own coroutines send (a lane's result, a
// decision, a task's news) waits in inbox for Run's turn. Nothing runs
// beside anything else, so a seed replays exactly.
type shell struct {
	s    *sim
	m    *member
	loop *Loop
	// ctx is the incarnation's (Run's): cancelled when it crashes.
	ctx    context.Context
	cancel context.CancelFunc
	dead   bool
	run    *coro   // Run's coroutine
	coros  []*coro // the others, in the order they were spawned
	inbox  []input // Run's inputs not taken yet
	// sent and taken count the inputs handed to Run and taken by it.
	sent, taken int
	timers      []*simTimer // set and neither fired nor stopped
	// follows are the task followers running, by proposal.
	follows map[string]*follow
	// proposed counts the Proposed events the world posted (Handoffs).
	proposed int64
}

// coro is one of a shell's goroutines, as a coroutine of the simulator.
// A coroutine that finished its work waits for more (idle), as the
// Loop's workers do, and one whose shell ended goes back to its pool
// (coroPool) for the next shells and seeds.
type coro struct {
	name  string
	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool
	loop  bool   // Run's own
	work  func() // what it runs next (fresh)
	// fresh: it has work it has not begun; idle: none; finished: its
	// shell ended (it is back in the pool, or was stopped).
	fresh, idle, finished bool
	// halting: its shell ended while it waited; every wait it is in or
	// makes returns false at once, until its work returned.
	halting bool
	// op is the call into the world it waits in, under ctx (nil: it runs,
	// or it is Run waiting for an input).
	op  *simOp
	ctx context.Context
}

// wait parks the running coroutine until it is resumed; false once its
// shell ended, as a stopped iter.Pull's yield.
func (c *coro) wait() bool {
	if c.halting {
		return false
	}
	return c.yield(struct{}{}) && !c.halting
}

// coroPool keeps the coroutines of the shells that ended, for the shells
// of the seeds after. Under the race detector a coroutine is costly to
// make (120 to 340 µs on the loaded machine, against 4 to 16 µs for a
// goroutine): iter.Pull's goroutine exits without telling the detector
// (runtime.coroexit does not call racegoend, goexit1 does), which then
// keeps every one as a live thread, and 2 000 seeds made about 58 000.
// One pool serves seeds run one after another (not at once), and close
// stops its coroutines.
type coroPool struct {
	free []*coro
}

// get hands out an idle coroutine, or a new one, that runs f when first
// resumed and then each work spawn hands it.
func (p *coroPool) get(name string, f func()) *coro {
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free = p.free[:n-1]
		*c = coro{name: name, work: f, fresh: true, next: c.next, stop: c.stop, yield: c.yield}
		return c
	}
	c := &coro{name: name, work: f, fresh: true}
	c.next, c.stop = iter.Pull(func(yield func(struct{}) bool) {
		c.yield = yield
		for {
			f := c.work
			c.work = nil
			f()
			c.idle = true
			if !yield(struct{}{}) {
				return
			}
		}
	})
	return c
}

// put takes back c, idle: its work returned, or never began.
func (p *coroPool) put(c *coro) {
	c.finished = true
	c.work, c.op, c.ctx = nil, nil, nil
	if c.yield == nil {
		// Never resumed: iter.Pull's goroutine has not run, and a
		// coroutine that never ran has no yield to come back with;
		// stop leaves nothing behind.
		c.stop()
		return
	}
	p.free = append(p.free, c)
}

// close stops every coroutine in the pool.
func (p *coroPool) close() {
	for _, c := range p.free {
		c.stop()
	}
	p.free = nil
}

// simOp is a call into the world that a coroutine waits in.
type simOp struct {
	what string
	// crash is what the call did if its member crashed while it was
	// being made (a write applied, a frame sent): done or not, as the
	// seed draws. nil: it leaves nothing behind.
	crash func()
	// news: a task's follower waiting for its task's news, which only
	// taskProgress brings.
	news bool
}

// follow is a task follower running (Wire.FollowTask).
type follow struct {
	pid, tid string
	c        *coro
	news     []Event // what the follower reads when resumed
	ended    bool    // the task ended: the follower returns after news
}

// simTimer is a timer set with the shell's Clock.
type simTimer struct {
	at time.Time
	f  func()
}

// errCrashed is what a call into the world returns to a coroutine whose
// member crashed while it waited: nobody reads it.
var errCrashed = errors.New("the member crashed")

// newShell makes m's new incarnation: its Loop over a fresh Core, Run
// started up to its first wait. Writes and lines are Immediate (carried
// out on Run's goroutine) when the seed's world says so.
func (s *sim) newShell(m *member, core *Core) *shell {
	sh := &shell{s: s, m: m, follows: map[string]*follow{}}
	sh.ctx, sh.cancel = context.WithCancel(context.Background())
	var store Store = sh
	if s.storeNow {
		store = nowStore{sh}
	}
	var journal Journal = sh
	if s.journalNow {
		journal = nowJournal{sh}
	}
	var wire Wire = sh
	if s.wireNow {
		wire = nowWire{sh}
	}
	sh.loop = NewLoop(core, sh, store, wire, sh, journal, time.Second)
	sh.loop.sched = sh
	sh.run = sh.newCoro(fmt.Sprintf("%s.run", m.id), func() { _ = sh.loop.Run(sh.ctx) })
	sh.run.loop = true
	sh.run.fresh = false
	s.resume(sh.run)
	return sh
}

// newCoro makes a coroutine (from the seed's pool) that runs f when
// first resumed, then each work spawn hands it, until its shell ends.
func (sh *shell) newCoro(name string, f func()) *coro {
	return sh.s.pool.get(name, f)
}

// resume runs c until it waits again (or ends), then what the world
// does in answer to what it did (later).
func (s *sim) resume(c *coro) {
	if s.cur != nil {
		panic(fmt.Sprintf("coroutine %s resumed from %s", c.name, s.cur.name))
	}
	s.cur = c
	c.fresh, c.idle = false, false
	if _, ok := c.next(); !ok {
		c.finished = true
	}
	s.cur = nil
	for len(s.later) > 0 {
		f := s.later[0]
		s.later = s.later[1:]
		f()
	}
}

// block parks the running coroutine in op, a call into the world under
// ctx, until the simulator resumes it, and reports whether the call may
// be carried out: false once ctx ended (its member crashed, or a
// follower was stopped). Run's own calls (an Immediate effect, an
// ignored line) do not wait: the Loop makes them there only because
// they return at once.
func (s *sim) block(ctx context.Context, op *simOp) bool {
	c := s.cur
	if ctx.Err() != nil {
		return false
	}
	if c.loop {
		return true
	}
	c.op, c.ctx = op, ctx
	ok := c.wait()
	c.op, c.ctx = nil, nil
	return ok && ctx.Err() == nil
}

// runnable reports whether the simulator may resume c now: its work
// not begun yet, or waiting in a call (a follower only once it was
// stopped: its task's news are taskProgress's).
func (c *coro) runnable() bool {
	return !c.finished && (c.fresh || c.op != nil && (!c.op.news || c.ctx.Err() != nil))
}

// spawn (sched) hands f to an idle coroutine, or a new one: it begins
// when the seed picks it.
func (sh *shell) spawn(f func()) {
	for _, c := range sh.coros {
		if c.idle && !c.fresh && !c.finished {
			c.work, c.fresh = f, true
			return
		}
	}
	sh.coros = append(sh.coros, sh.newCoro(fmt.Sprintf("%s.%d", sh.m.id, len(sh.coros)), f))
}

// recv (sched) is Run waiting for an input: it takes one each time it
// is resumed with one in its inbox.
func (sh *shell) recv(ctx context.Context) (input, bool) {
	c := sh.s.cur
	for {
		if ctx.Err() != nil || !c.wait() || ctx.Err() != nil {
			return input{}, false
		}
		if len(sh.inbox) > 0 {
			in := sh.inbox[0]
			sh.inbox = sh.inbox[1:]
			sh.taken++
			return in, true
		}
	}
}

// send (sched) hands Run an input. From the world (no coroutine runs)
// it returns once Run took it, as Post does, and here also applied it;
// from one of the Loop's coroutines it waits in the inbox for Run's
// turn.
func (sh *shell) send(ctx context.Context, in input) error {
	if sh.dead {
		return ErrStopped
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sh.inbox = append(sh.inbox, in)
	sh.sent++
	if sh.s.cur == nil {
		sh.pump(sh.sent)
	}
	return nil
}

// pump has Run take its inputs until it took the n-th.
func (sh *shell) pump(n int) {
	for !sh.dead && sh.taken < n && len(sh.inbox) > 0 {
		sh.s.resume(sh.run)
	}
}

// pause (sched) is a retry's wait: a turn of the seed.
func (sh *shell) pause(ctx context.Context) bool {
	return sh.s.block(ctx, &simOp{what: "retry"})
}

// step (sched) is Core.Step with the simulator's checks around it.
func (sh *shell) step(c *Core, now time.Time, ev Event) []Effect {
	return sh.s.stepped(sh.m, c, now, ev)
}

// kill ends the incarnation: each call being made may have happened
// (when it crashes: crashed), the coroutines are run out (every call
// into the world fails at once, every input for Run is dropped), the
// timers are gone.
func (sh *shell) kill(crashed bool) {
	if sh.dead {
		return
	}
	s := sh.s
	if crashed {
		for _, c := range sh.coros {
			if !c.finished && c.op != nil && c.op.crash != nil && s.rng.IntN(2) == 0 {
				c.op.crash()
			}
		}
	}
	sh.dead = true
	sh.cancel()
	// Coroutines spawned while others are run out are run out too.
	for i := 0; i < len(sh.coros); i++ {
		sh.halt(sh.coros[i])
	}
	sh.halt(sh.run)
	sh.inbox, sh.timers, sh.follows = nil, nil, nil
}

// halt runs c's work out (every wait it is in or makes returns false)
// and gives c back to the pool.
func (sh *shell) halt(c *coro) {
	if c.finished {
		return
	}
	if !c.fresh && !c.idle {
		sh.s.cur = c
		c.halting = true
		_, ok := c.next()
		c.halting = false
		sh.s.cur = nil
		if !ok {
			// It ended (a panic went up through resume): nothing to
			// give back.
			c.finished = true
			return
		}
		if !c.idle {
			panic(fmt.Sprintf("coroutine %s still runs after its shell ended", c.name))
		}
	}
	sh.s.pool.put(c)
}

// Now (Clock) is the simulated time.
func (sh *shell) Now() time.Time { return sh.s.now }

// AfterFunc (Clock) sets a timer fireTimer fires.
func (sh *shell) AfterFunc(d time.Duration, f func()) func() bool {
	t := &simTimer{at: sh.s.now.Add(d), f: f}
	sh.timers = append(sh.timers, t)
	return func() bool {
		i := slices.Index(sh.timers, t)
		if i < 0 {
			return false
		}
		sh.timers = slices.Delete(sh.timers, i, i+1)
		return true
	}
}

// nowStore is the shell's Store with its writes Immediate, as an
// in-process store's are.
type nowStore struct{ *shell }

func (nowStore) Immediate(e Effect) bool { _, ok := e.(Write); return ok }

// nowJournal is the shell's Journal with its lines Immediate, as lines
// only observed are.
type nowJournal struct{ *shell }

func (nowJournal) Immediate(e Effect) bool { _, ok := e.(Log); return ok }

// nowWire is the shell's Wire with its sends Immediate, as the MCP
// front end's are (they hand the message on and return).
type nowWire struct{ *shell }

func (nowWire) Immediate(e Effect) bool {
	switch e.(type) {
	case SendRequest, SendReject, SendRelay, SendCancel:
		return true
	}
	return false
}

// inline reports whether the call being made is Run's own (Immediate).
func (sh *shell) inline() bool { return sh.s.cur != nil && sh.s.cur.loop }

// Write (Store) applies w to the shared store.
func (sh *shell) Write(ctx context.Context, w Write) (uint64, error) {
	s, m := sh.s, sh.m
	if sh.inline() {
		s.covered["world/immediate_write"]++
	}
	if !s.block(ctx, &simOp{what: "write " + w.ID, crash: func() {
		rev, err := s.write(m, w)
		s.tracef("  %s's write %s happened before the crash: rev %d err %v", m.id, w.ID, rev, err)
	}}) {
		return 0, errCrashed
	}
	rev, err := s.write(m, w)
	s.tracef("%s write %s seq %d create %v claim-only %v delete %v: rev %d err %v", m.id, w.ID, w.Seq, w.Create, w.ClaimOnly, w.Record == nil, rev, err)
	return rev, err
}

// Read (Store) reads a record back (Reload); it fails while the store
// does, and the Loop tries again.
func (sh *shell) Read(ctx context.Context, id string) (*Proposal, error) {
	s := sh.s
	if !s.block(ctx, &simOp{what: "read " + id}) {
		return nil, errCrashed
	}
	if s.rng.Float64() < s.failRate/2 {
		s.tracef("%s reload %s: unavailable", sh.m.id, id)
		s.covered["world/read_failed"]++
		return nil, errUnavailable
	}
	rec := s.record(id)
	s.tracef("%s reloads %s: %v", sh.m.id, id, rec != nil)
	s.covered["world/reload"]++
	return rec, nil
}

// Owned (Store) reads this member's records at start; it fails while
// the store does, and the Loop tries again.
func (sh *shell) Owned(ctx context.Context) ([]Proposal, error) {
	s := sh.s
	if !s.block(ctx, &simOp{what: "owned"}) {
		return nil, errCrashed
	}
	if s.rng.Float64() < s.failRate {
		s.tracef("%s reads its records: unavailable", sh.m.id)
		s.covered["world/owned_failed"]++
		return nil, errUnavailable
	}
	recs := s.owned(sh.m.id)
	s.tracef("%s reads its %d records", sh.m.id, len(recs))
	return recs, nil
}

// ReserveIDs (IDReserver) hands out JSON-RPC ids nobody had before, from
// the group's one counter; it fails while the store does.
func (sh *shell) ReserveIDs(ctx context.Context, n int) ([]int64, error) {
	s := sh.s
	if !s.block(ctx, &simOp{what: "reserve"}) {
		return nil, errCrashed
	}
	if s.rng.Float64() < s.failRate {
		s.covered["world/reserve_failed"]++
		return nil, errUnavailable
	}
	ids := make([]int64, n)
	for i := range ids {
		s.nextReserved++
		ids[i] = s.nextReserved
		s.reserved[ids[i]] = true
	}
	s.covered["world/reserved"]++
	s.tracef("%s reserves ids %d to %d", sh.m.id, ids[0], ids[n-1])
	return ids, nil
}

// Log (Journal) writes a decision-log line. One written ahead of a send
// fails while the store does (half as often): the Loop drops what it
// was ahead of, and no request queued behind it may reach the wire.
func (sh *shell) Log(ctx context.Context, l Line) error {
	s, m := sh.s, sh.m
	if !s.block(ctx, &simOp{what: "log " + l.Stage, crash: func() { s.writeLine(m, l) }}) {
		return errCrashed
	}
	if l.Ahead && s.rng.Float64() < s.failRate/2 {
		pid := l.ProposalID
		s.tracef("%s line %s of %s not written", m.id, l.Stage, pid)
		s.covered["world/unlogged/"+l.Stage]++
		if ln := sh.loop.lanes[pid]; ln != nil {
			ln.mu.Lock()
			for _, q := range ln.effs {
				if r, ok := q.(SendRequest); ok {
					s.neverSent[r.EnvelopeID] = true
				}
			}
			ln.mu.Unlock()
		}
		return errors.New("not written")
	}
	s.writeLine(m, l)
	return nil
}

// Decide (Policy) is the seed's policy: the proposal's, or its edit's.
func (sh *shell) Decide(ctx context.Context, e Decide) Decided {
	s := sh.s
	if !s.block(ctx, &simOp{what: "decide " + e.ID}) {
		return Decided{ID: e.ID}
	}
	return s.decide(sh.m, e)
}

// SendReject (Wire) writes a reject, unless the wire fails it.
func (sh *shell) SendReject(ctx context.Context, e SendReject) error {
	s, m := sh.s, sh.m
	if sh.inline() {
		s.covered["world/immediate_send"]++
	}
	f := frame{kind: "reject", id: e.EnvelopeID, from: m.id, to: e.To, corr: e.ID, pid: e.ID, reason: e.Reason, member: m.id, inc: m.inc}
	f.began = s.beginning(m, f)
	if !s.block(ctx, &simOp{what: "reject " + e.ID, crash: func() { s.broadcast(f) }}) {
		return errCrashed
	}
	if s.rng.Float64() < s.failRate/2 {
		s.tracef("%s reject %s not written", m.id, e.ID)
		return errors.New("not written")
	}
	s.broadcast(f)
	return nil
}

// SendRequest (Wire) writes a fulfilment request: not written, its
// owner found away, refused by the gateway (a system/error read after
// it), or out.
func (sh *shell) SendRequest(ctx context.Context, e SendRequest) error {
	s, m := sh.s, sh.m
	if sh.inline() {
		s.covered["world/immediate_send"]++
	}
	f := requestFrame(m, e)
	f.began = s.beginning(m, f)
	if !s.block(ctx, &simOp{what: "request " + e.ID, crash: func() { s.broadcast(f) }}) {
		return errCrashed
	}
	if s.rng.Float64() < s.failRate/2 {
		s.tracef("%s request %s not written", m.id, e.ID)
		return errors.New("not written")
	}
	if s.ownerAway && s.rng.IntN(2) == 0 {
		// The wire's roster has the owner gone (its leave frame not
		// read here yet, or none came): nothing is written, and this
		// member knows the owner is away once its core takes the Sent.
		s.tracef("%s request %s: %s away", m.id, e.ID, e.To)
		s.covered["world/request_away"]++
		s.away[e.EnvelopeID] = true
		return fmt.Errorf("request %s: %w", e.EnvelopeID, ErrAway)
	}
	if s.rng.Float64() < s.failRate/4 {
		// Written, and refused by the gateway (a system/error read
		// later): it never reached the owner.
		s.tracef("%s request %s refused by the gateway", m.id, e.ID)
		s.covered["world/request_refused"]++
		inc := m.inc
		s.later = append(s.later, func() {
			if m.alive && m.inc == inc {
				s.deliver(m, Refused{ID: e.ID, EnvelopeID: e.EnvelopeID})
			}
		})
		return nil
	}
	if s.away[e.EnvelopeID] {
		s.covered["world/away_resent"]++ // held, and sent as it was once its owner is back
	}
	s.broadcast(f)
	return nil
}

// SendRelay (Wire) writes a task's outcome to its proposer, unless the
// wire fails it (often: the same envelope is written again).
func (sh *shell) SendRelay(ctx context.Context, e SendRelay) error {
	s, m := sh.s, sh.m
	if sh.inline() {
		s.covered["world/immediate_send"]++
	}
	f := relayFrame(m, e)
	f.began = s.beginning(m, f)
	if !s.block(ctx, &simOp{what: "relay " + e.ID, crash: func() { s.broadcast(f) }}) {
		return errCrashed
	}
	if s.rng.Float64() < s.failRate/2 || s.rng.IntN(8) == 0 {
		s.unwritten[e.EnvelopeID] = true
		s.tracef("%s relay %s not written", m.id, e.ID)
		return errors.New("not written")
	}
	if s.unwritten[e.EnvelopeID] {
		s.covered["world/resent_relay"]++ // the same envelope, written at last
	}
	s.broadcast(f)
	return nil
}

// Status (Wire) writes a status chat.
func (sh *shell) Status(ctx context.Context, e Status) {
	s, m := sh.s, sh.m
	f := frame{kind: "status", from: m.id, to: e.To, corr: e.ID, pid: e.ID, reason: e.Stage, taskID: e.TaskID, status: e.TaskStatus, member: m.id, inc: m.inc}
	f.began = s.beginning(m, f)
	if !s.block(ctx, &simOp{what: "status " + e.ID}) {
		return
	}
	f.id = s.newID()
	s.broadcast(f)
}

// SendCancel (Wire) cancels a fulfilment request at its owner.
func (sh *shell) SendCancel(ctx context.Context, e SendCancel) {
	s, m := sh.s, sh.m
	if !s.block(ctx, &simOp{what: "cancel " + e.ID}) {
		return
	}
	s.broadcast(frame{kind: "cancel", id: s.newID(), from: m.id, to: e.To, corr: e.RequestEnvelopeID, pid: e.ID, reason: e.Reason, member: m.id, inc: m.inc})
}

// CancelTask (Wire) cancels a task at its owner (the Loop stopped its
// follower before).
func (sh *shell) CancelTask(ctx context.Context, e CancelTask) {
	s, m := sh.s, sh.m
	if !s.block(ctx, &simOp{what: "tasks/cancel " + e.ID}) {
		return
	}
	if e.Reason == DropReason {
		s.fail("%s cancels task %s of %s at its owner for a drop (another member follows it)", m.id, e.TaskID, e.ID)
	}
	if t := s.tasks[e.TaskID]; t != nil && !t.ended() {
		t.status = "cancelled"
	}
	s.broadcast(frame{kind: "task_cancel", id: s.newID(), from: m.id, to: e.To, corr: e.RequestEnvelopeID, taskID: e.TaskID, pid: e.ID, reason: e.Reason, member: m.id, inc: m.inc})
}

// CancelAsk (Wire) cancels the prompts recorded (nothing on the wire
// for a drop: another member asks them).
func (sh *shell) CancelAsk(ctx context.Context, e CancelAsk) {
	s, m := sh.s, sh.m
	if !s.block(ctx, &simOp{what: "cancel-ask " + e.ID}) || e.Reason == DropReason {
		return
	}
	cancel := map[string]string{}
	for _, p := range e.Prompts {
		cancel[p.EnvelopeID] = p.Approver
	}
	for _, id := range slices.Sorted(maps.Keys(cancel)) {
		s.broadcast(frame{kind: "prompt_cancel", id: s.newID(), from: m.id, to: cancel[id], corr: id, pid: e.ID, member: m.id, inc: m.inc})
	}
}

// SendPrompt (ApproverChannel) asks an approver, unless the wire fails
// a first ask; a prompt to an approver away is lost.
func (sh *shell) SendPrompt(ctx context.Context, e SendPrompt) error {
	s, m := sh.s, sh.m
	f := frame{kind: "prompt", id: e.EnvelopeID, from: m.id, to: e.To, pid: e.ID, rpc: e.RPCID, member: m.id, inc: m.inc, payload: e.Payload}
	f.began = s.beginning(m, f)
	if !s.block(ctx, &simOp{what: "prompt " + e.ID, crash: func() { f.lost = s.approversAway[e.To]; s.broadcast(f) }}) {
		return errCrashed
	}
	if !e.Again && s.rng.Float64() < s.failRate/4 {
		s.tracef("%s prompt %s of %s not written", m.id, e.EnvelopeID, e.ID)
		s.covered["world/prompt_unsent"]++
		return errors.New("not written")
	}
	f.lost = s.approversAway[e.To]
	s.broadcast(f)
	return nil
}

// Human (ApproverChannel): the steps with the humans are counted as the
// core makes them (stepped).
func (sh *shell) Human(context.Context, Human) {}

// CreateGrant (ApproverChannel) creates a grant an approver chose.
func (sh *shell) CreateGrant(ctx context.Context, e CreateGrant) {
	s, m := sh.s, sh.m
	if !s.block(ctx, &simOp{what: "grant " + e.ID}) {
		return
	}
	t := s.truth[e.ID]
	if e.Duration <= 0 || !t.grantable || !t.accepts[e.Approver] {
		s.fail("%s creates a grant of %s for %s (%s), who did not choose it", m.id, e.Duration, e.ID, e.Approver)
	}
	s.covered["world/grant"]++
}

// FollowTask (Wire) follows a task at its owner: it waits for the news
// taskProgress brings, reports them, and ends with the task or when
// the Loop stops it.
func (sh *shell) FollowTask(ctx context.Context, f FollowTask, report func(Event)) {
	s, m := sh.s, sh.m
	if ctx.Err() != nil {
		return
	}
	if s.durableTasks[f.TaskID] != f.ID {
		// Followed only once recorded: a task followed by nobody
		// after a crash must not be one anybody followed.
		s.fail("%s follows task %s of %s before a record holds it", m.id, f.TaskID, f.ID)
	}
	fl := &follow{pid: f.ID, tid: f.TaskID, c: s.cur}
	sh.follows[f.ID] = fl
	defer func() {
		if sh.follows[f.ID] == fl {
			delete(sh.follows, f.ID)
		}
	}()
	s.tracef("%s follows task %s of %s", m.id, f.TaskID, f.ID)
	for {
		if !s.block(ctx, &simOp{what: "follow " + f.ID, news: true}) {
			if !sh.dead {
				s.covered["world/follower_stopped"]++
			}
			return
		}
		for _, ev := range fl.news {
			report(ev)
		}
		fl.news = nil
		if fl.ended {
			return
		}
	}
}
