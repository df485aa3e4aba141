package fulfill

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/clocktest"
	"github.com/mewkit/fulfiller/internal/poll"
)

var fulfilAdd = map[string]decision.Decision{"add": {Action: decision.Fulfill}}

// wantEnvelope checks the fields of a sent envelope that a receiver relies on.
func wantEnvelope(t *testing.T, got agent.Envelope, kind string, to []string, corr []string, payload string) {
	t.Helper()
	if got.Kind != kind {
		t.Fatalf("kind = %q, want %q (payload %s)", got.Kind, kind, got.Payload)
	}
	if !reflect.DeepEqual([]string(got.To), to) {
		t.Errorf("%s to = %v, want %v", kind, got.To, to)
	}
	if !reflect.DeepEqual([]string(got.CorrelationID), corr) {
		t.Errorf("%s correlation_id = %v, want %v", kind, got.CorrelationID, corr)
	}
	if payload != "" && !jsonEqual(got.Payload, payload) {
		t.Errorf("%s payload = %s, want %s", kind, got.Payload, payload)
	}
	if got.Protocol != agent.ProtocolV04 || got.ID == "" || got.TS == "" || got.From != "fulfiller" {
		t.Errorf("%s not stamped: %+v", kind, got)
	}
}

func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// rpcID returns the JSON-RPC id of a request payload.
func rpcID(t *testing.T, env agent.Envelope) int64 {
	t.Helper()
	var req struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(env.Payload, &req); err != nil || req.ID == 0 {
		t.Fatalf("request without a numeric id: %s", env.Payload)
	}
	return req.ID
}

// response is the answer of from to the request req, with req's JSON-RPC
// id, as a tool owner writes it.
func response(t *testing.T, id, from string, req agent.Envelope, result string) agent.Envelope {
	t.Helper()
	return agent.Envelope{ID: id, From: from, To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{req.ID},
		Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":%s}`, rpcID(t, req), result))}
}

func TestFulfilBroadcastProposal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`))

	req := h.space.next(t)
	id := rpcID(t, req)
	wantEnvelope(t, req, agent.KindRequest, []string{"calculator"}, []string{"p1"},
		fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`, id))

	in := h.dec.lastInput()
	if in.Tool == nil || in.Tool.Server != "calculator" || in.Tool.Description != "Add two numbers" || string(in.Tool.Annotations) != `{"readOnlyHint":true}` {
		t.Errorf("policy input tool = %+v", in.Tool)
	}
	if in.Proposer == nil || in.Proposer.ID != "coder" || !jsonEqual(in.Proposer.Capabilities, `[{"kind":"mcp/proposal"},{"kind":"mcp/withdraw"}]`) {
		t.Errorf("policy input proposer = %+v", in.Proposer)
	}
	if in.Agent.ID != "fulfiller" || in.Agent.Pending != 1 || in.Agent.MaxPending != 1000 || in.Space.ID != "lab" {
		t.Errorf("policy input agent/space = %+v %+v", in.Agent, in.Space)
	}

	h.deliver(agent.Envelope{ID: "r1", From: "calculator", Kind: agent.KindResponse, To: []string{"fulfiller"},
		CorrelationID: agent.CorrelationIDs{req.ID}, Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"3"}]}}`, id))})
	want := []Stage{StageReceived, StageDecided, StageFulfilling, StageFulfilled}
	waitFor(t, func() bool { return len(h.stages("p1")) == len(want) })
	if got := h.stages("p1"); !reflect.DeepEqual(got, want) {
		t.Errorf("stages = %v, want %v", got, want)
	}
	h.space.quiet(t, 50*time.Millisecond)
}

func TestFulfilTargetedProposal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall, "calculator"))
	req := h.space.next(t)
	wantEnvelope(t, req, agent.KindRequest, []string{"calculator"}, []string{"p1"}, "")
}

func TestRejectWithReasonAndChat(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "unsafe", Message: "no adding on Sundays"}}}
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	rej := h.space.next(t)
	wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"unsafe"}`)
	chat := h.space.next(t)
	wantEnvelope(t, chat, agent.KindChat, []string{"coder"}, []string{rej.ID}, `{"text":"no adding on Sundays","format":"plain"}`)
	h.space.quiet(t, 50*time.Millisecond)
}

func TestInvalidProposals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	for i, payload := range []string{`"just a string"`, `{"params":{}}`, `{"method":7}`, `{"method":"tools/call","params":[1]}`, `[]`} {
		id := fmt.Sprintf("bad-%d", i)
		env := proposalEnv(id, "coder", payload)
		h.deliver(env)
		rej := h.space.next(t)
		wantEnvelope(t, rej, agent.KindReject, []string{"coder"}, []string{id}, `{"reason":"invalid"}`)
		chat := h.space.next(t)
		if chat.Kind != agent.KindChat {
			t.Fatalf("after invalid reject: %s", chat.Kind)
		}
	}
	// No payload at all.
	h.deliver(agent.Envelope{ID: "bad-none", From: "coder", Kind: agent.KindProposal})
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"bad-none"}, `{"reason":"invalid"}`)
	if n := h.dec.count(); n != 0 {
		t.Errorf("policy asked %d times about invalid proposals", n)
	}
}

func TestIncapable(t *testing.T) {
	t.Parallel()
	t.Run("unknown tool", func(t *testing.T) {
		h := newHarness(t, Config{DiscoveryWait: 10 * time.Millisecond}, &fakeDecider{decisions: map[string]decision.Decision{"divide": {Action: decision.Fulfill}}})
		h.deliver(proposalEnv("p1", "coder", `{"method":"tools/call","params":{"name":"divide"}}`))
		wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"incapable"}`)
		chat := h.space.next(t)
		if !jsonEqual(chat.Payload, `{"text":"no participant in the space offers tool \"divide\"","format":"plain"}`) {
			t.Errorf("chat = %s", chat.Payload)
		}
	})
	t.Run("own capabilities lacking", func(t *testing.T) {
		h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
		h.space.caps = []agent.Capability{{Kind: "mcp/request", Payload: map[string]any{"method": "tools/list"}}, {Kind: "mcp/reject"}, {Kind: "chat"}}
		h.deliver(proposalEnv("p1", "coder", addCall))
		wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"incapable"}`)
	})
	t.Run("escalation nobody can carry out asks no human", func(t *testing.T) {
		h := newHarness(t, Config{DiscoveryWait: 10 * time.Millisecond}, &fakeDecider{decisions: map[string]decision.Decision{"nuke": {Action: decision.Escalate}}})
		h.deliver(proposalEnv("p1", "coder", `{"method":"tools/call","params":{"name":"nuke"}}`))
		wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"incapable"}`)
	})
}

// Without Config.Approvals nobody can ask the humans: an escalation is
// rejected "policy" at once, and the chat says why.
func TestEscalationWithoutApprovalsRejectsPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate}}})
	h.deliver(proposalEnv("p1", "coder", addCall))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"policy"}`)
	chat := h.space.next(t)
	if !jsonEqual(chat.Payload, `{"text":"the policy asks for human approval, but escalation is not configured on this fulfiller","format":"plain"}`) {
		t.Errorf("chat = %s", chat.Payload)
	}
}

func TestDuplicateIDIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"p1"}, "")
	h.deliver(proposalEnv("p1", "coder", addCall))                                                          // replay while pending
	h.deliver(proposalEnv("p1", "coder", `{"method":"tools/call","params":{"name":"add","arguments":{}}}`)) // differs
	h.space.quiet(t, 100*time.Millisecond)
	// The fulfilling event follows the write, so it may come after the
	// replays' events: count them rather than expect them last.
	if got := h.stages("p1"); len(got) != 5 || slices.Index(got, StageIgnored) < 0 || len(slices.DeleteFunc(slices.Clone(got), func(s Stage) bool { return s != StageIgnored })) != 2 {
		t.Errorf("stages = %v, want received, decided, fulfilling and two ignored", got)
	}
}

func TestWithdrawBeforeDecision(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return h.dec.count() == 1 })
	h.deliver(agent.Envelope{ID: "w1", From: "coder", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"p1"}, Payload: json.RawMessage(`{"reason":"no_longer_needed"}`)})
	waitFor(t, func() bool { return len(h.f.Pending()) == 0 })
	// The withdrawn event follows the state change: wait for it too, so
	// the decision released below cannot be reported first.
	waitFor(t, func() bool { return len(h.stageEventsOf("p1", StageWithdrawn)) == 1 })
	close(dec.gate)
	h.space.quiet(t, 100*time.Millisecond) // withdrawal is fire-and-forget: nothing goes back
	// Withdrawn before its decision: the policy's late answer is not a
	// decision of record (docs/operations.md: one id for all its lines).
	want := []Stage{StageReceived, StageWithdrawn}
	if got := h.stages("p1"); !reflect.DeepEqual(got, want) {
		t.Errorf("stages = %v, want %v", got, want)
	}
}

func TestSpoofedWithdrawIgnored(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return h.dec.count() == 1 })
	h.deliver(agent.Envelope{ID: "w1", From: "calculator", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"p1"}, Payload: json.RawMessage(`{"reason":"no_longer_needed"}`)})
	close(dec.gate)
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"p1"}, "")
}

func TestLateWithdrawIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	// Observers hear "fulfilling" once the request's write returns, which
	// can be just after the space has the frame: the withdrawal comes
	// after that, as a proposer's would (a round trip later).
	waitFor(t, func() bool { return len(h.stageEventsOf("p1", StageFulfilling)) == 1 })
	h.deliver(agent.Envelope{ID: "w1", From: "coder", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"p1"}})
	h.deliver(response(t, "r1", "calculator", req, `{}`))
	want := []Stage{StageReceived, StageDecided, StageFulfilling, StageIgnored, StageFulfilled}
	waitFor(t, func() bool { return len(h.stages("p1")) == len(want) })
	if got := h.stages("p1"); !reflect.DeepEqual(got, want) {
		t.Errorf("stages = %v, want %v", got, want)
	}
}

func TestSupersededByAnotherFulfiller(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return h.dec.count() == 1 })
	h.deliver(agent.Envelope{ID: "their-req", From: "other-ful", To: []string{"calculator"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{"p1"}, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add"}}`)})
	waitFor(t, func() bool { return len(h.f.Pending()) == 0 })
	close(dec.gate)
	h.space.quiet(t, 100*time.Millisecond)
	if got := h.stages("p1"); got[1] != StageSuperseded {
		t.Errorf("stages = %v", got)
	}
}

func TestAddressedToAnotherFulfillerLeftAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall, "other-ful"))
	h.space.quiet(t, 100*time.Millisecond)
	if h.dec.count() != 0 {
		t.Error("policy was asked about a proposal addressed to another fulfiller")
	}
}

// The fulfil timeout on the clock: nothing a nanosecond before it; at
// it, the cancellation to the owner and the reject to the proposer.
func TestFulfilTimeout(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	h := newHarness(t, Config{FulfillTimeout: 30 * time.Second, PendingTTL: time.Hour, Clock: clock}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	id := rpcID(t, req)
	if !clock.WaitArmed(2, poll.Limit) { // the pending TTL and the fulfil timeout
		t.Fatal("the fulfil timeout was not armed")
	}
	clock.Advance(30*time.Second - time.Nanosecond)
	h.space.quiet(t, 20*time.Millisecond)
	clock.Advance(time.Nanosecond)
	cancel := h.space.next(t)
	wantEnvelope(t, cancel, agent.KindRequest, []string{"calculator"}, []string{req.ID},
		fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"timeout"}}`, id))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
	h.space.next(t) // the chat
	// A late response changes nothing.
	h.deliver(response(t, "r1", "calculator", req, `{}`))
	h.space.quiet(t, 50*time.Millisecond)
}

func TestMaxPendingOverflowAnswersEveryoneOnce(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Reject, Reason: "policy"}}, gate: make(chan struct{})}
	h := newHarness(t, Config{MaxPending: 3, MaxPendingPerProposer: 3}, dec)
	const n = 10
	for i := range n {
		h.deliver(proposalEnv(fmt.Sprintf("p%d", i), "coder", addCall))
	}
	answers := map[string]string{}
	for len(answers) < n-3 { // the overflow is refused at once, before any decision
		rej := h.space.next(t)
		if rej.Kind == agent.KindChat {
			continue
		}
		answers[rej.CorrelationID.First()] = reasonOf(rej.Payload)
	}
	close(dec.gate)
	for len(answers) < n {
		env := h.space.next(t)
		if env.Kind != agent.KindReject {
			continue
		}
		if _, dup := answers[env.CorrelationID.First()]; dup {
			t.Fatalf("%s answered twice", env.CorrelationID.First())
		}
		answers[env.CorrelationID.First()] = reasonOf(env.Payload)
	}
	busy := 0
	for id, r := range answers {
		switch r {
		case "busy":
			busy++
		case "policy":
		default:
			t.Errorf("%s: reason %q", id, r)
		}
	}
	if busy != n-3 {
		t.Errorf("%d busy rejects, want %d (older work is never evicted)", busy, n-3)
	}
	for _, id := range []string{"p0", "p1", "p2"} {
		if answers[id] != "policy" {
			t.Errorf("older proposal %s answered %q, want its policy decision", id, answers[id])
		}
	}
}

func TestPendingTTLExpiryRejectsTimeout(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	defer close(dec.gate)
	h := newHarness(t, Config{PendingTTL: 100 * time.Millisecond}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"timeout"}`)
}

func TestShutdownAnswersPendingWork(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	defer close(dec.gate)
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	h.deliver(proposalEnv("p2", "coder", addCall))
	waitFor(t, func() bool { return len(h.f.Pending()) == 2 })
	h.shutdown()
	got := map[string]bool{}
	for range 4 {
		env := h.space.next(t)
		if env.Kind == agent.KindReject {
			if !jsonEqual(env.Payload, `{"reason":"other"}`) {
				t.Errorf("shutdown reject payload %s", env.Payload)
			}
			got[env.CorrelationID.First()] = true
		}
	}
	if !got["p1"] || !got["p2"] {
		t.Errorf("shutdown rejected %v, want p1 and p2", got)
	}
}

func TestMaxInflightQueues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInflight: 1}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	first := h.space.next(t)
	h.deliver(proposalEnv("p2", "coder", addCall))
	waitFor(t, func() bool {
		s, ok := h.f.Get("p2")
		return ok && s.State == "queued"
	})
	h.space.quiet(t, 50*time.Millisecond)
	h.deliver(response(t, "r1", "calculator", first, `{}`))
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"p2"}, "")
}

func TestResponseFromWrongParticipantIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	h.deliver(response(t, "r1", "coder", req, `{}`))
	// The fulfiller's word that it set the answer aside, then its state.
	waitFor(t, func() bool { return slices.Contains(h.stages("p1"), StageIgnored) })
	if s, ok := h.f.Get("p1"); !ok || s.State != "fulfilling" {
		t.Errorf("after forged response: %+v %v", s, ok)
	}
}

// The owner leaves during the fulfilment and is not back after the grace:
// the request is cancelled (what we heard may lag: an owner back after
// all must not run the call), then the proposal is rejected "incapable".
func TestToolOwnerLeavesMidFulfilment(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{OwnerRejoinGrace: 10 * time.Millisecond}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	h.space.setPresent("calculator", false)
	h.deliver(agent.Envelope{ID: "pr", From: agent.GatewayID, Kind: agent.KindPresence, Payload: json.RawMessage(`{"event":"leave","participant":{"id":"calculator"}}`)})
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{req.ID},
		fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"the tool owner left"}}`, rpcID(t, req)))
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"incapable"}`)
}

// A tool owner that leaves and is back within the grace (a dropped link,
// a gateway restart) keeps the fulfilment: its response still counts.
func TestToolOwnerBackWithinGraceKeepsFulfilment(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	h := newHarness(t, Config{OwnerRejoinGrace: 5 * time.Second, FulfillTimeout: time.Hour, PendingTTL: time.Hour, Clock: clock}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	h.deliver(agent.Envelope{ID: "pr", From: agent.GatewayID, Kind: agent.KindPresence, Payload: json.RawMessage(`{"event":"leave","participant":{"id":"calculator"}}`)})
	if !clock.WaitArmed(2, poll.Limit) { // the proposal's one deadline (the fulfil timeout) and the grace
		t.Fatal("the rejoin grace was not armed")
	}
	// Back before the grace ends.
	h.deliver(agent.Envelope{ID: "pj", From: agent.GatewayID, Kind: agent.KindPresence, Payload: json.RawMessage(`{"event":"join","participant":{"id":"calculator"}}`)})
	h.handled()
	clock.Advance(5 * time.Second)
	if n := clock.Armed(); n != 1 {
		t.Fatalf("%d timers armed after the grace, want 1 (it fired)", n)
	}
	h.space.quiet(t, 20*time.Millisecond)
	h.deliver(response(t, "r1", "calculator", req, `{}`))
	waitFor(t, func() bool { _, ok := h.f.Get("p1"); return !ok })
	h.space.quiet(t, 20*time.Millisecond)
}

func TestOperatorCancel(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	defer close(dec.gate)
	h := newHarness(t, Config{}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { return len(h.f.Pending()) == 1 })
	if err := h.f.Cancel("p1", "alice via API"); err != nil {
		t.Fatal(err)
	}
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"other"}`)
	chat := h.space.next(t)
	if !jsonEqual(chat.Payload, `{"text":"cancelled by the operator (alice via API)","format":"plain"}`) {
		t.Errorf("chat %s", chat.Payload)
	}
	if err := h.f.Cancel("p1", ""); err == nil {
		t.Error("second cancel succeeded")
	}
}

// queuedBehindOwnerLeaving leaves p1 queued behind p0 (one fulfilment at
// a time), then takes the tool owner out of the roster and answers p0, so
// that p1's request is due while its owner is away.
func queuedBehindOwnerLeaving(t *testing.T, h *harness) {
	t.Helper()
	h.deliver(proposalEnv("p0", "coder", addCall))
	first := h.space.next(t)
	h.deliver(proposalEnv("p1", "coder", addCall))
	waitFor(t, func() bool { s, ok := h.f.Get("p1"); return ok && s.State == "queued" })
	h.space.setPresent("calculator", false)
	h.deliver(response(t, "r0", "calculator", first, `{}`))
}

// A fulfilment whose tool owner is away (its link dropped) is held, not
// sent into the void: it goes out once when the owner is back.
func TestRequestHeldUntilOwnerIsBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInflight: 1, OwnerRejoinGrace: time.Minute}, &fakeDecider{decisions: fulfilAdd})
	queuedBehindOwnerLeaving(t, h)
	waitFor(t, func() bool { s, ok := h.f.Get("p1"); return ok && s.State == "fulfilling" })
	h.space.quiet(t, 50*time.Millisecond)
	h.space.setPresent("calculator", true)
	h.deliver(agent.Envelope{ID: "pj", From: agent.GatewayID, Kind: agent.KindPresence, Payload: json.RawMessage(`{"event":"join","participant":{"id":"calculator"}}`)})
	wantEnvelope(t, h.space.next(t), agent.KindRequest, []string{"calculator"}, []string{"p1"}, "")
	h.deliver(agent.Envelope{ID: "pj2", From: agent.GatewayID, Kind: agent.KindPresence, Payload: json.RawMessage(`{"event":"join","participant":{"id":"calculator"}}`)})
	h.space.quiet(t, 50*time.Millisecond) // sent once, however often it joins
}

// An owner that does not come back within the grace: the held request
// never goes out, and the proposal is rejected "incapable".
func TestHeldRequestOwnerNeverBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInflight: 1, OwnerRejoinGrace: 20 * time.Millisecond}, &fakeDecider{decisions: fulfilAdd})
	queuedBehindOwnerLeaving(t, h)
	wantEnvelope(t, h.space.next(t), agent.KindReject, []string{"coder"}, []string{"p1"}, `{"reason":"incapable"}`)
	chat := h.space.next(t)
	if !jsonEqual(chat.Payload, `{"text":"calculator was not in the space to carry the call out, and did not come back within 20ms","format":"plain"}`) {
		t.Errorf("chat %s", chat.Payload)
	}
	h.space.quiet(t, 50*time.Millisecond)
}

// TestReaderKeepsReadingWhileWorkersAreBusy: with every decision worker
// held by a slow policy, the fulfiller still reads what arrives — more
// proposals up to --max-pending, and a withdrawal — instead of stalling its
// socket behind them. A stalled reader would hold withdrawals, responses and
// approvals hostage to the policy, and a gateway that bounds its queues
// would drop the fulfiller.
func TestReaderKeepsReadingWhileWorkersAreBusy(t *testing.T) {
	t.Parallel()
	dec := &fakeDecider{decisions: fulfilAdd, gate: make(chan struct{})}
	h := newHarness(t, Config{DecideWorkers: 1, MaxPending: 100, MaxPendingPerProposer: 100, MaxInflightPerProposer: 64}, dec)
	const n = 30
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		for i := range n {
			h.deliver(proposalEnv(fmt.Sprintf("p%d", i), "coder", addCall))
		}
		h.deliver(agent.Envelope{ID: "w1", From: "coder", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"p29"}, Payload: json.RawMessage(`{"reason":"no_longer_needed"}`)})
	}()
	select {
	case <-delivered:
	case <-time.After(5 * time.Second):
		close(dec.gate) // let the test end
		t.Fatalf("the fulfiller stopped reading after %d pending proposals while its one worker was busy", len(h.f.Pending()))
	}
	// The withdrawn event follows the removal from the store: wait for it,
	// not for the count alone.
	waitFor(t, func() bool {
		return len(h.f.Pending()) == n-1 && slices.Contains(h.stages("p29"), StageWithdrawn)
	})
	close(dec.gate)
	for range n - 1 {
		if env := h.space.next(t); env.Kind != agent.KindRequest {
			t.Fatalf("sent %s %s, want a fulfilment request", env.Kind, env.Payload)
		}
	}
	h.space.quiet(t, 100*time.Millisecond) // nothing for the withdrawn p29
}
