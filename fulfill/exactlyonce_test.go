package fulfill

import (
	"encoding/json"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// Exactly once across crashes (issue 27): a crash at any point leaves no
// claimed proposal unanswered, and a restart on the same store answers it
// once, with the envelope ids recorded before the crash.

// kill -9 right after the claim is written: the restart decides the
// proposal and fulfils it once; a replay of its id is then ignored under
// the original decision. When the claim and the record were two writes
// (seen bucket, then pending bucket), this crash left a claimed proposal
// with no record: nobody answered it, and its replay was a "duplicate".
//
// The claim is written before the decision as a group's member writes it
// (alone on its store, a member claims with its decision: see
// TestStoreCrashAfterClaimWithItsDecision).
func TestStoreCrashAfterClaimIsAnsweredOnRestart(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	st.group = true
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	st.crashSpace = h.space
	st.dieAfterClaim.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	waitFor(t, func() bool { return h.space.dead.Load() })
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	dec2 := &fakeDecider{decisions: storeDecisions}
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, dec2)
	req := h2.space.next(t)
	if !isToolsCall(req) || !slices.Equal(req.To, []string{"calculator"}) {
		t.Fatalf("after the restart sent %s to %v: %s, want p1's tools/call to calculator", req.Kind, req.To, req.Payload)
	}
	h2.deliver(answerFor(t, req))
	h2.waitStage(t, "p1", StageFulfilled)
	decision := h2.eventOf(t, "p1", StageFulfilled).DecisionID
	h2.deliver(proposalEnv("p1", "coder", callOf("add")))
	h2.waitStage(t, "p1", StageIgnored)
	if ev := h2.eventOf(t, "p1", StageIgnored); ev.Reason != "duplicate" || ev.DecisionID != decision {
		t.Errorf("the replay's ignored event: reason %q decision %q, want duplicate under %q", ev.Reason, ev.DecisionID, decision)
	}
	h2.space.quiet(t, 200*time.Millisecond)
	if n := dec2.count(); n != 1 {
		t.Errorf("decided %d times after the restart, want 1", n)
	}
	waitFor(t, func() bool {
		recs, err := st2.List(t.Context())
		return err == nil && len(recs) == 0
	})
}

// kill -9 after an invalid proposal is claimed, before its reject is
// written: the restart sends the reject "invalid" (with its explanation)
// once, under the envelope id recorded before the crash, and asks no
// policy. It was sent before any record existed, so this crash left the
// proposer unanswered.
func TestStoreCrashBeforeInvalidRejectIsAnsweredOnRestart(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	st.crashSpace = h.space
	st.dieAfterClaim.Store(true)
	h.deliver(proposalEnv("bad-1", "coder", `{"method":7}`))
	waitFor(t, func() bool { return h.space.dead.Load() })
	h.waitStage(t, "bad-1", StageUndelivered)
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	recs, err := st2.List(t.Context())
	if err != nil || len(recs) != 1 || recs[0].Phase != state.Answered || recs[0].Reject == nil || recs[0].Reject.Reason != "invalid" {
		t.Fatalf("records after the crash = %+v (%v), want bad-1 answered invalid", recs, err)
	}
	recorded := *recs[0].Reject
	dec2 := &fakeDecider{decisions: storeDecisions}
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, dec2)
	rej := h2.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"bad-1"}, `{"reason":"invalid"}`)
	if rej.ID != recorded.EnvelopeID {
		t.Errorf("reject sent as %s, want the recorded envelope %s", rej.ID, recorded.EnvelopeID)
	}
	chat := h2.space.next(t)
	if chat.Kind != agent.KindChat || !slices.Equal(chat.CorrelationID, agent.CorrelationIDs{rej.ID}) {
		t.Errorf("explanation = %s %v %s", chat.Kind, chat.CorrelationID, chat.Payload)
	}
	h2.space.quiet(t, 200*time.Millisecond)
	if n := dec2.count(); n != 0 {
		t.Errorf("an invalid proposal was decided %d times, want 0", n)
	}
	waitFor(t, func() bool {
		recs, err := st2.List(t.Context())
		return err == nil && len(recs) == 0
	})
	h2.deliver(proposalEnv("bad-1", "coder", `{"method":7}`))
	h2.waitStage(t, "bad-1", StageIgnored)
	h2.space.quiet(t, 100*time.Millisecond)
}

// lockedRecorder is a decision log whose lines a test reads while the
// fulfiller writes them.
type lockedRecorder struct {
	mu    sync.Mutex
	lines []Event
}

func (r *lockedRecorder) Observe(Event) {}

func (r *lockedRecorder) Record(e Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, e)
	return nil
}

func (r *lockedRecorder) stages(id string) []Stage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return stagesOf(r.lines, id)
}

// Alone on its store, a member claims a proposal with what its decision
// commits (lifecycle.Config.Alone): a crash right after that one write
// leaves a record the restart acts on without deciding again. A reject
// in the claim is sent; a request in the claim may have gone out, so it
// is never sent again: its response is awaited until the fulfil timeout,
// and the proposal rejected "timeout".
func TestStoreCrashAfterClaimWithItsDecision(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	decisions := map[string]decision.Decision{
		"add":  {Action: decision.Fulfill},
		"deny": {Action: decision.Reject, Reason: "policy", Message: "no denying"},
	}
	cfg := Config{FulfillTimeout: 300 * time.Millisecond}
	st := openStore(t, mode, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, cfg, &fakeDecider{decisions: decisions})
	st.crashSpace = h.space
	// Nothing reaches the wire: p1's reject is not sent, so its record
	// stays (it would end once its reject is written), and the crash
	// comes right after p2's claim.
	h.space.dead.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("deny")))
	// Its claim has returned (the record alone shows before the claim's
	// seen key is written, and the crash would come after p1's claim).
	h.waitStage(t, "p1", StageReceived)
	st.dieAfterClaim.Store(true)
	h.deliver(proposalEnv("p2", "coder", callOf("add")))
	waitFor(t, func() bool { return st.dead.Load() })
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	recs, err := st2.List(t.Context())
	if err != nil || len(recs) != 2 {
		t.Fatalf("records after the crashes = %+v, %v; want p1's and p2's", recs, err)
	}
	for _, r := range recs {
		switch {
		case r.ID == "p1" && r.Phase == state.Answered && r.Reject != nil && r.Reject.Reason == "policy":
		case r.ID == "p2" && r.Phase == state.Fulfilling && r.Request != nil:
		default:
			t.Fatalf("record %s in phase %s (reject %+v, request %+v): want p1 answered with its reject, p2 fulfilling with its request", r.ID, r.Phase, r.Reject, r.Request)
		}
	}
	dec2 := &fakeDecider{decisions: decisions}
	h2 := newStoreHarness(t, "fulfiller", st2, cfg, dec2)
	rejects := map[string]string{}
	for len(rejects) < 2 {
		env := h2.space.nextWithin(t, 5*time.Second)
		switch {
		case isToolsCall(env):
			t.Fatalf("sent %s's tools/call again after the restart: its request was recorded, and may have gone out", env.CorrelationID.First())
		case env.Kind == agent.KindReject:
			id := env.CorrelationID.First()
			if _, twice := rejects[id]; twice {
				t.Fatalf("rejected %s twice", id)
			}
			rejects[id] = reasonOf(env.Payload)
		}
	}
	if rejects["p1"] != "policy" || rejects["p2"] != "timeout" {
		t.Errorf("rejects after the restart %v, want p1 policy (its recorded reject), p2 timeout", rejects)
	}
	if n := dec2.count(); n != 0 {
		t.Errorf("decided %d times after the restart, want 0: the records carry their decisions", n)
	}
	waitFor(t, func() bool {
		recs, err := st2.List(t.Context())
		return err == nil && len(recs) == 0
	})
}

// A crash as a policy reject is being recorded (MarkAnswered not done):
// the record still says "deciding", and the restart decides the proposal
// again, which may fulfil it. The decision log must not hold a "rejected"
// line by then: the line is written once the record says answered.
//
// As a group's member records it: claimed, then decided (alone on its
// store, the reject is in the claim).
func TestStoreRejectedLineFollowsItsRecord(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	deny := map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "policy", Message: "no adding today"}}
	st := openStore(t, mode, "fulfiller")
	st.group = true
	log1 := &lockedRecorder{}
	var atCrash []Stage
	st.beforeAnswered = func(p *lifecycle.Proposal) {
		atCrash = log1.stages(p.ID)
		st.dead.Store(true) // kill -9: the write never happens
	}
	h := newStoreHarness(t, "fulfiller", st, Config{Observer: log1}, &fakeDecider{decisions: deny})
	st.crashSpace = h.space
	h.space.dead.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	waitFor(t, func() bool { return st.dead.Load() })
	if slices.Contains(atCrash, StageRejected) {
		t.Errorf("decision log at the crash = %v: a rejected line before the record says answered", atCrash)
	}
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	req := h2.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("after the restart sent %s %s, want p1's tools/call (decided again)", req.Kind, req.Payload)
	}
	h2.deliver(answerFor(t, req))
	h2.waitStage(t, "p1", StageFulfilled)
	h2.space.quiet(t, 100*time.Millisecond)
}

// A crash as an escalation is being recorded (its record still says
// "deciding"): the restart decides the proposal again and escalates it
// again. The decision log must then hold one escalated line, not two: the
// line is written once the record says awaiting_approval.
//
// As a group's member records it: claimed, then decided.
func TestStoreEscalatedLineFollowsItsRecord(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	st.group = true
	log1 := &lockedRecorder{}
	var atCrash []Stage
	st.beforeUpdate = func(p *lifecycle.Proposal) {
		if p.Phase == state.AwaitingApproval && !st.dead.Load() {
			atCrash = log1.stages(p.ID)
			st.dead.Store(true) // kill -9: the write never happens
		}
	}
	h := newStoreHarness(t, "fulfiller", st, Config{Observer: log1, Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	st.crashSpace = h.space
	h.deliver(proposalEnv("p1", "coder", callOf("ask")))
	waitFor(t, func() bool { return st.dead.Load() })
	h.space.dead.Store(true)
	if slices.Contains(atCrash, StageEscalated) {
		t.Errorf("decision log at the crash = %v: an escalated line before the record says awaiting_approval", atCrash)
	}
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	log2 := &lockedRecorder{}
	h2 := newStoreHarness(t, "fulfiller", st2, Config{Observer: log2, Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	nextPrompt(t, h2.space, "alice", "p1") // asked after the restart
	n := 0
	for _, s := range append(log1.stages("p1"), log2.stages("p1")...) {
		if s == StageEscalated {
			n++
		}
	}
	if n != 1 {
		t.Errorf("escalated lines = %d over the crash (%v then %v), want 1", n, log1.stages("p1"), log2.stages("p1"))
	}
}

// opCounter counts the state store's write operations by name.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *opCounter) StoreOp(op string, _ time.Duration, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = map[string]int{}
	}
	c.ops[op]++
}
func (c *opCounter) Claimed(bool)        {}
func (c *opCounter) Adopted(string, int) {}
func (c *opCounter) LeaseRenewed(error)  {}

// writes is a copy of the counts of the operations that write a
// proposal's claim or record.
func (c *opCounter) writes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, op := range []string{"claim", "put", "update", "answered", "delete"} {
		if n := c.ops[op]; n > 0 {
			out[op] = n
		}
	}
	return out
}

// writesSince is writes less before (a copy writes made earlier): the
// writes made since, by operation, those with none left out.
func (c *opCounter) writesSince(before map[string]int) map[string]int {
	after := c.writes()
	for op, n := range after {
		if after[op] = n - before[op]; after[op] == 0 {
			delete(after, op)
		}
	}
	return after
}

// count is how many op operations the store reported so far.
func (c *opCounter) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

// On the way from a human's approval to the fulfilment request the
// process waits for one disk sync, the request's record's: the approval
// is recorded without a wait (a machine crash that loses it re-asks the
// same prompt, whose client answers again), and so is the escalation's
// phase before its first prompt's record.
func TestStoreOneSyncFromApprovalToRequest(t *testing.T) {
	t.Parallel()
	ops := &opCounter{}
	st := openStore(t, state.Mode{Kind: state.Dir, Dir: t.TempDir()}, "fulfiller", func(c *state.Config) { c.Observer = ops })
	h := newStoreHarness(t, "fulfiller", st, Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	h.deliver(proposalEnv("p1", "coder", callOf("ask")))
	prompt := nextPrompt(t, h.space, "alice", "p1")
	if n := ops.count("sync"); n != 1 {
		t.Errorf("syncs waited for before the prompt = %d, want 1 (the prompt's record)", n)
	}
	before := ops.count("sync")
	h.deliver(answerTo(t, prompt, "alice", approveResult))
	if req := h.space.next(t); !isToolsCall(req) {
		t.Fatalf("sent %s %s, want the tools/call", req.Kind, req.Payload)
	}
	if n := ops.count("sync") - before; n != 1 {
		t.Errorf("syncs waited for from the approval to the request = %d, want 1", n)
	}
	recs, err := st.List(t.Context())
	if err != nil || len(recs) != 1 || len(recs[0].Approvals) != 1 || recs[0].Request == nil {
		t.Errorf("record = %+v, %v; want the approval and the request in it", recs, err)
	}
}

// Alone on its store, a proposal costs two store operations: the claim,
// written with what the decision commits, and the delete after the answer.
// A fulfilment's claim carries its request and is synced once before the
// tools/call goes out; a policy reject's carries the reject and waits for
// no sync. (A group's member writes the claim, then the request or the
// reject: TestStoreOneSyncFromApprovalToRequest, and docs/state.md.)
func TestStoreAloneClaimCarriesTheDecision(t *testing.T) {
	t.Parallel()
	ops := &opCounter{}
	st := openStore(t, state.Mode{Kind: state.Dir, Dir: t.TempDir()}, "fulfiller", func(c *state.Config) { c.Observer = ops })
	decisions := map[string]decision.Decision{
		"add":  {Action: decision.Fulfill},
		"deny": {Action: decision.Reject, Reason: "policy", Message: "no denying"},
	}
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: decisions})
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	req := h.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("sent %s %s, want p1's tools/call", req.Kind, req.Payload)
	}
	if w, syncs := ops.writesSince(nil), ops.count("sync"); !maps.Equal(w, map[string]int{"claim": 1}) || syncs != 1 {
		t.Errorf("before the tools/call: writes %v, %d syncs; want one claim, one sync", w, syncs)
	}
	before := ops.writes()
	h.deliver(answerFor(t, req))
	h.waitStage(t, "p1", StageFulfilled)
	waitFor(t, func() bool { return ops.writes()["delete"] == 1 })
	if w := ops.writesSince(before); !maps.Equal(w, map[string]int{"delete": 1}) {
		t.Errorf("after the response: writes %v, want one delete", w)
	}

	before, syncs := ops.writes(), ops.count("sync")
	h.deliver(proposalEnv("p2", "coder", callOf("deny")))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p2"}, `{"reason":"policy"}`)
	waitFor(t, func() bool { return ops.writes()["delete"] == 2 })
	if w := ops.writesSince(before); !maps.Equal(w, map[string]int{"claim": 1, "delete": 1}) || ops.count("sync") != syncs {
		t.Errorf("a policy reject: writes %v, %d syncs; want a claim and a delete, no sync", w, ops.count("sync")-syncs)
	}
}

// The overload path stays one store write: a proposal rejected "busy" as
// it arrives is claimed without a record (its claim is the only write; no
// record, no answered mark, no delete), while an admitted one is claimed
// by its record. docs/design.md ("Exactly once across crashes") gives the
// trade-off: a crash between a busy claim and its reject leaves that
// proposer to its own timeout.
func TestStoreBusyRejectIsOneWrite(t *testing.T) {
	t.Parallel()
	ops := &opCounter{}
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller", func(c *state.Config) { c.Observer = ops })
	h := newStoreHarness(t, "fulfiller", st, Config{Approvals: testApprovals(), MaxPending: 1}, &fakeDecider{decisions: storeDecisions})
	h.deliver(proposalEnv("p1", "coder", callOf("ask")))
	nextPrompt(t, h.space, "alice", "p1")
	recs, err := st.List(t.Context())
	if err != nil || len(recs) != 1 || recs[0].ID != "p1" || recs[0].Claim == "" || recs[0].Claim != recs[0].DecisionID {
		t.Fatalf("records = %+v, %v; want p1's, claimed under its decision id", recs, err)
	}
	before := ops.writes()
	h.deliver(proposalEnv("p2", "coder", callOf("add")))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p2"}, `{"reason":"busy"}`)
	h.space.next(t) // its explanation
	h.space.quiet(t, 100*time.Millisecond)
	after := ops.writesSince(before)
	if len(after) != 1 || after["claim"] != 1 {
		t.Errorf("store writes for a busy reject = %v, want one claim", after)
	}
	if recs, err := st.List(t.Context()); err != nil || len(recs) != 1 {
		t.Errorf("records after the busy reject = %+v, %v; want p1's alone", recs, err)
	}
	// A replay of the busy proposal's id is ignored (rule 5).
	h.deliver(proposalEnv("p2", "coder", callOf("add")))
	h.waitStage(t, "p2", StageIgnored)
	h.space.quiet(t, 100*time.Millisecond)
}

// kill -9 between the claim's two writes (the record written, its seen
// key not): the restart writes the seen key before it resumes the record
// (Reclaim), fulfils the proposal once, and a replay after its end is
// still ignored. A record left by a replay of an ended proposal (its seen
// key held by the original claim) is deleted with nothing sent.
func TestStoreCrashBetweenTheClaimsWrites(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	env := proposalEnv("p1", "coder", callOf("add"))
	env.Protocol = agent.ProtocolV04
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	// What ClaimRecord's first write leaves when the process dies before
	// its second.
	if err := st.Put(t.Context(), &lifecycle.Proposal{ID: "p1", Envelope: raw, From: "coder", Received: time.Now().UTC(),
		Size: len(raw), Method: "tools/call", Tool: "add", Deadline: time.Now().Add(time.Minute),
		Phase: state.Deciding, Owner: "fulfiller", Claim: "dec-p1", DecisionID: "dec-p1"}); err != nil {
		t.Fatal(err)
	}
	// A replay's record: p0 ended long ago under dec-p0, the crash came
	// between a replay's record and its (lost) seen key.
	if won, _, err := st.ClaimDecision(t.Context(), "p0", "dec-p0"); err != nil || !won {
		t.Fatal(won, err)
	}
	env0 := proposalEnv("p0", "coder", callOf("add"))
	env0.Protocol = agent.ProtocolV04
	raw0, _ := json.Marshal(env0)
	if err := st.Put(t.Context(), &lifecycle.Proposal{ID: "p0", Envelope: raw0, From: "coder", Received: time.Now().UTC(),
		Size: len(raw0), Method: "tools/call", Tool: "add", Deadline: time.Now().Add(time.Minute),
		Phase: state.Deciding, Owner: "fulfiller", Claim: "dec-replay", DecisionID: "dec-replay"}); err != nil {
		t.Fatal(err)
	}
	dec := &fakeDecider{decisions: storeDecisions}
	h := newStoreHarness(t, "fulfiller", st, Config{}, dec)
	req := h.space.next(t)
	if !isToolsCall(req) || !slices.Equal(req.CorrelationID, agent.CorrelationIDs{"p1"}) {
		t.Fatalf("after the restart sent %s %v %s, want p1's tools/call", req.Kind, req.CorrelationID, req.Payload)
	}
	h.deliver(answerFor(t, req))
	h.waitStage(t, "p1", StageFulfilled)
	if ev := h.eventOf(t, "p1", StageFulfilled); ev.DecisionID != "dec-p1" {
		t.Errorf("p1 fulfilled under %q, want its claim's dec-p1", ev.DecisionID)
	}
	h.space.quiet(t, 200*time.Millisecond) // nothing about p0
	if n := dec.count(); n != 1 {
		t.Errorf("decided %d times, want 1 (p1 alone)", n)
	}
	waitFor(t, func() bool {
		recs, err := st.List(t.Context())
		return err == nil && len(recs) == 0
	})
	// The seen key was written on resume: a replay after the end is a
	// duplicate under the original decision.
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	h2.deliver(proposalEnv("p1", "coder", callOf("add")))
	h2.waitStage(t, "p1", StageIgnored)
	if ev := h2.eventOf(t, "p1", StageIgnored); ev.Reason != "duplicate" || ev.DecisionID != "dec-p1" {
		t.Errorf("replay ignored as %q under %q, want duplicate under dec-p1", ev.Reason, ev.DecisionID)
	}
	h2.space.quiet(t, 100*time.Millisecond)
	// Evaluated beside its claim (alone on the store), maybe, but never
	// a decision of record: the claim was the original's.
	if n := len(h2.eventsAt(StageDecided)); n != 0 {
		t.Errorf("the replay has %d decision records, want 0", n)
	}
}

// A claim the store cannot settle and whose record it cannot delete
// either (state.ErrRecordLeft): the member sends no "busy" (whoever holds
// the record answers the proposal, and a busy would be a second answer);
// it tries the claim again, which finds its own record, or the next
// start resumes it: one tools/call in all, and no reject. (A group's
// member: alone, the claim carries the request, and the record left is
// one whose request may have gone out, as after a crash.)
func TestStoreClaimRecordLeftSendsNothing(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	st.group = true
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	st.recordLeft.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	calls := 0
	answer := func(h *harness, envs []agent.Envelope) {
		for _, env := range envs {
			if !isToolsCall(env) || !slices.Equal(env.CorrelationID, agent.CorrelationIDs{"p1"}) {
				t.Fatalf("sent %s %v %s, want only p1's tools/call", env.Kind, env.CorrelationID, env.Payload)
			}
			calls++
			h.deliver(answerFor(t, env))
			h.waitStage(t, "p1", StageFulfilled)
		}
	}
	answer(h, drain(h.space, 300*time.Millisecond))
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	if calls == 0 {
		answer(h2, []agent.Envelope{h2.space.next(t)})
	}
	h2.space.quiet(t, 200*time.Millisecond)
	if calls != 1 {
		t.Errorf("%d tools/calls for p1, want 1", calls)
	}
}
