package fulfill

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// answerCodec is a Codec whose prompt names its ids and whose answers are
// MCP elicitation results read plainly (approve: accept with
// content.approve true; decline; cancel), taken on the gateway's word.
type answerCodec struct{ stubCodec }

func (answerCodec) Read(_ *lifecycle.Proposal, _ lifecycle.Prompt, payload json.RawMessage, _ lifecycle.KeySet) lifecycle.Verified {
	var r struct {
		Result struct {
			Action  string `json:"action"`
			Content struct {
				Approve bool   `json:"approve"`
				Reason  string `json:"reason"`
			} `json:"content"`
		} `json:"result"`
	}
	if json.Unmarshal(payload, &r) != nil {
		return lifecycle.Verified{Why: "not an answer"}
	}
	v := lifecycle.Verified{Action: r.Result.Action, Reason: r.Result.Content.Reason}
	switch {
	case r.Result.Action == "cancel":
		v.Kind = lifecycle.AnswerCancelled
	case r.Result.Action == "accept" && r.Result.Content.Approve:
		v.Kind, v.Content = lifecycle.AnswerApproved, json.RawMessage(`{"approve":true}`)
	default:
		v.Kind = lifecycle.AnswerDeclined
	}
	return v
}

// The shell as the channel of the core's own escalation: the prompt goes
// to the approver as the codec made it, the approver's answer (matched
// by correlation, sender and JSON-RPC id) lets the call through, a
// decline rejects it, and a withdrawal cancels the open prompt.
func TestCoreEscalationThroughTheShell(t *testing.T) {
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
