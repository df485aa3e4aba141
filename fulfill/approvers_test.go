package fulfill

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// answerCodec is a Codec whose prompt names its ids and whose answers are
// MCP elicitation results read plainly (approve: accept with
// content.approve true, and content.params the edited params, if any;
// decline; cancel), taken on the gateway's word.
type answerCodec struct{ stubCodec }

func (answerCodec) Read(_ *lifecycle.Proposal, _ lifecycle.Prompt, payload json.RawMessage, _ lifecycle.KeySet) lifecycle.Verified {
	var r struct {
		Result struct {
			Action  string          `json:"action"`
			Content json.RawMessage `json:"content"`
		} `json:"result"`
	}
	var c struct {
		Approve bool            `json:"approve"`
		Reason  string          `json:"reason"`
		Params  json.RawMessage `json:"params"`
	}
	if json.Unmarshal(payload, &r) != nil || (len(r.Result.Content) > 0 && json.Unmarshal(r.Result.Content, &c) != nil) {
		return lifecycle.Verified{Why: "not an answer"}
	}
	v := lifecycle.Verified{Action: r.Result.Action, Reason: c.Reason}
	switch {
	case r.Result.Action == "cancel":
		v.Kind = lifecycle.AnswerCancelled
	case r.Result.Action == "accept" && c.Approve:
		v.Kind, v.Content = lifecycle.AnswerApproved, json.RawMessage(`{"approve":true}`)
		if len(c.Params) > 0 {
			v.Params, v.Key, v.Content = c.Params, string(c.Params), r.Result.Content
		}
	default:
		v.Kind = lifecycle.AnswerDeclined
	}
	return v
}

// The shell as the channel of the core's escalation: the prompt goes
// to the approver as the codec made it, the approver's answer (matched
// by correlation, sender and JSON-RPC id) lets the call through, a
// decline rejects it, and a withdrawal cancels the open prompt.
func TestCoreEscalationThroughTheShell(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var humans []lifecycle.Human
	dec := &fakeDecider{decisions: map[string]decision.Decision{"add": {Action: decision.Escalate, Approvers: []string{"alice"}}}}
	space := newFakeSpace()
	space.setPresent("alice", true)
	h := newHarnessOn(t, space, Config{Approvals: &Approvals{Codec: answerCodec{}, Observer: func(x lifecycle.Human) { mu.Lock(); humans = append(humans, x); mu.Unlock() }}}, dec)
	prompt := func(id string) agent.Envelope {
		t.Helper()
		h.deliver(proposalEnv(id, "coder", addCall))
		for {
			env := h.space.next(t)
			if env.Kind == agent.KindRequest && len(env.To) == 1 && env.To[0] == "alice" {
				if !strings.Contains(string(env.Payload), `"proposal":"`+id+`"`) || !strings.Contains(string(env.Payload), `"prompt":"`+env.ID+`"`) {
					t.Fatalf("prompt %s: %s", env.ID, env.Payload)
				}
				return env
			}
		}
	}
	answer := func(p agent.Envelope, from, result string) {
		var head struct{ ID int64 }
		_ = json.Unmarshal(p.Payload, &head)
		h.deliver(agent.Envelope{ID: agent.NewID("a"), From: from, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{p.ID},
			Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + jsonInt(head.ID) + `,"result":` + result + `}`)})
	}

	p := prompt("p1")
	answer(p, "mallory", `{"action":"accept","content":{"approve":true}}`) // not alice's: ignored
	answer(p, "alice", `{"action":"accept","content":{"approve":true}}`)
	for {
		env := h.space.next(t)
		if env.Kind == agent.KindRequest && len(env.To) == 1 && env.To[0] == "calculator" {
			break
		}
	}

	p = prompt("p2")
	answer(p, "alice", `{"action":"decline","content":{"reason":"not today"}}`)
	for {
		env := h.space.next(t)
		if env.Kind == agent.KindReject {
			if !strings.Contains(string(env.Payload), `"disagree"`) {
				t.Fatalf("reject %s", env.Payload)
			}
			break
		}
	}

	p = prompt("p3")
	h.deliver(agent.Envelope{ID: "wd-3", From: "coder", Kind: agent.KindWithdraw, CorrelationID: agent.CorrelationIDs{"p3"}, Payload: json.RawMessage(`{"reason":"changed my mind"}`)})
	for {
		env := h.space.next(t)
		if env.Kind == agent.KindRequest && env.CorrelationID.First() == p.ID {
			var head struct{ ID int64 }
			_ = json.Unmarshal(p.Payload, &head)
			if want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + jsonInt(head.ID) + `,"reason":"withdrawn"}}`; string(env.Payload) != want {
				t.Fatalf("cancellation %s, want %s", env.Payload, want)
			}
			break
		}
	}
	count := func(k lifecycle.HumanKind) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, x := range humans {
			if x.Kind == k {
				n++
			}
		}
		return n
	}
	waitFor(t, func() bool { return count(lifecycle.HumanCancelled) == 1 })
	if count(lifecycle.HumanAsked) != 3 || count(lifecycle.HumanIgnored) != 1 || count(lifecycle.HumanAnswered) != 2 || count(lifecycle.HumanOpened) != 3 {
		t.Errorf("asked %d, ignored %d, answered %d, opened %d", count(lifecycle.HumanAsked), count(lifecycle.HumanIgnored), count(lifecycle.HumanAnswered), count(lifecycle.HumanOpened))
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// Answers an approver gives through answerCodec.
const (
	approveResult = `{"action":"accept","content":{"approve":true}}`
	declineResult = `{"action":"decline","content":{"reason":"not today"}}`
)

// testApprovals is the core's escalation as the tests run it: prompts
// made and answers read by answerCodec, nobody keyed.
func testApprovals() *Approvals { return &Approvals{Codec: answerCodec{}} }

// promptRPCID is the JSON-RPC id of a prompt answerCodec made.
func promptRPCID(t *testing.T, p agent.Envelope) int64 {
	t.Helper()
	var head struct {
		ID *int64 `json:"id"`
	}
	if err := json.Unmarshal(p.Payload, &head); err != nil || head.ID == nil {
		t.Fatalf("prompt %s carries no JSON-RPC id: %s", p.ID, p.Payload)
	}
	return *head.ID
}

// isPromptTo reports whether env is a prompt of proposal id to approver.
func isPromptTo(env agent.Envelope, approver, id string) bool {
	return env.Kind == agent.KindRequest && len(env.To) == 1 && env.To[0] == approver &&
		len(env.CorrelationID) == 0 && strings.Contains(string(env.Payload), `"proposal":"`+id+`"`)
}

// nextPrompt waits for s to send approver a prompt about proposal id and
// returns it; anything else s sends first fails the test.
func nextPrompt(t *testing.T, s *fakeSpace, approver, id string) agent.Envelope {
	t.Helper()
	env := s.nextWithin(t, 15*time.Second)
	if !isPromptTo(env, approver, id) {
		t.Fatalf("sent %s to %v (%s), want the prompt of %s to %s", env.Kind, env.To, env.Payload, id, approver)
	}
	return env
}

// awaitPrompt waits for s to send approver a prompt about proposal id,
// when other envelopes may come first (an adoption resumes several
// proposals at once): it returns the prompt and what s sent before it.
func awaitPrompt(t *testing.T, s *fakeSpace, approver, id string) (prompt agent.Envelope, before []agent.Envelope) {
	t.Helper()
	for {
		env := s.nextWithin(t, 15*time.Second)
		if isPromptTo(env, approver, id) {
			return env, before
		}
		before = append(before, env)
	}
}

// answerTo is approver's mcp/response to prompt p with result.
func answerTo(t *testing.T, p agent.Envelope, from, result string) agent.Envelope {
	t.Helper()
	return agent.Envelope{ID: agent.NewID("a"), From: from, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{p.ID},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + jsonInt(promptRPCID(t, p)) + `,"result":` + result + `}`)}
}

// wantPromptCancelled checks env is from's cancellation of prompt p
// (PROTOCOL.md, "Cancelling an open prompt"): an mcp/request to its
// approver, correlated to the prompt's envelope, notifications/cancelled
// naming the prompt's JSON-RPC id, for reason.
func wantPromptCancelled(t *testing.T, env agent.Envelope, from string, p agent.Envelope, reason string) {
	t.Helper()
	want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + jsonInt(promptRPCID(t, p)) + `,"reason":"` + reason + `"}}`
	if env.Kind != agent.KindRequest || env.From != from || !slices.Equal(env.To, p.To) ||
		!slices.Equal(env.CorrelationID, agent.CorrelationIDs{p.ID}) || string(env.Payload) != want {
		t.Errorf("sent %s from %s to %v, correlated to %v: %s; want from %s to %v, correlated to [%s]: %s",
			env.Kind, env.From, env.To, env.CorrelationID, env.Payload, from, p.To, p.ID, want)
	}
}
