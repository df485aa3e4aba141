package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/policies"
)

// eventOf returns p's first event at stage.
func (h *harness) eventOf(t *testing.T, id string, stage Stage) Event {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if e.ProposalID == id && e.Stage == stage {
			return e
		}
	}
	t.Fatalf("no %s event for %s", stage, id)
	return Event{}
}

// waitShadow waits for p's shadow event.
func (h *harness) waitShadow(t *testing.T, id string) Event {
	t.Helper()
	waitFor(t, func() bool {
		for _, e := range h.eventsAt(StageShadow) {
			if e.ProposalID == id {
				return true
			}
		}
		return false
	})
	return h.eventOf(t, id, StageShadow)
}

// deciderFunc adapts a function to Decider.
type deciderFunc func(ctx context.Context, in *policies.Input) decision.Decision

func (fn deciderFunc) Decide(ctx context.Context, in *policies.Input) decision.Decision {
	return fn(ctx, in)
}

// A shadow that disagrees is reported (live and shadow action, governed by
// the live decision) and never acted on: the live fulfilment goes out as
// without a shadow, and nothing else.
func TestShadowDisagreementReportedNeverActed(t *testing.T) {
	t.Parallel()
	shadow := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "unsafe", Revision: "sha256:shadow"}}}
	h := newHarness(t, Config{Shadow: shadow}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`))

	req := h.space.next(t)
	wantEnvelope(t, req, agent.KindRequest, []string{"calculator"}, []string{"p1"},
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`, rpcID(t, req)))
	ev := h.waitShadow(t, "p1")
	r := ev.Shadow
	if r == nil || r.Live != decision.Fulfill || r.Decision.Action != decision.Reject || r.Decision.Reason != "unsafe" ||
		r.Agrees || r.Dropped || r.ShadowAction() != "reject" || r.Decision.Revision != "sha256:shadow" {
		t.Fatalf("shadow result %+v", r)
	}
	if dec := h.eventOf(t, "p1", StageDecided); ev.DecisionID == "" || ev.DecisionID != dec.DecisionID || ev.Tool != "add" || ev.Proposer != "coder" {
		t.Errorf("shadow event governed by %q (tool %q, proposer %q), decided %q", ev.DecisionID, ev.Tool, ev.Proposer, dec.DecisionID)
	}
	if in := shadow.lastInput(); in != h.dec.lastInput() {
		t.Errorf("the shadow saw another input than the live policy")
	}
	h.space.quiet(t, 50*time.Millisecond) // the shadow's reject is never sent
}

// A shadow that agrees says so.
func TestShadowAgreement(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Shadow: &fakeDecider{decisions: fulfilAdd}}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	h.space.next(t)
	if r := h.waitShadow(t, "p1").Shadow; !r.Agrees || r.ShadowAction() != "fulfill" || r.Live != decision.Fulfill {
		t.Fatalf("shadow result %+v", r)
	}
}

// A shadow that fails — a fail-closed decision, a panic — is a shadow
// error; the live answer is exactly what it would be without it.
func TestShadowErrorNeverChangesLiveAnswer(t *testing.T) {
	t.Parallel()
	for name, shadow := range map[string]Decider{
		"error": deciderFunc(func(context.Context, *policies.Input) decision.Decision {
			return decision.Decision{Action: decision.Reject, Reason: "policy", Err: errors.New("undefined decision")}
		}),
		"panic": deciderFunc(func(context.Context, *policies.Input) decision.Decision { panic("boom") }),
	} {
		t.Run(name, func(t *testing.T) {
			live := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "unsafe"}}}
			h := newHarness(t, Config{Shadow: shadow}, live)
			h.deliver(proposalEnv("p1", "coder", addCall))
			wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"unsafe"}`)
			r := h.waitShadow(t, "p1").Shadow
			if r.Decision.Err == nil || r.Agrees || r.ShadowAction() != "error" || r.Live != decision.Reject {
				t.Fatalf("shadow result %+v", r)
			}
			if name == "panic" && !strings.Contains(r.Decision.Err.Error(), "shadow policy panicked: boom") {
				t.Errorf("error %v", r.Decision.Err)
			}
			h.space.quiet(t, 50*time.Millisecond)
		})
	}
}

// A shadow slower than the policy timeout is a shadow error, whether it
// honours its context or answers late anyway; the live answer does not
// wait for it.
func TestShadowTimeoutIsAnError(t *testing.T) {
	t.Parallel()
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("honours-ctx=%v", honours), func(t *testing.T) {
			release := make(chan struct{})
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			var once sync.Once
			ctxs := make(chan context.Context, 1)
			shadow := deciderFunc(func(ctx context.Context, in *policies.Input) decision.Decision {
				once.Do(func() { ctxs <- ctx })
				if honours {
					<-ctx.Done()
					return decision.Decision{Action: decision.Reject, Err: ctx.Err()}
				}
				<-release // ignores ctx: answers when the test says
				return decision.Decision{Action: decision.Fulfill}
			})
			h := newHarness(t, Config{Shadow: shadow, ShadowTimeout: 10 * time.Millisecond}, &fakeDecider{decisions: fulfilAdd})
			h.deliver(proposalEnv("p1", "coder", addCall))
			// The live fulfilment goes out while the shadow still runs
			// (it cannot finish before release, in the late case).
			req := h.space.next(t)
			wantEnvelope(t, req, agent.KindRequest, []string{"calculator"}, []string{"p1"},
				fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`, rpcID(t, req)))
			if !honours {
				<-(<-ctxs).Done() // past the timeout: now let it answer
				close(release)
			}
			r := h.waitShadow(t, "p1").Shadow
			if !errors.Is(r.Decision.Err, policies.ErrEvalTimeout) {
				t.Fatalf("shadow error %v, want a timeout", r.Decision.Err)
			}
			if r.Agrees || r.ShadowAction() != "error" {
				t.Errorf("shadow result %+v", r)
			}
		})
	}
}

// A flood of proposals while the shadow is busy cannot queue without
// bound: beyond ShadowQueue the decisions are not shadowed, and each drop
// is reported (the metrics count it), while every live answer goes out.
func TestShadowFloodIsBounded(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	shadow := &fakeDecider{decisions: fulfilAdd, gate: gate}
	live := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "unsafe"}}}
	h := newHarness(t, Config{Shadow: shadow, ShadowQueue: 2, ShadowTimeout: time.Minute}, live)
	h.deliver(proposalEnv("p0", "coder", addCall))
	h.space.next(t)
	waitFor(t, func() bool { return shadow.count() == 1 }) // the shadow worker is busy with p0
	const flood = 19
	for i := 1; i <= flood; i++ {
		h.deliver(proposalEnv(fmt.Sprintf("p%d", i), "coder", addCall))
	}
	for range flood {
		if env := h.space.next(t); env.Kind != agent.KindReject {
			t.Fatalf("sent %s, want the live reject", env.Kind)
		}
	}
	dropped := func() int {
		n := 0
		for _, e := range h.eventsAt(StageShadow) {
			if e.Shadow.Dropped {
				if e.Shadow.Live != decision.Reject {
					t.Errorf("dropped event %+v", e.Shadow)
				}
				n++
			}
		}
		return n
	}
	waitFor(t, func() bool { return dropped() == flood-2 })
	close(gate)
	waitFor(t, func() bool { return len(h.eventsAt(StageShadow)) == flood+1 })
	if n := dropped(); n != flood-2 {
		t.Errorf("%d dropped, want %d (queue of 2 behind the one being evaluated)", n, flood-2)
	}
	if n := shadow.count(); n != 3 {
		t.Errorf("the shadow evaluated %d decisions, want 3", n)
	}
}

// Without a shadow there is no shadow event.
func TestNoShadowNoEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	h.space.next(t)
	h.space.quiet(t, 20*time.Millisecond)
	if evs := h.eventsAt(StageShadow); len(evs) != 0 {
		t.Fatalf("shadow events without a shadow: %+v", evs)
	}
}

// The re-evaluation after an approver's edit is a live decision too: the
// shadow is asked about it, with the edited input, and its event carries
// the re-evaluation's decision id. The shadow's rejects change nothing.
func TestShadowReevaluatedAfterEdit(t *testing.T) {
	t.Parallel()
	edited := json.RawMessage(`{"name":"add","arguments":{"a":2,"b":2}}`)
	live := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}, Revision: "rev-1"}}}
	shadow := &fakeDecider{} // rejects everything
	space := newFakeSpace()
	space.setPresent("alice", true)
	h := newHarnessOn(t, space, Config{Approvals: testApprovals(), Shadow: shadow}, live)
	h.deliver(proposalEnv("p1", "coder", addCall))
	prompt := nextPrompt(t, h.space, "alice", "p1")
	h.deliver(answerTo(t, prompt, "alice", `{"action":"accept","content":{"approve":true,"params":`+string(edited)+`}}`))
	req := h.space.next(t)
	wantEnvelope(t, req, agent.KindRequest, []string{"calculator"}, []string{"p1"},
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":2}}}`, rpcID(t, req)))
	waitFor(t, func() bool { return len(h.stageEventsOf("p1", StageShadow)) == 2 })
	decided, shadows := h.stageEventsOf("p1", StageDecided), h.stageEventsOf("p1", StageShadow)
	if len(decided) != 2 {
		t.Fatalf("%d decided events, want 2", len(decided))
	}
	// The worker takes them in order: the first decision, then the edit's.
	for i := range 2 {
		if shadows[i].DecisionID != decided[i].DecisionID || shadows[i].Shadow.Live != decision.Escalate || shadows[i].Shadow.ShadowAction() != "reject" {
			t.Errorf("shadow %d: id %q %+v, want id %q, escalate → reject", i, shadows[i].DecisionID, shadows[i].Shadow, decided[i].DecisionID)
		}
	}
	if in := shadow.lastInput(); in.Approval == nil || string(in.Params) != string(edited) {
		t.Errorf("the shadow's second input: approval %+v params %s, want the edit", in.Approval, in.Params)
	}
	h.space.quiet(t, 50*time.Millisecond)
}
