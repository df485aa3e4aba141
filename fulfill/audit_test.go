package fulfill

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// fakeRecorder is a decision log that can be made to fail, as one on a
// full disk does.
type fakeRecorder struct {
	mu       sync.Mutex
	failing  bool
	recorded []Stage // stages Record was called for (successfully or not)
}

func (r *fakeRecorder) Observe(Event) {}

func (r *fakeRecorder) Record(e Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recorded = append(r.recorded, e.Stage)
	if r.failing {
		return errors.New("write decisions.jsonl: no space left on device")
	}
	return nil
}

func (r *fakeRecorder) setFailing(v bool) { r.mu.Lock(); r.failing = v; r.mu.Unlock() }

const auditChat = `{"text":"` + auditFailedMessage + `","format":"plain"}`

// TestAuditFailureRefusesFulfilment: while the decision log cannot be
// written, a proposal the policy fulfils is rejected "other" with the
// reason, and no tool call goes out; once it can, fulfilment resumes.
func TestAuditFailureRefusesFulfilment(t *testing.T) {
	t.Parallel()
	rec := &fakeRecorder{failing: true}
	h := newHarness(t, Config{Observer: rec}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"other"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"coder"}, []string{rej.ID}, auditChat)
	h.space.quiet(t, 50*time.Millisecond)

	rec.setFailing(false)
	h.deliver(proposalEnv("p2", "coder", addCall))
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"p2"}, "")
}

// TestAuditFailureRefusesEscalation: no human is asked without the
// record of it; the proposal is rejected "other" instead.
func TestAuditFailureRefusesEscalation(t *testing.T) {
	t.Parallel()
	rec := &fakeRecorder{failing: true}
	space := newFakeSpace()
	space.setPresent("alice", true)
	h := newHarnessOn(t, space, Config{Observer: rec, Approvals: &Approvals{Codec: answerCodec{}}},
		&fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}}}})
	h.deliver(proposalEnv("p1", "coder", addCall))
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"other"}`)
	wantEnvelope(t, h.space.next(t), agent.KindChat, []string{"coder"}, []string{rej.ID}, auditChat)
	h.space.quiet(t, 20*time.Millisecond) // nothing more: no prompt to alice
}

// TestAuditFailureStillRejects: denying is always safe, so the policy's
// own reject goes out even when its record cannot be written.
func TestAuditFailureStillRejects(t *testing.T) {
	t.Parallel()
	rec := &fakeRecorder{failing: true}
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "unsafe"}}}
	h := newHarness(t, Config{Observer: rec}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"unsafe"}`)
	h.space.quiet(t, 50*time.Millisecond)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.recorded) != 1 || rec.recorded[0] != StageRejected {
		t.Fatalf("recorded %v, want the reject's record attempted", rec.recorded)
	}
}

// eventsWhere returns the harness's events that match keep, in order.
func (h *harness) eventsWhere(keep func(Event) bool) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// eventsOf returns the harness's events for one proposal.
func (h *harness) eventsOf(id string) []Event {
	return h.eventsWhere(func(e Event) bool { return e.ProposalID == id })
}

// eventsAt returns the harness's events of one stage, of any proposal.
func (h *harness) eventsAt(stage Stage) []Event {
	return h.eventsWhere(func(e Event) bool { return e.Stage == stage })
}

// stageEventsOf returns the harness's events of one stage for one proposal.
func (h *harness) stageEventsOf(id string, stage Stage) []Event {
	return h.eventsWhere(func(e Event) bool { return e.ProposalID == id && e.Stage == stage })
}

// TestDecisionIDGovernsEveryEvent (docs/design.md rule 10): every event of a
// proposal carries the id of the decision in force — the first decision
// adopts the proposal's id, events before it carry no revision — and a
// re-evaluation after an approver's edit is a new decision whose id the
// events after it carry. The humans are asked and answer under the
// first decision: its id joins their steps to it.
func TestDecisionIDGovernsEveryEvent(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}, Revision: "rev-1"}}}
	space := newFakeSpace()
	space.setPresent("alice", true)
	var mu sync.Mutex
	var humans []lifecycle.Human
	approvals := testApprovals()
	approvals.Observer = func(x lifecycle.Human) { mu.Lock(); humans = append(humans, x); mu.Unlock() }
	h := newHarnessOn(t, space, Config{Approvals: approvals}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	prompt := nextPrompt(t, h.space, "alice", "p1")
	h.deliver(answerTo(t, prompt, "alice", `{"action":"accept","content":{"approve":true,"params":{"name":"add","arguments":{"a":2,"b":2}}}}`))
	waitFor(t, func() bool { return dec.count() == 2 }) // asked again after the edit
	req := h.space.next(t)
	wantEnvelope(t, req, agent.KindRequest, []string{"calculator"}, []string{"p1"}, "")
	waitFor(t, func() bool { return len(h.eventsOf("p1")) == 6 })

	evs := h.eventsOf("p1")
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Stage))
	}
	want := []Stage{StageReceived, StageDecided, StageEscalated, StageApproved, StageDecided, StageFulfilling}
	for i, s := range want {
		if evs[i].Stage != s {
			t.Fatalf("stages %v, want %v", got, want)
		}
	}
	first, second := evs[1].DecisionID, evs[4].DecisionID
	if first == "" || second == "" || first == second {
		t.Fatalf("decision ids %q and %q: want two different ones", first, second)
	}
	if evs[0].DecisionID != first || evs[0].Revision != "" {
		t.Errorf("received: id %q revision %q, want the proposal's id %q and no revision", evs[0].DecisionID, evs[0].Revision, first)
	}
	for _, i := range []int{1, 2, 3} {
		if evs[i].DecisionID != first || evs[i].Revision != "rev-1" {
			t.Errorf("%s: id %q revision %q, want %q rev-1", evs[i].Stage, evs[i].DecisionID, evs[i].Revision, first)
		}
	}
	if evs[5].DecisionID != second || evs[5].Revision != "rev-1" {
		t.Errorf("fulfilling: id %q, want the re-evaluation's %q", evs[5].DecisionID, second)
	}
	mu.Lock()
	defer mu.Unlock()
	steps := 0
	for _, x := range humans {
		if x.Kind == lifecycle.HumanAsked || x.Kind == lifecycle.HumanAnswered {
			steps++
			if x.DecisionID != first || x.Revision != "rev-1" {
				t.Errorf("%s: decision %q %q, want the first decision %q rev-1", x.Kind, x.DecisionID, x.Revision, first)
			}
		}
	}
	if steps != 2 {
		t.Errorf("steps with the humans %+v, want alice asked and answering", humans)
	}
}

// TestIgnoredFramesCarryADecisionID: a duplicate id never reaches the
// policy, yet its line has a decision id of its own and no revision.
func TestIgnoredFramesCarryADecisionID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	h.space.next(t)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool {
		for _, e := range h.eventsOf("p1") {
			if e.Stage == StageIgnored {
				return true
			}
		}
		return false
	})
	for _, e := range h.eventsOf("p1") {
		if e.Stage == StageIgnored && (e.DecisionID == "" || e.Revision != "") {
			t.Fatalf("ignored event: id %q revision %q", e.DecisionID, e.Revision)
		}
	}
}

// The Fulfiller is the MEW front end on an Engine: every line of a
// space's proposal, and the policy's input, name front end "mew", so a
// decision log shared with fulfiller mcp tells them apart.
func TestEveryLineOfASpaceProposalNamesTheMEWFrontEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"p1"}, "")
	h.deliver(proposalEnv("p2", "coder", `{"method":"tools/call","params":{"name":"format_disk"}}`))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p2"}, `{"reason":"policy"}`)
	waitFor(t, func() bool {
		return len(h.stageEventsOf("p1", StageFulfilling)) == 1 && len(h.stageEventsOf("p2", StageRejected)) == 1
	})
	for _, id := range []string{"p1", "p2"} {
		evs := h.eventsOf(id)
		if len(evs) < 3 {
			t.Fatalf("events of %s: %+v", id, evs)
		}
		for _, e := range evs {
			if e.FrontEnd != FrontEndMEW {
				t.Errorf("%s event of %s names front end %q, want %q", e.Stage, id, e.FrontEnd, FrontEndMEW)
			}
			if e.Stage == StageDecided && (e.Input == nil || e.Input.FrontEnd != FrontEndMEW) {
				t.Errorf("decided event of %s: input %+v", id, e.Input)
			}
		}
	}
}
