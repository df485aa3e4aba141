package fulfill

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// answerFor is the tool owner's response to a fulfilment request.
func answerFor(t *testing.T, req agent.Envelope) agent.Envelope {
	t.Helper()
	return agent.Envelope{ID: "resp-" + req.ID, From: "calculator", To: []string{req.From}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{req.ID},
		Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}`, rpcID(t, req)))}
}

// A fulfilled proposal's id replayed after a restart on the same DIR store
// runs nothing: the claim survives the restart (rule 5, SeenTTL window).
func TestStoreReplayAfterRestartRunsNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mode := state.Mode{Kind: state.Dir, Dir: dir}
	st := openStore(t, mode, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	req := h.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("sent %s %s, want the tools/call", req.Kind, req.Payload)
	}
	h.deliver(answerFor(t, req))
	h.waitStage(t, "p1", StageFulfilled)
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	h2.deliver(proposalEnv("p1", "coder", callOf("add")))
	h2.waitStage(t, "p1", StageIgnored)
	h2.space.quiet(t, 200*time.Millisecond)
	if n := len(h2.eventsAt(StageDecided)); n != 0 {
		t.Errorf("the replay has %d decision records, want 0", n)
	}
}

// kill -9 after a reject is recorded and before it is written (the window
// in which, when the record was deleted first, the proposer was left to
// its own timeout): the restart sends that same reject — same envelope id,
// reason and explanation — once, decides nothing again, and ends the
// record. A replay of the proposal then runs nothing.
func TestStoreRestartSendsARecordedReject(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	deny := map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "policy", Message: "no adding today"}}
	st := openStore(t, mode, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: deny})
	st.dieAfterAnswered.Store(true)
	h.space.dead.Store(true) // nothing written from here: the process dies with the reject recorded
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	h.waitStage(t, "p1", StageUndelivered)
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	recs, err := st2.List(t.Context())
	if err != nil || len(recs) != 1 || recs[0].Phase != state.Answered || recs[0].Reject == nil || recs[0].Reject.Reason != "policy" {
		t.Fatalf("records after the crash = %+v (%v), want p1 answered with its reject", recs, err)
	}
	recorded := *recs[0].Reject
	dec2 := &fakeDecider{decisions: storeDecisions} // would fulfil "add": must not be asked
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, dec2)
	rej := h2.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"policy"}`)
	if rej.ID != recorded.EnvelopeID {
		t.Errorf("reject sent again as %s, want the recorded envelope %s", rej.ID, recorded.EnvelopeID)
	}
	chat := h2.space.next(t)
	if chat.Kind != agent.KindChat || !slices.Equal(chat.CorrelationID, agent.CorrelationIDs{rej.ID}) ||
		!jsonEqual(chat.Payload, `{"text":"no adding today","format":"plain"}`) {
		t.Errorf("explanation = %s %v %s", chat.Kind, chat.CorrelationID, chat.Payload)
	}
	h2.space.quiet(t, 200*time.Millisecond)
	if n := dec2.count(); n != 0 {
		t.Errorf("decided %d times after the restart, want 0", n)
	}
	waitFor(t, func() bool { // the answered record ends after the reject
		recs, err := st2.List(t.Context())
		return err == nil && len(recs) == 0
	})
	h2.deliver(proposalEnv("p1", "coder", callOf("add")))
	h2.waitStage(t, "p1", StageIgnored)
	h2.space.quiet(t, 100*time.Millisecond)
}

// Store unreachable, member alone: nothing is decided or sent while no
// claim can be written (a proposal is answered only once its record says
// whose it is: exactly once across crashes); once the store is back the
// claim lands and the proposal is fulfilled, once.
func TestStoreUnreachableAloneWaitsForTheStore(t *testing.T) {
	t.Parallel()
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	st.dead.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	h.space.quiet(t, 300*time.Millisecond)
	if n := len(h.eventsAt(StageDecided)); n != 0 {
		t.Errorf("%d decisions of record without a claim, want 0", n)
	}
	st.dead.Store(false)
	req := h.space.next(t)
	if !isToolsCall(req) || req.CorrelationID.First() != "p1" {
		t.Fatalf("sent %s %s, want p1's tools/call once the store is back", req.Kind, req.Payload)
	}
	h.space.quiet(t, 200*time.Millisecond)
}

// Alone on its store, a member whose store stays down past a proposal's
// deadline keeps trying the claim, and rejects the proposal "timeout"
// once the claim lands: nobody else could answer it.
//
// Not parallel: its decision must come within the 1s deadline, which
// beside the package's parallel tests on a 2-core machine at load 36 it
// did not (1 run of 5).
func TestStoreUnreachableAlonePastTheDeadlineRejectsTimeout(t *testing.T) {
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	// The deadline leaves the decision time on a loaded machine (under
	// 150 ms, a slow decider made it "not decided" instead): the test is
	// of the claim that cannot be written until after it.
	h := newStoreHarness(t, "fulfiller", st, Config{PendingTTL: time.Second}, &fakeDecider{decisions: storeDecisions})
	st.dead.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	h.space.quiet(t, 1300*time.Millisecond) // past the deadline: still nothing without a claim
	st.dead.Store(false)
	rej := h.space.next(t)
	if rej.Kind != agent.KindReject || rej.CorrelationID.First() != "p1" || reasonOf(rej.Payload) != "timeout" {
		t.Fatalf("sent %s %s, want p1 rejected timeout once claimed", rej.Kind, rej.Payload)
	}
	if chat := h.space.next(t); chat.Kind != agent.KindChat || !strings.Contains(string(chat.Payload), "not claimed within 1s") {
		t.Fatalf("sent %s %s, want the reject's explanation", chat.Kind, chat.Payload)
	}
	// Decided before its deadline (alone, the claim carries its
	// decision), and logged with the claim: one decision of record,
	// whose request never went out.
	if got := h.stages("p1"); !slices.Equal(got, []Stage{StageReceived, StageDecided, StageRejected}) {
		t.Errorf("stages %v, want received, decided, rejected", got)
	}
	h.space.quiet(t, 200*time.Millisecond)
}

// The record of a fulfilment request cannot be written: the request is not
// sent while it cannot (no call runs without its record), and goes out
// once, when the store takes it.
func TestStoreUpdateFailsNoRequest(t *testing.T) {
	t.Parallel()
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	st.failUpdate.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	for _, env := range drain(h.space, 300*time.Millisecond) {
		t.Fatalf("sent %s %s while the request's record cannot be written", env.Kind, env.Payload)
	}
	st.failUpdate.Store(false)
	req := h.space.next(t)
	if !isToolsCall(req) || req.CorrelationID.First() != "p1" {
		t.Fatalf("sent %s %s, want p1's tools/call", req.Kind, req.Payload)
	}
	h.deliver(answerFor(t, req))
	h.waitStage(t, "p1", StageFulfilled)
	waitFor(t, func() bool {
		recs, err := st.List(t.Context())
		return err == nil && len(recs) == 0
	})
	h.space.quiet(t, 100*time.Millisecond)
}

// Same for an escalation: no prompt before its record; asked once the
// store takes it.
func TestStoreEscalationNotRecordedNoPrompt(t *testing.T) {
	t.Parallel()
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	st.failUpdate.Store(true)
	h.deliver(proposalEnv("p1", "coder", callOf("ask")))
	h.space.quiet(t, 300*time.Millisecond) // no prompt before the record
	st.failUpdate.Store(false)
	nextPrompt(t, h.space, "alice", "p1")
}

// byKind sorts what one member sent: tools/calls and rejects by proposal.
func byKind(t *testing.T, envs []agent.Envelope) (calls, rejects map[string]agent.Envelope, other []agent.Envelope) {
	t.Helper()
	calls, rejects = map[string]agent.Envelope{}, map[string]agent.Envelope{}
	for _, env := range envs {
		pid := env.CorrelationID.First()
		switch {
		case isToolsCall(env):
			if _, dup := calls[pid]; dup {
				t.Errorf("tools/call for %s written twice", pid)
			}
			calls[pid] = env
		case env.Kind == agent.KindReject:
			if _, dup := rejects[pid]; dup {
				t.Errorf("reject for %s written twice", pid)
			}
			rejects[pid] = env
		default:
			other = append(other, env)
		}
	}
	return calls, rejects, other
}

// Restart on the same DIR store (kill -9 while a prompt is open, a prompt
// is about to expire and a fulfilment request is in flight): the expired
// prompt is rejected "timeout" at once and withdrawn from its approver,
// the open prompt is asked again with its recorded ids and an accept
// fulfils it once, the request in flight is never written again and is
// rejected "timeout" at its deadline.
//
// Not parallel: the "soon" prompt must not expire before the crash.
func TestStoreRestartResumes(t *testing.T) {
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	cfg := Config{Approvals: testApprovals(), FulfillTimeout: 3 * time.Second}
	h := newStoreHarness(t, "fulfiller", st, cfg, &fakeDecider{decisions: storeDecisions})

	h.deliver(proposalEnv("open", "coder", callOf("ask")))
	openPrompt := nextPrompt(t, h.space, "alice", "open")
	h.deliver(proposalEnv("expiring", "coder", callOf("soon")))
	soonPrompt := nextPrompt(t, h.space, "alice", "expiring")
	soon, ok := h.f.Get("expiring")
	if !ok {
		t.Fatal("expiring is not pending")
	}
	// The request goes last, just before the crash: its 3s must not pass
	// while a slow machine is still escalating the others (it would then
	// end before the crash, and its cancel go to the dead process's wire).
	// Its deadline starts when it is sent, which is after this.
	sentAt := time.Now()
	h.deliver(proposalEnv("inflight", "coder", callOf("add")))
	req := h.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("sent %s, want the tools/call", req.Payload)
	}

	// kill -9: nothing more reaches the wire or the store.
	h.space.dead.Store(true)
	st.dead.Store(true)
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(soon.Deadline) {
		time.Sleep(10 * time.Millisecond) // the short prompt's deadline passes while down
	}

	st2 := openStore(t, mode, "fulfiller")
	// A long fulfil timeout after the restart: the resumed request keeps
	// the deadline recorded when it was sent (3s), while the approved call
	// sent now must not time out on a slow machine before the test looks.
	h2 := newStoreHarness(t, "fulfiller", st2, Config{Approvals: testApprovals(), FulfillTimeout: time.Minute}, &fakeDecider{decisions: storeDecisions})
	again, before := awaitPrompt(t, h2.space, "alice", "open")
	if again.ID != openPrompt.ID || string(again.Payload) != string(openPrompt.Payload) {
		t.Fatalf("resumed prompt %s %s, want the recorded %s %s", again.ID, again.Payload, openPrompt.ID, openPrompt.Payload)
	}
	if s, ok := h2.f.Get("open"); !ok || time.Until(s.Deadline) < 30*time.Second {
		t.Errorf("resumed %+v: not the recorded deadline (a minute after the proposal)", s)
	}
	h2.waitStage(t, "expiring", StageRejected)
	h2.deliver(answerTo(t, openPrompt, "alice", approveResult))
	h2.waitStage(t, "open", StageFulfilling)
	h2.waitStage(t, "inflight", StageRejected)
	calls, rejects, other := byKind(t, append(before, drain(h2.space, 300*time.Millisecond)...))
	if len(calls) != 1 || calls["open"].ID == "" {
		t.Errorf("tools/calls after restart = %v, want exactly the approved one", calls)
	}
	if len(rejects) != 2 || !jsonEqual(rejects["expiring"].Payload, `{"reason":"timeout"}`) || !jsonEqual(rejects["inflight"].Payload, `{"reason":"timeout"}`) {
		t.Errorf("rejects = %v, want timeout for expiring and inflight", rejects)
	}
	if since := time.Since(sentAt); since < 3*time.Second {
		t.Errorf("in-flight request rejected after %v, before its fulfil timeout", since)
	}
	var cancelled bool
	for _, env := range other {
		if env.Kind == agent.KindRequest && env.CorrelationID.First() == req.ID {
			cancelled = true
			wantEnvelope(t, env, agent.KindRequest, []string{"calculator"}, []string{req.ID},
				fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"timeout"}}`, rpcID(t, req)))
		}
	}
	if !cancelled {
		t.Errorf("the in-flight request was not cancelled at its owner; sent %v", other)
	}
	withdrawn := false
	for _, env := range other {
		if env.CorrelationID.First() == soonPrompt.ID {
			withdrawn = true
			wantPromptCancelled(t, env, "fulfiller", soonPrompt, "timeout")
		}
	}
	if !withdrawn {
		t.Errorf("the expired prompt was not withdrawn from alice; sent %v", other)
	}
	recs, err := st2.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs { // at most "open", awaiting its response
		if r.ID != "open" || r.Request == nil || r.Request.EnvelopeID != calls["open"].ID {
			t.Errorf("record left: %s phase %s request %+v", r.ID, r.Phase, r.Request)
		}
	}
}

// deliverAll broadcasts env to every member, as the gateway does.
func deliverAll(env agent.Envelope, ms ...*member) {
	for _, m := range ms {
		m.deliver(env)
	}
}

// A group of two on one store: every proposal is answered exactly once by
// the group, and nobody answers busy or duplicate.
func TestStoreGroupAnswersEachProposalOnce(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	dec := map[string]decision.Decision{"add": {Action: decision.Fulfill}}
	a := newMember(t, mode, "ful-a", Config{}, &fakeDecider{decisions: dec})
	b := newMember(t, mode, "ful-b", Config{}, &fakeDecider{decisions: dec})
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%d", i)
		payload := callOf("add")
		switch i % 3 {
		case 1:
			payload = callOf("delete") // default deny: reject policy
		case 2:
			payload = `{"method":"tools/call","params":{"name":""}}` // invalid
		}
		env := proposalEnv(ids[i], "coder", payload)
		if i%2 == 0 {
			deliverAll(env, a, b)
		} else {
			deliverAll(env, b, a)
		}
	}
	answered := map[string]string{}
	deadline := time.Now().Add(15 * time.Second)
	var all []agent.Envelope
	for len(answered) < len(ids) && time.Now().Before(deadline) {
		for _, m := range []*member{a, b} {
			for _, env := range drain(m.space, 20*time.Millisecond) {
				all = append(all, env)
				pid := env.CorrelationID.First()
				if isToolsCall(env) || env.Kind == agent.KindReject {
					if prev, dup := answered[pid]; dup {
						t.Errorf("%s answered twice: by %s and %s", pid, prev, env.From)
					}
					answered[pid] = env.From
					if isToolsCall(env) {
						deliverAll(answerFor(t, env), a, b)
					}
				}
				if env.Kind == agent.KindReject && (jsonEqual(env.Payload, `{"reason":"busy"}`) || jsonEqual(env.Payload, `{"reason":"duplicate"}`)) {
					t.Errorf("%s rejected %s by %s", pid, env.Payload, env.From)
				}
			}
		}
	}
	if len(answered) != len(ids) {
		t.Fatalf("answered %d of %d: %v", len(answered), len(ids), answered)
	}
	for _, m := range []*member{a, b} {
		for _, env := range drain(m.space, 200*time.Millisecond) {
			if isToolsCall(env) || env.Kind == agent.KindReject {
				t.Errorf("late second answer %s %s to %v by %s", env.Kind, env.Payload, env.CorrelationID, env.From)
			}
		}
	}
	if answeredBy := func(who string) int {
		n := 0
		for _, by := range answered {
			if by == who {
				n++
			}
		}
		return n
	}; answeredBy("ful-a") == 0 && answeredBy("ful-b") == 0 {
		t.Error("nobody answered")
	}
}

// Kill a member holding an open prompt, a fulfilment in flight and a
// queued proposal: its peer adopts all three; the request in flight is
// never written again and its response ends it; the queued one is
// fulfilled; the prompt is asked again with its ids and the approval
// fulfils it once. A forged withdraw of the adopted prompt is ignored.
func TestStoreAdoptionAfterCrash(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{Approvals: testApprovals(), MaxInflight: 1}, &fakeDecider{decisions: storeDecisions})
	b := newMember(t, mode, "ful-b", Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})

	// a claims all three (b sees each once a has claimed it).
	claimedByA := func(env agent.Envelope) {
		a.deliver(env)
		a.waitStage(t, env.ID, StageReceived)
		b.deliver(env)
	}
	claimedByA(proposalEnv("inflight", "coder", callOf("add")))
	req := a.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("a sent %s", req.Payload)
	}
	claimedByA(proposalEnv("queued", "coder", callOf("add")))
	a.waitStage(t, "queued", StageQueued)
	claimedByA(proposalEnv("open", "coder", callOf("ask")))
	prompt := nextPrompt(t, a.space, "alice", "open")
	for _, id := range []string{"inflight", "queued", "open"} {
		b.waitStage(t, id, StageIgnored)
	}

	a.crash()
	// The adopted prompt is asked again with its ids.
	again, before := awaitPrompt(t, b.space, "alice", "open")
	if again.ID != prompt.ID || string(again.Payload) != string(prompt.Payload) {
		t.Fatalf("b asked %s %s, want a's prompt %s %s again", again.ID, again.Payload, prompt.ID, prompt.Payload)
	}
	b.waitStage(t, "inflight", StageResumed)
	b.waitStage(t, "queued", StageFulfilling)

	// A forged withdraw of the adopted proposal changes nothing.
	b.deliver(agent.Envelope{ID: "w1", From: "mallory", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"open"}, Payload: json.RawMessage(`{"reason":"x"}`)})
	b.waitStage(t, "open", StageIgnored)

	b.deliver(answerFor(t, req))
	b.waitStage(t, "inflight", StageFulfilled)
	b.deliver(answerTo(t, prompt, "alice", approveResult))
	b.waitStage(t, "open", StageFulfilling)

	calls, rejects, _ := byKind(t, append(before, drain(b.space, 300*time.Millisecond)...))
	if len(rejects) != 0 {
		t.Errorf("b rejected %v", rejects)
	}
	if len(calls) != 2 || calls["queued"].ID == "" || calls["open"].ID == "" {
		t.Errorf("b's tools/calls = %v, want queued and open once each (inflight never again)", calls)
	}
}

// Store unreachable for one member of a group: it sends nothing about a
// proposal it cannot claim (no "busy": a peer may hold the claim, and
// the reference SDK proposer fails on the first reject it sees), and a
// peer whose store works answers it, once.
func TestStoreUnreachableWithPeersSendsNothing(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{}, &fakeDecider{decisions: storeDecisions})
	b := newMember(t, mode, "ful-b", Config{}, &fakeDecider{decisions: storeDecisions})
	a.st.dead.Store(true)
	a.deliver(proposalEnv("p1", "coder", callOf("add")))
	b.deliver(proposalEnv("p1", "coder", callOf("add")))
	req := b.space.next(t)
	if !isToolsCall(req) || req.CorrelationID.First() != "p1" {
		t.Fatalf("b sent %s %s, want p1's tools/call", req.Kind, req.Payload)
	}
	for _, env := range drain(a.space, 300*time.Millisecond) {
		t.Fatalf("a, whose store is down, sent %s %s", env.Kind, env.Payload)
	}
	if n := a.dec.count(); n != 0 {
		t.Errorf("a decided %d times without a claim, want 0", n)
	}
}

// Killed while the policy was still deciding: after the restart the
// proposal is decided (its record had no decision yet) and fulfilled once.
func TestStoreRestartWhileDeciding(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	gated := &fakeDecider{decisions: storeDecisions, gate: make(chan struct{})}
	h := newStoreHarness(t, "fulfiller", st, Config{}, gated)
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	waitFor(t, func() bool { return gated.count() == 1 }) // being decided
	// and recorded: a claim waits for its decision only so long.
	waitFor(t, func() bool {
		recs, err := st.List(t.Context())
		return err == nil && len(recs) == 1
	})
	h.space.dead.Store(true)
	st.dead.Store(true)
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	req := h2.space.next(t)
	if !isToolsCall(req) || req.CorrelationID.First() != "p1" {
		t.Fatalf("sent %s %s, want the tools/call of p1", req.Kind, req.Payload)
	}
	h2.deliver(answerFor(t, req))
	h2.waitStage(t, "p1", StageFulfilled)
	h2.space.quiet(t, 100*time.Millisecond)
	if got := h2.stages("p1"); got[0] != StageResumed {
		t.Errorf("stages after restart %v, want resumed first", got)
	}
}

// busy means the whole group is full: the group's pending records against
// the sum of its live members' max pending (one member of 1 here), while
// this Fulfiller's own --max-pending (1000) has room.
func TestStoreBusyWhenGroupFull(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller", func(c *state.Config) { c.MaxPending = 1 })
	if err := st.StartLease(t.Context()); err != nil {
		t.Fatal(err)
	}
	h := newStoreHarness(t, "fulfiller", st, Config{Approvals: testApprovals()}, &fakeDecider{decisions: storeDecisions})
	h.deliver(proposalEnv("p1", "coder", callOf("ask")))
	nextPrompt(t, h.space, "alice", "p1")
	groupFull := func() bool {
		var pending, capacity int
		err := h.f.loop.Do(t.Context(), func(c *lifecycle.Core) { pending, capacity = c.GroupLoad() })
		return err == nil && capacity == 1 && pending >= capacity
	}
	for deadline := time.Now().Add(15 * time.Second); !groupFull(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the group's pending work never read as full")
		}
	}
	h.deliver(proposalEnv("p2", "coder", callOf("add")))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p2"}, `{"reason":"busy"}`)
	chat := h.space.next(t)
	if !jsonEqual(chat.Payload, `{"text":"the group's pending work is full (1 proposals); propose again later","format":"plain"}`) {
		t.Errorf("chat %s", chat.Payload)
	}
}

// Claims are made off the reader: while one waits on a slow store, the
// proposer's withdrawal of that proposal is honoured once the claim is
// won (no decision, no tools/call, no answer; received then withdrawn in
// the events), a withdrawal in someone else's name is ignored and the
// proposal goes on, and a replay of an id still being claimed is ignored
// as a duplicate rather than claimed twice.
//
// The policy answers only once the withdrawal is read: alone on its store
// the fulfiller asks it beside the claim, and a decision that came first
// would be logged (decided, then withdrawn) when the claim lands.
func TestStoreWithdrawWhileClaiming(t *testing.T) {
	t.Parallel()
	st := openStore(t, state.Mode{Kind: state.Memory}, "fulfiller")
	st.claimGate = make(chan struct{})
	dec := &fakeDecider{decisions: storeDecisions, gate: make(chan struct{})}
	h := newStoreHarness(t, "fulfiller", st, Config{}, dec)

	withdraw := func(id, from string) {
		h.deliver(agent.Envelope{ID: "w-" + id + "-" + from, From: from, Kind: agent.KindWithdraw,
			CorrelationID: agent.CorrelationIDs{id}, Payload: json.RawMessage(`{"reason":"no_longer_needed"}`)})
	}
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	withdraw("p1", "coder")
	h.deliver(proposalEnv("p2", "coder", callOf("add")))
	withdraw("p2", "mallory")
	h.deliver(proposalEnv("p2", "coder", callOf("add"))) // a replay while p2 is claimed
	// The reader went on while the claims wait: the spoof and the replay
	// are already seen, and so is p1's withdrawal, read before them.
	waitFor(t, func() bool {
		return slices.Contains(h.stages("p2"), StageIgnored) && len(h.stages("p2")) == 2
	})
	close(dec.gate)
	close(st.claimGate)

	h.waitStage(t, "p1", StageWithdrawn)
	if got, want := h.stages("p1"), []Stage{StageReceived, StageWithdrawn}; !slices.Equal(got, want) {
		t.Errorf("p1 stages %v, want %v", got, want)
	}
	// p2 is fulfilled once: exactly one tools/call, for p2.
	h.waitStage(t, "p2", StageFulfilling)
	var calls []agent.Envelope
	for _, env := range drain(h.space, 500*time.Millisecond) {
		if isToolsCall(env) {
			calls = append(calls, env)
		}
		if env.Kind == agent.KindReject {
			t.Errorf("reject sent: %s %s", env.CorrelationID, env.Payload)
		}
	}
	if len(calls) != 1 || calls[0].CorrelationID.First() != "p2" {
		t.Fatalf("tools/calls %v, want one for p2", calls)
	}
	if d := h.eventsAt(StageDecided); len(d) != 1 || d[0].ProposalID != "p2" {
		t.Errorf("decisions of record %v, want p2's only", d)
	}
	var reasons []string
	h.mu.Lock()
	for _, e := range h.events {
		if e.ProposalID == "p2" && e.Stage == StageIgnored {
			reasons = append(reasons, e.Reason)
		}
	}
	h.mu.Unlock()
	slices.Sort(reasons)
	if !slices.Equal(reasons, []string{"duplicate", "spoofed_withdraw"}) {
		t.Errorf("p2 ignored for %v, want a duplicate and a spoofed withdrawal", reasons)
	}
}

// A proposal waiting for a decide worker is already recorded: killed with
// every worker busy, the fulfiller resumes all of them after the restart,
// the ones still queued included, and fulfils each once.
func TestStoreRestartWhileQueuedForAWorker(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller", func(c *state.Config) { c.MaxPending = 1000 })
	gated := &fakeDecider{decisions: storeDecisions, gate: make(chan struct{})}
	cfg := Config{DecideWorkers: 1, MaxPendingPerProposer: 1000, MaxInflight: 1000}
	h := newStoreHarness(t, "fulfiller", st, cfg, gated)
	const n = 66 // one deciding, the rest waiting for it
	for i := range n {
		h.deliver(proposalEnv(fmt.Sprintf("q%d", i), "coder", callOf("add")))
	}
	waitFor(t, func() bool { return gated.count() == 1 })
	waitLong(t, "every proposal recorded", func() bool {
		recs, err := st.List(t.Context())
		return err == nil && len(recs) == n
	})
	h.space.dead.Store(true)
	st.dead.Store(true)
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller", func(c *state.Config) { c.MaxPending = 1000 })
	h2 := newStoreHarness(t, "fulfiller", st2, cfg, &fakeDecider{decisions: storeDecisions})
	called := map[string]int{}
	for len(called) < n {
		req := h2.space.nextWithin(t, 30*time.Second)
		if !isToolsCall(req) {
			t.Fatalf("sent %s %s, want tools/calls", req.Kind, req.Payload)
		}
		called[req.CorrelationID.First()]++
		h2.deliver(answerFor(t, req))
	}
	for _, env := range drain(h2.space, 200*time.Millisecond) {
		if isToolsCall(env) {
			called[env.CorrelationID.First()]++
		}
	}
	for id, c := range called {
		if c != 1 {
			t.Errorf("%s called %d times", id, c)
		}
	}
}

// A member dies while a fulfilment runs as an MCP task: the member that
// adopts its work follows the task (never calling the tool again) and
// relays its result to the proposer, once.
func TestStoreAdoptedTaskIsFollowed(t *testing.T) {
	// Not parallel: its members hold 1s leases, which beside the
	// package's parallel tests on a loaded machine lapsed (a peer
	// then answered too).
	mode := natsServer(t)
	a := newMember(t, mode, "ful-a", Config{}, &fakeDecider{decisions: storeDecisions})
	b := newMember(t, mode, "ful-b", Config{}, &fakeDecider{decisions: storeDecisions})
	working := `{"resultType":"complete","taskId":"T1","status":"working","createdAt":"2026-11-25T10:00:00Z","lastUpdatedAt":"2026-11-25T10:00:00Z","ttlMs":60000,"pollIntervalMs":100}`
	a.space.mu.Lock()
	a.space.taskAnswer = func(agent.RPCRequest) (agent.RPCResponse, error) {
		return agent.RPCResponse{Result: json.RawMessage(working)}, nil
	}
	a.space.mu.Unlock()

	env := proposalEnv("job", "coder", callOf("migrate"))
	a.deliver(env)
	a.waitStage(t, "job", StageReceived)
	b.deliver(env)
	req := a.space.next(t)
	if !isToolsCall(req) || len(req.CorrelationID) != 0 || !strings.Contains(string(req.Payload), `"task":{"ttl":3600000}`) {
		t.Fatalf("a sent %s (correlation %v), want the task-augmented tools/call", req.Payload, req.CorrelationID)
	}
	a.deliver(agent.Envelope{ID: "resp-1", From: "calculator", To: []string{"ful-a"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{req.ID},
		Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"resultType":"task","taskId":"T1","status":"working","createdAt":"2026-11-25T10:00:00Z","lastUpdatedAt":"2026-11-25T10:00:00Z","ttlMs":60000}}`, rpcID(t, req)))})
	a.waitStage(t, "job", StageTask)
	b.waitStage(t, "job", StageIgnored)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := a.st.Get(t.Context(), "job")
		if err == nil && r.Phase == state.Running && r.Task != nil && r.Task.ID == "T1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task was never recorded: %+v %v", r, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	b.space.mu.Lock()
	b.space.taskAnswer = func(req agent.RPCRequest) (agent.RPCResponse, error) {
		if req.Method != "tasks/get" {
			return agent.RPCResponse{}, fmt.Errorf("unexpected %s", req.Method)
		}
		return agent.RPCResponse{Result: json.RawMessage(`{"resultType":"complete","taskId":"T1","status":"completed","createdAt":"2026-11-25T10:00:00Z","lastUpdatedAt":"2026-11-25T10:00:09Z","ttlMs":60000,"result":{"content":[{"type":"text","text":"migrated"}]}}`)}, nil
	}
	b.space.mu.Unlock()
	a.crash()
	b.waitStage(t, "job", StageResumed)
	b.waitStage(t, "job", StageFulfilled)

	var relay, resp agent.Envelope
	for _, e := range drain(b.space, 300*time.Millisecond) {
		switch {
		case isToolsCall(e):
			t.Errorf("b called the tool again: %s", e.Payload)
		case e.Kind == agent.KindRequest && e.CorrelationID.First() == "job":
			relay = e
		case e.Kind == agent.KindResponse:
			resp = e
		}
	}
	for _, c := range []struct {
		env           agent.Envelope
		kind, to, cid string
		payload       string
	}{
		{relay, agent.KindRequest, "ful-b", "job", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tasks/result","params":{"taskId":"T1"}}`, rpcID(t, relay))},
		{resp, agent.KindResponse, "coder", relay.ID, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"migrated"}]}}`, rpcID(t, relay))},
	} {
		if c.env.Kind != c.kind || c.env.From != "ful-b" || len(c.env.To) != 1 || c.env.To[0] != c.to || c.env.CorrelationID.First() != c.cid || !jsonEqual(c.env.Payload, c.payload) {
			t.Errorf("b sent %s %s to %v correlated %v: %s; want %s to %s correlated %s: %s", c.env.From, c.env.Kind, c.env.To, c.env.CorrelationID, c.env.Payload, c.kind, c.to, c.cid, c.payload)
		}
	}
	if _, err := b.st.Get(t.Context(), "job"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the record outlives the relayed result: %v", err)
	}
}

// A replay of a fulfilled proposal's id after a restart loses its claim
// and is ignored (rule 5); its line carries the decision id the original
// claim recorded, the one its decision and fulfilment lines carry (rule
// 10), not a fresh one.
func TestStoreReplayAfterRestartJoinsTheOriginalDecision(t *testing.T) {
	t.Parallel()
	mode := state.Mode{Kind: state.Dir, Dir: t.TempDir()}
	st := openStore(t, mode, "fulfiller")
	h := newStoreHarness(t, "fulfiller", st, Config{}, &fakeDecider{decisions: storeDecisions})
	h.deliver(proposalEnv("p1", "coder", callOf("add")))
	req := h.space.next(t)
	if !isToolsCall(req) {
		t.Fatalf("sent %s %s, want the tools/call of p1", req.Kind, req.Payload)
	}
	h.deliver(answerFor(t, req))
	h.waitStage(t, "p1", StageFulfilled)
	original := h.eventOf(t, "p1", StageFulfilled).DecisionID
	if original == "" || h.eventOf(t, "p1", StageDecided).DecisionID != original {
		t.Fatalf("p1's lines do not share a decision id: decided %q, fulfilled %q", h.eventOf(t, "p1", StageDecided).DecisionID, original)
	}
	h.shutdown()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, mode, "fulfiller")
	h2 := newStoreHarness(t, "fulfiller", st2, Config{}, &fakeDecider{decisions: storeDecisions})
	h2.deliver(proposalEnv("p1", "coder", callOf("add")))
	h2.waitStage(t, "p1", StageIgnored)
	ev := h2.eventOf(t, "p1", StageIgnored)
	if ev.Reason != "duplicate" || ev.DecisionID != original {
		t.Errorf("the replay's ignored event: reason %q decision %q, want duplicate under %q", ev.Reason, ev.DecisionID, original)
	}
	// Within the process the replay joins it too (the seen set).
	h2.deliver(proposalEnv("p1", "coder", callOf("add")))
	waitFor(t, func() bool { return len(h2.stages("p1")) == 2 })
	for _, e := range h2.eventsOf("p1") {
		if e.DecisionID != original {
			t.Errorf("%s event under %q, want %q", e.Stage, e.DecisionID, original)
		}
	}
	h2.space.quiet(t, 100*time.Millisecond)
	if n := len(h2.eventsAt(StageDecided)); n != 0 {
		t.Errorf("the replay has %d decision records, want 0", n)
	}
}
