package elicit_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// Fault tests: links drop and approvers come and go while a human is asked.
// The gateway replays nothing, so what was sent while a link was down is
// lost; the fulfiller asks again, and each proposal still gets exactly one
// answer.

// askedAgain waits for the next envelope to who and checks that it is
// first again, byte for byte: same envelope id, same JSON-RPC id, same
// form.
func (w *world) askedAgain(who string, first agent.Envelope) agent.Envelope {
	w.t.Helper()
	again := w.ask(who)
	if again.ID != first.ID || !bytes.Equal(again.Payload, first.Payload) {
		w.t.Fatalf("%s asked again with\n%s %s\nwant the same prompt\n%s %s", who, again.ID, again.Payload, first.ID, first.Payload)
	}
	return again
}

// fulfilledOnce checks that the fulfiller answered proposal id with exactly
// one fulfilment request and nothing else.
func (w *world) fulfilledOnce(id string) {
	w.t.Helper()
	w.marker() // everything before it has been handled
	ans := w.answers(id)
	if len(ans) != 1 || ans[0].Kind != agent.KindRequest {
		w.t.Fatalf("answers to %s: %d, want exactly one fulfilment request", id, len(ans))
	}
	exact(w.t, ans[0], `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["fs"],"kind":"mcp/request","correlation_id":["`+id+`"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}}}`)
}

// The space drops everyone while alice is asked. After the reconnects the
// fulfiller sends her the same prompt again (the first one may have been
// lost with her link); her answer to it fulfils the proposal once.
func TestFaultDropDuringEscalationAsksAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{agent: spacetest.Resilient, humans: []string{"alice"}, escalation: `{"approvers":["alice"]}`})
	id := w.propose("p-write", writeCall)
	first := w.ask("alice")

	w.srv.DropAll()
	spacetest.Reconnected(t, w.srv, w.fc, w.humans["alice"].client, w.coder, w.fs)
	again := w.askedAgain("alice", first)
	// The event follows the write the envelope came from: wait for it.
	poll.Until(t, "the asked_again event", func() bool { return len(w.eventsOf(elicit.EventAskedAgain)) > 0 })

	w.answer("alice", again, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled || out.FulfilledBy != "fulfiller" {
		t.Fatalf("outcome %+v", out)
	}
	w.fulfilledOnce(id)
	for _, e := range w.elicitations() {
		if e.ID != first.ID {
			t.Errorf("a new prompt %s was sent; only %s may be asked again", e.ID, first.ID)
		}
	}
}

// An approver who leaves keeps her prompt; when she comes back she is
// asked the same question again.
func TestFaultApproverRejoinsAskedAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{humans: []string{"alice"}, escalation: `{"approvers":["alice"]}`})
	id := w.propose("p-write", writeCall)
	first := w.ask("alice")
	w.leave("alice")
	w.arrive("alice")
	again := w.askedAgain("alice", first)
	w.answer("alice", again, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	w.fulfilledOnce(id)
}

// Quorum 1 of alice, bob and carol, with only alice in the space: she is
// asked and leaves. Bob, who was away at the escalation, comes in and is
// asked at once; his approval fulfils the proposal, and alice's prompt is
// cancelled. Carol never came, so she is never asked.
func TestFaultApproverLeavesLateApproverAsked(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{humans: []string{"alice"}, escalation: `{"approvers":["alice","bob","carol"]}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	w.leave("alice")

	w.arrive("bob")
	eb := w.ask("bob")
	if eb.ID == ea.ID || eb.To[0] != "bob" || !strings.Contains(string(eb.Payload), `"method":"elicitation/create"`) || !strings.Contains(string(eb.Payload), `"proposal":{"id":"p-write"`) {
		t.Fatalf("bob was asked %s %v %s", eb.ID, eb.To, eb.Payload)
	}
	w.answer("bob", eb, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if by := w.approvedBy(id); len(by) != 1 || by[0] != "bob" {
		t.Errorf("approved by %v, want [bob]", by)
	}
	exact(t, w.cancellation(ea), cancelled("alice", ea, string(rpcID(t, ea)), "approved"))
	w.fulfilledOnce(id)
	if n := len(w.elicitations()); n != 2 {
		t.Errorf("%d prompts, want alice's and bob's", n)
	}
}

// The only approver in the space leaves and nobody listed comes: a leave is
// not a decline, so the proposal waits for the deadline and is then
// rejected "timeout" (not "incapable": she could have come back).
func TestFaultApproverLeavesNobodyElseTimesOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{humans: []string{"alice"}, escalation: `{"approvers":["alice","bob"],"timeout":"500ms"}`})
	id := w.propose("p-write", writeCall)
	ea := w.ask("alice")
	w.leave("alice")

	out := w.outcome(id)
	if !out.Rejected || out.Reason != "timeout" {
		t.Fatalf("outcome %+v", out)
	}
	if chat := w.chat(id); chat != "no approval within 500ms (no answer from alice)" {
		t.Errorf("chat %q", chat)
	}
	ans := w.answers(id)
	if len(ans) != 1 {
		t.Fatalf("%d answers, want one reject", len(ans))
	}
	exact(t, ans[0], `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["p-write"],"payload":{"reason":"timeout"}}`)
	exact(t, w.cancellation(ea), cancelled("alice", ea, string(rpcID(t, ea)), "timeout"))
}

// Asking again means an approver's answer may arrive twice (the lost one
// was not lost after all, or both copies of the prompt were answered). A
// signed answer sent again verifies, but counts once towards the quorum;
// and it cannot answer any other prompt, because its signature covers the
// prompt's envelope id.
func TestFaultReplayedSignedAnswerCountsOnce(t *testing.T) {
	t.Parallel()
	alicePub, alicePriv, _ := ed25519.GenerateKey(nil)
	bobPub, bobPriv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, worldOptions{keys: approval.Keys{"alice": alicePub, "bob": bobPub}, escalation: `{"approvers":["alice","bob"],"quorum":2}`})
	id := w.propose("p-write", writeCall)
	ea, eb := w.ask("alice"), w.ask("bob")
	id2 := w.propose("p-write-2", writeCall)
	ea2 := w.ask("alice")
	w.ask("bob")

	sign := func(priv ed25519.PrivateKey, prompt agent.Envelope) string {
		sig, err := approval.Sign(priv, prompt.ID, writeDigest, "accept", json.RawMessage(`{"approve":true}`))
		if err != nil {
			t.Fatal(err)
		}
		return `{"action":"accept","content":{"approve":true,"signature":"` + sig + `"}}`
	}
	aliceYes := sign(alicePriv, ea)
	w.answer("alice", ea, aliceYes)
	w.answer("alice", ea, aliceYes) // the same answer again
	poll.Until(t, "the second copy to be ignored", func() bool {
		for _, e := range w.eventsOf(elicit.EventIgnored) {
			if e.RequestID == ea.ID && e.Reason == "already answered" {
				return true
			}
		}
		return false
	})
	// Alice's answer to the first proposal, put under her prompt about the
	// second: the signature does not cover that prompt.
	w.answer("alice", ea2, aliceYes)
	poll.Until(t, "the moved answer to be refused", func() bool {
		for _, e := range w.eventsOf(elicit.EventForgery) {
			if e.RequestID == ea2.ID && e.Approver == "alice" {
				return true
			}
		}
		return false
	})
	w.marker()
	if s, ok := w.ful.Get(id); !ok || s.State != "awaiting_approval" {
		t.Fatalf("one approver's answer twice reached a quorum of 2: %+v %v", s, ok)
	}
	if s, ok := w.ful.Get(id2); !ok || s.State != "awaiting_approval" {
		t.Fatalf("an answer to another prompt counted: %+v %v", s, ok)
	}

	w.answer("bob", eb, sign(bobPriv, eb))
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	if by := w.approvedBy(id); len(by) != 2 || by[0] != "alice" || by[1] != "bob" {
		t.Errorf("approved by %v, want [alice bob]", by)
	}
}
