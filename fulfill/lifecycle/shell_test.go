package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/clocktest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// memStore is a Store in memory; it outlives the Loops that use it, as a
// state directory outlives a process. Records are kept as JSON.
type memStore struct {
	mu      sync.Mutex
	member  string
	recs    map[string][]byte
	revs    map[string]uint64
	claimed map[string]bool
	rev     uint64
	deleted chan string
}

func newMemStore(member string) *memStore {
	return &memStore{member: member, recs: map[string][]byte{}, revs: map[string]uint64{}, claimed: map[string]bool{}, deleted: make(chan string, 16)}
}

func (s *memStore) Write(_ context.Context, w Write) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.Create {
		if s.claimed[w.ID] {
			return 0, ErrExists
		}
		s.claimed[w.ID] = true
	} else if _, ok := s.recs[w.ID]; !ok || s.revs[w.ID] != w.Rev {
		return 0, ErrConflict
	}
	s.rev++
	if w.Record == nil {
		delete(s.recs, w.ID)
		delete(s.revs, w.ID)
		s.deleted <- w.ID
		return s.rev, nil
	}
	b, err := json.Marshal(w.Record)
	if err != nil {
		return 0, err
	}
	s.recs[w.ID], s.revs[w.ID] = b, s.rev
	return s.rev, nil
}

func (s *memStore) Read(_ context.Context, id string) (*Proposal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.recs[id]
	if !ok {
		return nil, nil
	}
	var p Proposal
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	p.Rev = s.revs[id]
	return &p, nil
}

func (s *memStore) Owned(ctx context.Context) ([]Proposal, error) {
	s.mu.Lock()
	var ids []string
	for id := range s.recs {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var out []Proposal
	for _, id := range ids {
		p, err := s.Read(ctx, id)
		if err != nil {
			return nil, err
		}
		if p != nil && p.Owner == s.member {
			out = append(out, *p)
		}
	}
	return out, nil
}

// chanWire reports every envelope on sent; with hold set, a reject is
// not written until the send's context ends (the process dies first).
type chanWire struct {
	sent chan string
	hold bool
}

func (w *chanWire) SendReject(ctx context.Context, r SendReject) error {
	w.sent <- "reject " + r.EnvelopeID + " " + r.Reason
	if w.hold {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (w *chanWire) SendRequest(_ context.Context, r SendRequest) error {
	w.sent <- fmt.Sprintf("request %s to %s", r.EnvelopeID, r.To)
	return nil
}

func (w *chanWire) SendCancel(_ context.Context, c SendCancel) {
	w.sent <- "cancel " + c.RequestEnvelopeID
}
func (w *chanWire) CancelAsk(_ context.Context, c CancelAsk) { w.sent <- "cancel-ask " + c.ID }

// SendPrompt makes chanWire an ApproverChannel: prompts are reported;
// the steps with the humans are not.
func (w *chanWire) SendPrompt(_ context.Context, p SendPrompt) error {
	w.sent <- "prompt " + p.EnvelopeID
	return nil
}
func (w *chanWire) Human(context.Context, Human) {}

func (w *chanWire) SendRelay(_ context.Context, r SendRelay) error {
	w.sent <- fmt.Sprintf("relay %s to %s of %s: %s", r.EnvelopeID, r.To, r.TaskID, r.Result)
	return nil
}

// FollowTask reports that it follows, and that it stopped; the test
// posts the task's news itself.
func (w *chanWire) FollowTask(ctx context.Context, f FollowTask, _ func(Event)) {
	w.sent <- "follow " + f.TaskID
	<-ctx.Done()
	w.sent <- "stopped following " + f.TaskID
}

func (w *chanWire) Status(_ context.Context, s Status) {
	w.sent <- "status " + s.Stage
}

func (w *chanWire) CancelTask(_ context.Context, c CancelTask) {
	w.sent <- "tasks/cancel " + c.TaskID
}

type policyFunc func(Decide) Decided

func (f policyFunc) Decide(_ context.Context, d Decide) Decided { return f(d) }

type nopJournal struct{}

func (nopJournal) Log(context.Context, Line) error { return nil }

type chanJournal chan Line

func (j chanJournal) Log(_ context.Context, l Line) error { j <- l; return nil }

var runs atomic.Int64

// lastLoop is the Loop startLoop started last, for the tests that call
// its methods.
var lastLoop atomic.Pointer[Loop]

func startLoop(t *testing.T, store Store, wire Wire, clock Clock, d Decision) (post func(Event), stop func()) {
	t.Helper()
	return startLoopWith(t, store, wire, clock, d, nopJournal{})
}

func startLoopWith(t *testing.T, store Store, wire Wire, clock Clock, d Decision, journal Journal) (post func(Event), stop func()) {
	t.Helper()
	core := New(Config{Member: "m1", MaxPending: 10, MaxInflight: 4, PendingTTL: time.Minute, FulfillTimeout: 30 * time.Second,
		ApprovalTimeout: time.Minute, RetryAfter: time.Millisecond, Approvers: []string{"alice"}, Codec: fakeCodec{}}, &counterIDs{prefix: fmt.Sprintf("run%d-", runs.Add(1))})
	loop := NewLoop(core, clock, store, wire, policyFunc(func(x Decide) Decided { return Decided{ID: x.ID, Decision: d} }), journal, time.Millisecond)
	lastLoop.Store(loop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	return func(ev Event) {
			if err := loop.Post(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}, func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
}

func next(t *testing.T, c chan string) string {
	t.Helper()
	select {
	case s := <-c:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("nothing sent")
		return ""
	}
}

// A process that dies while its reject is being written leaves the
// record; the next process on the same store writes the same envelope,
// and deletes the record once it is written.
func TestLoopRejectSurvivesARestart(t *testing.T) {
	store := newMemStore("m1")
	clock := clocktest.New(t0)
	wire1 := &chanWire{sent: make(chan string, 16), hold: true}
	post, stop := startLoop(t, store, wire1, clock, Decision{Action: Reject, Reason: "policy"})
	post(Proposed{ID: "p1", From: "coder"})
	first := next(t, wire1.sent)
	rec, _ := store.Read(context.Background(), "p1")
	if rec == nil || rec.Phase != Answered || "reject "+rec.Reject.EnvelopeID+" policy" != first {
		t.Fatalf("while %q was written the record was %+v", first, rec)
	}
	stop() // the process dies before the reject is written

	wire2 := &chanWire{sent: make(chan string, 16)}
	_, stop2 := startLoop(t, store, wire2, clock, Decision{Action: Fulfill, Target: "fs"})
	defer stop2()
	if again := next(t, wire2.sent); again != first {
		t.Fatalf("after the restart %q was sent, want %q again", again, first)
	}
	if id := <-store.deleted; id != "p1" {
		t.Fatalf("deleted %s", id)
	}
	select {
	case s := <-wire2.sent:
		t.Fatalf("then %q was sent too", s)
	default:
	}
}

// A proposal that ended leaves no timer behind: its deadline, minutes
// away, would otherwise hold memory for every ended proposal until then
// (50 000 of them in a bench run).
func TestLoopStopsTheTimersOfAnEndedProposal(t *testing.T) {
	store := newMemStore("m1")
	wire := &chanWire{sent: make(chan string, 16)}
	_, stop := startLoop(t, store, wire, clocktest.New(t0), Decision{Action: Reject, Reason: "policy"})
	defer stop()
	loop := lastLoop.Load()
	if err := loop.Post(context.Background(), Proposed{ID: "p1", From: "coder"}); err != nil {
		t.Fatal(err)
	}
	next(t, wire.sent) // the reject
	if id := <-store.deleted; id != "p1" {
		t.Fatalf("deleted %s", id)
	}
	var byID int
	poll.Until(t, "the record's end applied", func() bool {
		_ = loop.Do(context.Background(), func(c *Core) { byID = len(loop.timers) })
		return byID == 0
	})
}

// The fulfil timeout runs on the Loop's clock: at the deadline the
// request is cancelled at its owner, then the proposer rejected.
func TestLoopFulfilTimeout(t *testing.T) {
	store := newMemStore("m1")
	clock := clocktest.New(t0)
	wire := &chanWire{sent: make(chan string, 16)}
	post, stop := startLoop(t, store, wire, clock, Decision{Action: Fulfill, Target: "fs"})
	defer stop()
	post(Proposed{ID: "p1", From: "coder"})
	req := next(t, wire.sent)
	rec, _ := store.Read(context.Background(), "p1")
	if rec == nil || rec.Request == nil || req != fmt.Sprintf("request %s to fs", rec.Request.EnvelopeID) {
		t.Fatalf("sent %q with the record %+v", req, rec)
	}
	clock.Advance(29 * time.Second)
	select {
	case s := <-wire.sent:
		t.Fatalf("%q sent before the deadline", s)
	default:
	}
	clock.Advance(time.Second)
	if c := next(t, wire.sent); c != "cancel "+rec.Request.EnvelopeID {
		t.Fatalf("at the deadline %q, want the request cancelled", c)
	}
	if r := next(t, wire.sent); r[:7] != "reject " || r[len(r)-7:] != "timeout" {
		t.Fatalf("then %q, want reject timeout", r)
	}
}

// gatedWire holds each reject until the test opens the gate.
type gatedWire struct {
	chanWire
	gate chan struct{}
}

func (w *gatedWire) SendReject(ctx context.Context, r SendReject) error {
	w.sent <- "reject " + r.EnvelopeID
	<-w.gate
	return nil
}

// Once a proposal is Released (another member holds its record now),
// the loop does nothing more about it: the reject being written finishes,
// but the record it would then delete is left to its new holder.
func TestLoopReleasedStopsTheWork(t *testing.T) {
	store := newMemStore("m1")
	wire := &gatedWire{chanWire: chanWire{sent: make(chan string, 16)}, gate: make(chan struct{})}
	journal := make(chanJournal, 64)
	post, stop := startLoopWith(t, store, wire, clocktest.New(t0), Decision{Action: Reject, Reason: "policy"}, journal)
	defer stop()
	post(Proposed{ID: "p1", From: "coder"})
	next(t, wire.sent) // the reject is being written
	post(Released{ID: "p1"})
	close(wire.gate)
	for released := false; !released; {
		select {
		case l := <-journal:
			released = l.Stage == "ignored" && l.Reason == "adopted_elsewhere"
		case <-time.After(10 * time.Second):
			t.Fatal("the release was not logged")
		}
	}
	// The delete would have come right after the reject was written, in
	// the proposal's lane, before the line above.
	if rec, _ := store.Read(context.Background(), "p1"); rec == nil || rec.Phase != Answered {
		t.Fatalf("record after the release: %+v, want it left answered for its new holder", rec)
	}
}

// A task-augmented request answered with a task is followed once its
// record is written; a withdrawal stops the follower and cancels the
// task at its owner; a task's end is relayed to the proposer.
func TestLoopFollowsAndEndsATask(t *testing.T) {
	store := newMemStore("m1")
	clock := clocktest.New(t0)
	wire := &chanWire{sent: make(chan string, 16)}
	post, stop := startLoop(t, store, wire, clock, Decision{Action: Fulfill, Target: "fs", Task: true})
	defer stop()
	task := func(id string) {
		t.Helper()
		post(Proposed{ID: id, From: "coder"})
		next(t, wire.sent)
		rec, _ := store.Read(context.Background(), id)
		post(Responded{RequestID: rec.Request.EnvelopeID, From: "fs", TaskID: "t-" + id, TaskStatus: "working"})
		if f := next(t, wire.sent); f != "follow t-"+id {
			t.Fatalf("after the task handle %q, want it followed", f)
		}
		if rec, _ := store.Read(context.Background(), id); rec == nil || rec.Phase != Task || rec.Task.ID != "t-"+id {
			t.Fatalf("followed with the record %+v", rec)
		}
	}
	task("p1")
	post(WithdrawnBy{ID: "p1", From: "coder"})
	got := []string{next(t, wire.sent), next(t, wire.sent)}
	sort.Strings(got)
	if got[0] != "stopped following t-p1" || got[1] != "tasks/cancel t-p1" {
		t.Fatalf("after the withdrawal %q, want the follower stopped and the task cancelled", got)
	}
	if id := <-store.deleted; id != "p1" {
		t.Fatalf("deleted %s", id)
	}

	task("p2")
	post(TaskEnded{ID: "p2", TaskID: "t-p2", Status: "completed", Result: json.RawMessage(`{"content":[]}`)})
	r := next(t, wire.sent)
	rec, _ := store.Read(context.Background(), "p2")
	if rec != nil && (rec.Relay == nil || r != fmt.Sprintf("relay %s to coder of t-p2: {\"content\":[]}", rec.Relay.EnvelopeID)) {
		t.Fatalf("relayed %q with the record %+v", r, rec)
	}
	if !strings.HasPrefix(r, "relay ") || !strings.HasSuffix(r, `to coder of t-p2: {"content":[]}`) {
		t.Fatalf("at the task's end %q, want its result relayed to the proposer", r)
	}
	if id := <-store.deleted; id != "p2" {
		t.Fatalf("deleted %s", id)
	}
}

// Do reads the core between two events, and fails once Run returned.
func TestLoopDoReadsTheCore(t *testing.T) {
	store := newMemStore("m1")
	wire := &chanWire{sent: make(chan string, 16)}
	core := New(Config{Member: "m1", MaxPending: 10, MaxInflight: 4, PendingTTL: time.Minute, FulfillTimeout: 30 * time.Second,
		RetryAfter: time.Millisecond}, &counterIDs{prefix: "do-"})
	loop := NewLoop(core, clocktest.New(t0), store, wire, policyFunc(func(x Decide) Decided {
		return Decided{ID: x.ID, Decision: Decision{Action: Fulfill, Target: "owner"}}
	}), nopJournal{}, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	if err := loop.Post(ctx, Proposed{ID: "p1", From: "agent", Params: json.RawMessage(`{}`), Method: "tools/call", Tool: "t"}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, wire.sent); !strings.HasPrefix(got, "request ") {
		t.Fatalf("sent %q, want the request", got)
	}
	var p Proposal
	var held bool
	var inflight int
	if err := loop.Do(ctx, func(c *Core) { p, held = c.Get("p1"); inflight = c.Inflight() }); err != nil {
		t.Fatal(err)
	}
	if !held || p.Phase != Fulfilling || p.Method != "tools/call" || p.Tool != "t" || p.Request == nil || inflight != 1 {
		t.Fatalf("Get = %+v, %v; inflight %d: want p1 fulfilling with its request, one slot held", p, held, inflight)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := loop.Do(context.Background(), func(*Core) {}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Do after Run returned: %v, want ErrStopped", err)
	}
}

// A record taken from another member and cancelled at once (PostAll) is
// answered without its prompts being asked again.
func TestLoopPostAllAppliesBackToBack(t *testing.T) {
	store := newMemStore("m1")
	wire := &chanWire{sent: make(chan string, 16)}
	post, stop := startLoop(t, store, wire, clocktest.New(t0), Decision{Action: Fulfill})
	defer stop()
	_ = post
	rec := Proposal{ID: "p9", From: "agent", Owner: "m1", Phase: AwaitingApproval, Deadline: t0.Add(time.Hour), DecisionID: "d9",
		Decision: &Decision{Action: Escalate, Approvers: []string{"alice"}},
		Prompts:  []Prompt{{Approver: "alice", EnvelopeID: "e-prompt", RPCID: 7}}}
	b, _ := json.Marshal(rec)
	store.mu.Lock()
	store.rev++
	store.recs["p9"], store.revs["p9"], store.claimed["p9"] = b, store.rev, true
	rec.Rev = store.rev
	store.mu.Unlock()
	loop := lastLoop.Load()
	if err := loop.PostAll(context.Background(), Resumed{Records: []Proposal{rec}, How: "taken"}, Cancelled{ID: "p9", By: "op"}); err != nil {
		t.Fatal(err)
	}
	for {
		got := next(t, wire.sent)
		if strings.HasPrefix(got, "prompt ") {
			t.Fatalf("sent %q: a prompt asked again before its cancel", got)
		}
		if strings.HasPrefix(got, "reject ") {
			if !strings.HasSuffix(got, " other") {
				t.Fatalf("sent %q, want reject other", got)
			}
			return
		}
	}
}

// A prompt still waiting in its proposal's lane when the escalation
// ends is not sent: dropped at the CancelAsk (nothing is asked after the
// proposal's end), and at a release with everything else (another
// member holds the record, and asks its prompts itself). Run is not
// started: each lane carries out its first effect and keeps the rest,
// which the test reads.
func TestLoopSendsNoPromptAfterTheEnd(t *testing.T) {
	core := New(Config{Member: "m1", MaxPending: 10, MaxInflight: 4, PendingTTL: time.Minute, FulfillTimeout: 30 * time.Second,
		ApprovalTimeout: time.Minute, RetryAfter: time.Millisecond, Approvers: []string{"alice"}, Codec: fakeCodec{}}, &counterIDs{})
	loop := NewLoop(core, clocktest.New(t0), newMemStore("m1"), &chanWire{sent: make(chan string, 16)}, policyFunc(func(x Decide) Decided { return Decided{ID: x.ID} }), nopJournal{}, time.Millisecond)
	// No worker runs: what waits in a lane stays there for the test to
	// see (a worker started at once sent x-p2 before the test looked, on
	// a loaded machine).
	loop.sched = heldWork{}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); loop.wg.Wait() }()
	loop.step(ctx, Roster{Present: []string{"alice"}})
	// resumed resumes id's escalation, its prompt to alice open, and
	// returns the prompts waiting in its lane.
	resumed := func(id string) []SendPrompt {
		t.Helper()
		rec := Proposal{ID: id, From: "coder", Owner: "m1", Phase: AwaitingApproval, DecisionID: "d-" + id, Deadline: t0.Add(time.Minute), Rev: 1,
			Decision: &Decision{Action: Escalate, Approvers: []string{"alice"}},
			Prompts:  []Prompt{{Approver: "alice", EnvelopeID: "x-" + id, RPCID: 7, Payload: []byte(`{}`), Sent: t0}}}
		loop.step(ctx, Resumed{Records: []Proposal{rec}, How: "restart"})
		return promptsIn(laneOf(loop, id))
	}
	if got := resumed("p1"); len(got) != 1 || got[0].EnvelopeID != "x-p1" || !got[0].Again {
		t.Fatalf("waiting %+v, want the prompt x-p1 asked again", got)
	}
	loop.step(ctx, WithdrawnBy{ID: "p1", From: "coder"})
	if got := promptsIn(laneOf(loop, "p1")); len(got) != 0 {
		t.Fatalf("after the withdrawal %+v, want no prompt to send", got)
	}

	if got := resumed("p2"); len(got) != 1 {
		t.Fatalf("waiting %+v, want the prompt x-p2 asked again", got)
	}
	loop.release("p2")
	loop.step(ctx, Released{ID: "p2"})
	if got := promptsIn(laneOf(loop, "p2")); len(got) != 0 {
		t.Fatalf("after the release %+v, want no prompt to send", got)
	}
}

// heldWork is a sched that keeps none of the work the Loop hands its
// workers: the effects a worker would carry out stay in their lane, where
// a test that drives the Loop's steps itself looks at them.
type heldWork struct{}

func (heldWork) spawn(func())                                   {}
func (heldWork) recv(ctx context.Context) (input, bool)         { <-ctx.Done(); return input{}, false }
func (heldWork) send(context.Context, input) error              { return errors.New("no Run under heldWork") }
func (heldWork) pause(context.Context) bool                     { return false }
func (heldWork) step(c *Core, now time.Time, ev Event) []Effect { return c.Step(now, ev) }

// laneOf is a copy of the effects waiting in proposal id's lane.
func laneOf(l *Loop, id string) []Effect {
	ln := l.lanes[id]
	if ln == nil {
		return nil
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return slices.Clone(ln.effs)
}

func promptsIn(effs []Effect) []SendPrompt {
	var out []SendPrompt
	for _, e := range effs {
		if p, ok := e.(SendPrompt); ok {
			out = append(out, p)
		}
	}
	return out
}

// failingJournal cannot write the lines written ahead of a send.
type failingJournal struct{}

func (failingJournal) Log(_ context.Context, l Line) error {
	if l.Ahead {
		return errors.New("disk full")
	}
	return nil
}

// A fulfilling line the journal cannot write: the Loop drops the request
// it was ahead of and the proposer gets the reject "other", with no
// request and no cancel on the wire.
func TestLoopFailsClosedOnAnUnloggedLine(t *testing.T) {
	store := newMemStore("m1")
	clock := clocktest.New(t0)
	wire := &chanWire{sent: make(chan string, 16)}
	post, stop := startLoopWith(t, store, wire, clock, Decision{Action: Fulfill, Target: "fs"}, failingJournal{})
	defer stop()
	post(Proposed{ID: "p1", From: "coder"})
	if s := next(t, wire.sent); !strings.HasPrefix(s, "reject ") || !strings.HasSuffix(s, " other") {
		t.Fatalf("sent %q, want only the reject other", s)
	}
	clock.Advance(time.Minute)
	select {
	case s := <-wire.sent:
		t.Fatalf("then %q sent", s)
	case <-time.After(50 * time.Millisecond):
	}
}

// boundedPolicy fulfils every proposal, evaluating at most n at once
// (Evaluators); each evaluation waits for the test's go-ahead, and the
// most it saw at once is kept.
type boundedPolicy struct {
	n       int
	entered chan string   // the proposal an evaluation started for
	proceed chan struct{} // one evaluation may answer
	mu      sync.Mutex
	now     int
	most    int
}

func (p *boundedPolicy) Evaluators() int { return p.n }

func (p *boundedPolicy) Decide(ctx context.Context, d Decide) Decided {
	p.mu.Lock()
	p.now++
	p.most = max(p.most, p.now)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.now--
		p.mu.Unlock()
	}()
	p.entered <- d.ID
	select {
	case <-p.proceed:
	case <-ctx.Done():
	}
	return Decided{ID: d.ID, Decision: Decision{Action: Fulfill, Target: "fs"}}
}

// A policy with Evaluators is asked on that many deciders of the
// Loop's, the others' Decides queued for them: every proposal is
// decided and fulfilled, and no more evaluations run at once than it
// allows.
func TestLoopAsksThePolicyOnItsDeciders(t *testing.T) {
	core := New(Config{Member: "m1", MaxPending: 100, MaxInflight: 100, PendingTTL: time.Hour, FulfillTimeout: time.Hour,
		RetryAfter: time.Second, Alone: true}, &counterIDs{})
	store := &benchStore{revs: map[string]uint64{}, ended: make(chan string, 16), now: true}
	wire := make(benchWire, 16)
	policy := &boundedPolicy{n: 2, entered: make(chan string, 16), proceed: make(chan struct{})}
	loop := NewLoop(core, clocktest.New(t0), store, wire, policy, nopJournal{}, time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() { cancel(); <-done }()
	go func() { // the tool owner answers every request
		for {
			select {
			case r := <-wire:
				_ = loop.Post(ctx, Responded{RequestID: r.EnvelopeID, From: "fs", HasRPCID: true, RPCID: r.RPCID, Result: json.RawMessage(`{}`)})
			case <-ctx.Done():
				return
			}
		}
	}()
	const n = 6
	for i := range n {
		if err := loop.Post(ctx, Proposed{ID: fmt.Sprintf("p%d", i), From: "coder", Method: "tools/call", Tool: "write", Addressee: "fs"}); err != nil {
			t.Fatal(err)
		}
	}
	var decided, ended []string
	for range n {
		decided = append(decided, <-policy.entered)
		policy.proceed <- struct{}{}
	}
	for range n {
		ended = append(ended, <-store.ended)
	}
	slices.Sort(decided)
	slices.Sort(ended)
	want := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	if !slices.Equal(decided, want) || !slices.Equal(ended, want) {
		t.Fatalf("decided %v, records deleted %v; want %v each", decided, ended, want)
	}
	policy.mu.Lock()
	defer policy.mu.Unlock()
	if policy.most > policy.n {
		t.Fatalf("%d evaluations at once, want at most %d", policy.most, policy.n)
	}
}
