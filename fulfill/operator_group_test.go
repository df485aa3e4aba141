package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/poll"
)

// Tests of the operator API in a group (docs/design.md "Durable and shared pending
// work": the operator API of any member lists and cancels the group's
// pending work), on the package's shared NATS server.

// waitLong waits for cond on the shared server (poll.Limit is generous,
// for a loaded machine under -race).
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, what, cond)
}

// sentBy collects what m sends within d (from its fake space).
func sentBy(m *member, d time.Duration) []agent.Envelope { return drain(m.space, d) }

// Member B's operator cancels the prompt member A holds: B takes A's
// record, the proposer gets exactly one mcp/reject (reason other) and its
// chat, from B, and the approver A asked is told the prompt is withdrawn
// (notifications/cancelled for A's prompt, from B: the record it took
// names the prompt), without being asked again; A drops the proposal
// without a word and frees its slot; the approver's late approval
// fulfils nothing at either member; a replay of the id runs nothing
// anywhere. Before the cancel, B lists A's proposal with owner A.
func TestGroupOperatorCancelsAnotherMembersPrompt(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	b := newMember(t, mode, "ful-b", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})

	a.deliver(proposalEnv("p1", "coder", callOf("ask")))
	prompt := nextPrompt(t, a.space, "alice", "p1")
	b.deliver(proposalEnv("p1", "coder", callOf("ask")))
	b.waitStage(t, "p1", StageIgnored) // lost the claim to a

	// Listed from B: A's proposal, owner A, as A shows it.
	own, ok := a.f.Get("p1")
	if !ok || own.Owner != "ful-a" || own.State != "awaiting_approval" {
		t.Fatalf("a.Get(p1) = %+v, %v", own, ok)
	}
	if _, ok := b.f.Get("p1"); ok {
		t.Error("b.Get(p1) found it: b holds nothing")
	}
	list, err := b.f.GroupPending(t.Context())
	if err != nil || len(list) != 1 {
		t.Fatalf("b.GroupPending = %+v, %v; want p1", list, err)
	}
	got := list[0]
	if got.ID != "p1" || got.Owner != "ful-a" || got.From != "coder" || got.Method != "tools/call" || got.Tool != "ask" ||
		got.Target != "calculator" || got.State != "awaiting_approval" || !got.Deadline.Equal(own.Deadline) || !got.Received.Equal(own.Received) {
		t.Errorf("b lists %+v, want a's %+v", got, own)
	}
	if one, ok, err := b.f.GroupGet(t.Context(), "p1"); err != nil || !ok || one != got {
		t.Errorf("b.GroupGet(p1) = %+v, %v, %v; want %+v", one, ok, err, got)
	}

	if err := b.f.Cancel("p1", "alice via API"); err != nil {
		t.Fatalf("b.Cancel(p1): %v", err)
	}
	// Exactly one answer, from B, after the withdrawal of A's prompt:
	// the cancellation, the reject and its chat, nothing else (no prompt
	// asked again).
	bSent := sentBy(b, 300*time.Millisecond)
	if len(bSent) != 3 {
		t.Fatalf("b sent %d envelopes, want the prompt's cancellation, the reject and its chat: %v", len(bSent), bSent)
	}
	cancel, rej, chat := bSent[0], bSent[1], bSent[2]
	if rej.Kind != agent.KindReject || !slices.Equal(rej.To, []string{"coder"}) || !slices.Equal(rej.CorrelationID, agent.CorrelationIDs{"p1"}) ||
		!jsonEqual(rej.Payload, `{"reason":"other"}`) || rej.From != "ful-b" {
		t.Errorf("b's reject = %+v", rej)
	}
	if chat.Kind != agent.KindChat || !slices.Equal(chat.CorrelationID, agent.CorrelationIDs{rej.ID}) ||
		!jsonEqual(chat.Payload, `{"text":"cancelled by the operator (alice via API)","format":"plain"}`) {
		t.Errorf("b's chat = %+v", chat)
	}
	wantPromptCancelled(t, cancel, "ful-b", prompt, "cancelled")

	// A learns at once (WatchRecords): the proposal is dropped without a
	// word (its prompt was B's to withdraw) and its slot is free.
	waitLong(t, "a frees p1's slot", func() bool { n, _ := a.f.Counts(); return n == 0 })
	if p := a.f.Pending(); len(p) != 0 {
		t.Errorf("a still lists %+v", p)
	}
	// alice's late approval of the withdrawn prompt fulfils nothing, at
	// either member.
	deliverAll(answerTo(t, prompt, "alice", approveResult), a, b)
	for _, m := range []*member{a, b} {
		if envs := sentBy(m, 300*time.Millisecond); len(envs) != 0 {
			t.Errorf("%s sent %d envelopes after b's cancel, want none: %v", m.space.id, len(envs), envs)
		}
	}
	recs, err := b.st.List(t.Context())
	if err != nil || len(recs) != 0 {
		t.Errorf("records left: %+v, %v", recs, err)
	}
	if list, err := b.f.GroupPending(t.Context()); err != nil || len(list) != 0 {
		t.Errorf("b lists %+v, %v after the cancel", list, err)
	}
	// Cancelled twice, or replayed: nothing more.
	if err := b.f.Cancel("p1", "again"); !errors.Is(err, ErrUnknownProposal) {
		t.Errorf("second cancel = %v, want ErrUnknownProposal", err)
	}
	deliverAll(proposalEnv("p1", "coder", callOf("ask")), a, b)
	a.space.quiet(t, 200*time.Millisecond)
	b.space.quiet(t, 10*time.Millisecond)
}

// No tool call runs after a cancel, and none is taken back: a fulfilment
// request written cannot be cancelled from any member (B's cancel is
// refused with ErrAnswered, as A's own is, and A's request goes on to its
// response); a proposal A is still deciding is cancelled from B, and when
// A's policy then says fulfil, A writes no tools/call and sends nothing.
// An unknown id is ErrUnknownProposal. B's store unreadable: B lists what
// it holds (nothing) and says so, and neither shows nor cancels A's
// proposal.
func TestGroupOperatorNoCallAfterCancel(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	decA := &fakeDecider{decisions: storeDecisions}
	a := newMember(t, mode, "ful-a", Config{}, decA)
	b := newMember(t, mode, "ful-b", Config{}, &fakeDecider{decisions: storeDecisions})

	a.deliver(proposalEnv("p1", "coder", callOf("add")))
	req := a.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("a sent %s %s, want the tools/call", req.Kind, req.Payload)
	}
	if s, ok, err := b.f.GroupGet(t.Context(), "p1"); err != nil || !ok || s.State != "fulfilling" || s.Owner != "ful-a" || s.Target != "calculator" {
		t.Errorf("b.GroupGet(p1) = %+v, %v, %v; want fulfilling at calculator, owner ful-a", s, ok, err)
	}
	if err := b.f.Cancel("p1", "op"); !errors.Is(err, ErrAnswered) {
		t.Errorf("b.Cancel of a fulfilment in flight = %v, want ErrAnswered", err)
	}
	if err := a.f.Cancel("p1", "op"); !errors.Is(err, ErrAnswered) {
		t.Errorf("a.Cancel of its fulfilment in flight = %v, want ErrAnswered", err)
	}
	if err := b.f.Cancel("nobody-has-it", "op"); !errors.Is(err, ErrUnknownProposal) {
		t.Errorf("b.Cancel of an unknown id = %v, want ErrUnknownProposal", err)
	}
	b.space.quiet(t, 200*time.Millisecond)

	b.st.dead.Store(true)
	list, err := b.f.GroupPending(t.Context())
	if !errors.Is(err, ErrStoreUnavailable) || len(list) != 0 {
		t.Errorf("b.GroupPending with its store cut = %+v, %v; want nothing and ErrStoreUnavailable", list, err)
	}
	if _, ok, err := b.f.GroupGet(t.Context(), "p1"); ok || !errors.Is(err, ErrStoreUnavailable) {
		t.Errorf("b.GroupGet with its store cut = %v, %v; want ErrStoreUnavailable", ok, err)
	}
	if err := b.f.Cancel("p1", "op"); !errors.Is(err, ErrStoreUnavailable) {
		t.Errorf("b.Cancel with its store cut = %v, want ErrStoreUnavailable", err)
	}
	b.st.dead.Store(false)

	a.deliver(answerFor(t, req))
	a.waitStage(t, "p1", StageFulfilled)
	b.space.quiet(t, 100*time.Millisecond)

	// Cancelled while A decides: A's "fulfill" comes too late.
	gate := make(chan struct{})
	decA.mu.Lock()
	decA.gate = gate
	decA.mu.Unlock()
	a.deliver(proposalEnv("p2", "coder", callOf("add")))
	waitLong(t, "a deciding p2", func() bool { return decA.count() == 2 })
	if err := b.f.Cancel("p2", "op"); err != nil {
		t.Fatalf("b.Cancel of a proposal a is deciding: %v", err)
	}
	rej := b.space.next(t)
	if rej.Kind != agent.KindReject || !slices.Equal(rej.CorrelationID, agent.CorrelationIDs{"p2"}) || !jsonEqual(rej.Payload, `{"reason":"other"}`) {
		t.Errorf("b sent %+v, want the reject of p2", rej)
	}
	close(gate)
	waitLong(t, "a drops p2", func() bool { n, _ := a.f.Counts(); return n == 0 })
	if envs := sentBy(a, 300*time.Millisecond); len(envs) != 0 {
		t.Errorf("a sent %v after b cancelled p2, want nothing (above all no tools/call)", envs)
	}
}

// faultyStore's cut reaches the operator's reads and takes too.

func (s *faultyStore) Get(ctx context.Context, id string) (*lifecycle.Proposal, error) {
	if s.dead.Load() {
		return nil, errCut
	}
	return s.Store.Get(ctx, id)
}

func (s *faultyStore) Take(ctx context.Context, id string) (*lifecycle.Proposal, error) {
	if s.dead.Load() {
		return nil, errCut
	}
	r, err := s.Store.Take(ctx, id)
	if err == nil && s.scanAfterTake != nil {
		s.scanAfterTake <- struct{}{} // the start-up scan lists now…
		<-s.scanListed                // …and the cancel goes on once it has
	}
	return r, err
}

// Owned is the start-up scan's listing. With scanAfterTake set it lists
// only after a Take (while the taken record is this member's, before the
// cancel deletes it) and returns that listing only when scanRelease is
// closed: a scan that read a record a moment before it ended here.
func (s *faultyStore) Owned(ctx context.Context) ([]*lifecycle.Proposal, error) {
	if s.scanAfterTake == nil {
		return s.Store.Owned(ctx)
	}
	<-s.scanAfterTake
	recs, err := s.Store.Owned(ctx)
	close(s.scanListed)
	<-s.scanRelease
	return recs, err
}

// TestGroupOperatorCancelIsNotResumedByTheStartupScan: a member that has
// just started cancels another member's proposal; the take makes the
// record its own for a moment, and its start-up scan of its own records
// reads it then. The scan must not resume the proposal it is cancelling
// (seen in the rolling-restart binary test: the cancelled proposal's
// prompt resumed on the canceller, and a data race between that resume
// and the record watch's drop). One reject, nothing resumed or asked.
func TestGroupOperatorCancelIsNotResumedByTheStartupScan(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	a.deliver(proposalEnv("p1", "coder", callOf("ask")))
	prompt := nextPrompt(t, a.space, "alice", "p1")

	st := openStore(t, mode, "ful-b")
	st.scanAfterTake, st.scanListed, st.scanRelease = make(chan struct{}), make(chan struct{}), make(chan struct{})
	leaseCtx, stopLease := context.WithCancel(context.Background())
	t.Cleanup(stopLease)
	if err := st.StartLease(leaseCtx); err != nil {
		t.Fatal(err)
	}
	b := &member{harness: newStoreHarness(t, "ful-b", st, Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions}), st: st, stopLease: stopLease}

	if err := b.f.Cancel("p1", "ops"); err != nil {
		t.Fatalf("b.Cancel(p1): %v", err)
	}
	close(st.scanRelease) // the scan's listing, read while b held the record, arrives now
	// The record watch and the scan have run once the group's view says
	// p1 is gone and b's recovery has moved on to watching leases.
	waitLong(t, "b's start-up scan done", func() bool {
		list, err := b.f.GroupPending(t.Context())
		return err == nil && len(list) == 0
	})
	// The withdrawal of a's prompt, p1's reject and its chat; no prompt
	// asked again.
	sent := sentBy(b, 300*time.Millisecond)
	if len(sent) != 3 || sent[1].Kind != agent.KindReject || sent[1].CorrelationID.First() != "p1" || sent[2].Kind != agent.KindChat {
		t.Fatalf("b sent %v, want the prompt's cancellation, p1's reject and its chat only", sent)
	}
	wantPromptCancelled(t, sent[0], "ful-b", prompt, "cancelled")
	// Taken for the cancel (a resumed line saying so), never resumed by
	// the scan of b's own records.
	for _, ev := range b.stageEventsOf("p1", StageResumed) {
		if !strings.HasPrefix(ev.Message, "taken for an operator's cancel") {
			t.Errorf("b resumed p1 (%s), which it cancelled (stages %v)", ev.Message, b.stages("p1"))
		}
	}
}

// TestGroupOperatorCancelSurvivesACrash: member B takes A's proposal for
// an operator's cancel and is killed as it writes the reject. The reject
// was recorded in the record before (as every other end's is), so B's
// restart sends it: the proposer is answered once. (The cancel used to
// delete the record first: the crash left the proposer with no answer.)
func TestGroupOperatorCancelSurvivesACrash(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	b := newMember(t, mode, "ful-b", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	a.deliver(proposalEnv("p1", "coder", callOf("ask")))
	nextPrompt(t, a.space, "alice", "p1")
	b.deliver(proposalEnv("p1", "coder", callOf("ask")))
	b.waitStage(t, "p1", StageIgnored) // lost the claim to a

	b.space.crashAtReject = func() { b.space.dead.Store(true); b.st.dead.Store(true) }
	_ = b.f.Cancel("p1", "alice via API") // its answer is lost with the process
	b.crash()

	// B comes back (or, should its lease lapse first, A adopts the
	// record): the recorded reject goes out, and then the record goes.
	b2 := newMember(t, mode, "ful-b", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	// The record itself, not GroupPending: that leaves out an answered
	// record, which this one is from the cancel on, so it is empty before
	// the reject goes out (the test raced b2's start-up scan under load).
	waitLong(t, "p1's record to leave the group's store", func() bool {
		_, err := b2.st.Get(t.Context(), "p1")
		return errors.Is(err, state.ErrNotFound)
	})
	var answers []agent.Envelope
	for _, m := range []*member{a, b2} {
		for _, env := range sentBy(m, 50*time.Millisecond) {
			if env.Kind == agent.KindReject || isToolsCall(env) {
				answers = append(answers, env)
			}
		}
	}
	if len(answers) != 1 {
		t.Fatalf("%d answers after the restart, want the one recorded reject: %v", len(answers), answers)
	}
	rej := answers[0]
	if !slices.Equal(rej.To, []string{"coder"}) || !slices.Equal(rej.CorrelationID, agent.CorrelationIDs{"p1"}) || !jsonEqual(rej.Payload, `{"reason":"other"}`) {
		t.Errorf("reject after the restart = %+v, want other to coder about p1", rej)
	}
}

// An operator's cancel of a record a replay wrote just before its member
// crashed (the record written, its seen key held by the original claim,
// whose proposal was answered long ago): the take settles the record as
// every resumed one is (Reclaim), deletes it and sends nothing. A reject
// would be a second answer to a proposal that had its own.
func TestGroupOperatorCancelOfAReplaysRecordSendsNothing(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{}, &fakeDecider{decisions: storeDecisions})
	b := newMember(t, mode, "ful-b", Config{}, &fakeDecider{decisions: storeDecisions})

	ctx := t.Context()
	if won, _, err := a.st.ClaimDecision(ctx, "p0", "dec-p0"); err != nil || !won {
		t.Fatal(won, err)
	}
	env := proposalEnv("p0", "coder", callOf("add"))
	env.Protocol = agent.ProtocolV04
	raw, _ := json.Marshal(env)
	if err := a.st.Put(ctx, &lifecycle.Proposal{ID: "p0", Envelope: raw, From: "coder", Received: time.Now().UTC(),
		Size: len(raw), Phase: state.Deciding, Owner: "ful-a", Claim: "dec-replay", DecisionID: "dec-replay"}); err != nil {
		t.Fatal(err)
	}
	if err := b.f.Cancel("p0", "ops"); !errors.Is(err, ErrUnknownProposal) {
		t.Fatalf("Cancel(p0) = %v, want ErrUnknownProposal", err)
	}
	if envs := sentBy(b, 200*time.Millisecond); len(envs) != 0 {
		t.Errorf("b sent %d envelopes for a replay's record, want none: %v", len(envs), envs[0])
	}
	if _, err := a.st.Get(ctx, "p0"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the replay's record: %v, want deleted", err)
	}
}
