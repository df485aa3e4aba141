package elicit

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/poll"
)

// storeLog stands in for the fulfiller's record of one escalation (the
// pending-work store): what Escalation.RecordPrompt/RecordApproval got.
type storeLog struct {
	mu        sync.Mutex
	prompts   []state.Prompt
	approvals []state.Approval
	fail      error
}

func (s *storeLog) hook(esc *fulfill.Escalation) {
	esc.RecordPrompt = func(p state.Prompt) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fail != nil {
			return s.fail
		}
		s.prompts = append(s.prompts, p)
		return nil
	}
	esc.RecordApproval = func(a state.Approval) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fail != nil {
			return s.fail
		}
		s.approvals = append(s.approvals, a)
		return nil
	}
}

func quorumEscalation() fulfill.Escalation {
	return fulfill.Escalation{
		Proposal: agent.Envelope{ID: "p1", From: "coder"},
		Method:   "tools/call",
		Params:   json.RawMessage(`{"name":"x","arguments":{}}`),
		Decision: decision.Decision{Action: decision.Escalate, Approvers: []string{"alice", "bob"}, Quorum: 2},
		Deadline: time.Now().Add(time.Hour),
	}
}

func approve(from string, prompt agent.Envelope, rpc int64) agent.Envelope {
	return agent.Envelope{ID: "a-" + from + "-" + prompt.ID, From: from, To: []string{"fulfiller"}, Kind: agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{prompt.ID},
		Payload:       json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"action":"accept","content":{"approve":true}}}`, rpc))}
}

func waitSent(t *testing.T, c *fakeConn, n int) []agent.Envelope {
	t.Helper()
	var got []agent.Envelope
	poll.Until(t, fmt.Sprintf("%d envelopes sent", n), func() bool {
		c.mu.Lock()
		got = append([]agent.Envelope(nil), c.sent...)
		c.mu.Unlock()
		return len(got) >= n
	})
	return got
}

// Every prompt is recorded before it is sent, and each approval before it
// counts; after a restart the open prompt is asked again with the same
// envelope and JSON-RPC ids, the approval given before it counts once (its
// replay is "already answered"), and the other approver's answer to the
// copy sent before the restart completes the quorum.
func TestResumeAsksAgainWithSameIDsAndCountsApprovalsOnce(t *testing.T) {
	conn := &fakeConn{roster: []string{"alice", "bob"}}
	e := New(conn, Config{})
	defer e.Close() // at the end: until then it is as dead as a killed process
	log := &storeLog{}
	esc := quorumEscalation()
	log.hook(&esc)
	e.Escalate(context.Background(), esc, func(v fulfill.Verdict) { t.Errorf("verdict before the restart: %+v", v) })
	sent := waitSent(t, conn, 2)
	log.mu.Lock()
	if len(log.prompts) != 2 || log.prompts[0].EnvelopeID != sent[0].ID || log.prompts[1].EnvelopeID != sent[1].ID {
		t.Fatalf("recorded %+v, sent %v %v", log.prompts, sent[0].ID, sent[1].ID)
	}
	log.mu.Unlock()
	byApprover := map[string]agent.Envelope{sent[0].To[0]: sent[0], sent[1].To[0]: sent[1]}
	rpcOf := map[string]int64{}
	for _, p := range log.prompts {
		rpcOf[p.Approver] = p.RPCID
	}
	aliceAnswer := approve("alice", byApprover["alice"], rpcOf["alice"])
	e.Handle(aliceAnswer)
	poll.Until(t, "alice's approval recorded", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.approvals) == 1
	})
	// kill -9: this Elicitor is gone without a word (no Close).

	conn2 := &fakeConn{roster: []string{"alice", "bob"}}
	e2 := New(conn2, Config{})
	defer e2.Close()
	resumed := quorumEscalation()
	log.mu.Lock()
	resumed.Prompts, resumed.Approvals = log.prompts, log.approvals
	log.mu.Unlock()
	log.hook(&resumed)
	verdict := make(chan fulfill.Verdict, 1)
	e2.Escalate(context.Background(), resumed, func(v fulfill.Verdict) { verdict <- v })
	again := waitSent(t, conn2, 1)
	if len(again) != 1 || again[0].ID != byApprover["bob"].ID || again[0].To[0] != "bob" {
		t.Fatalf("asked again %v, want bob's prompt %s only", again, byApprover["bob"].ID)
	}
	if string(again[0].Payload) != string(byApprover["bob"].Payload) {
		t.Errorf("bob's prompt re-sent as\n%s\nnot byte for byte as first sent\n%s", again[0].Payload, byApprover["bob"].Payload)
	}
	var req struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(again[0].Payload, &req); err != nil || rpcOf["bob"] == 0 || req.ID != rpcOf["bob"] {
		t.Errorf("bob's prompt re-sent with JSON-RPC id %d (%v), want %d", req.ID, err, rpcOf["bob"])
	}
	e2.Handle(aliceAnswer) // replayed: already counted
	e2.Handle(approve("bob", byApprover["bob"], rpcOf["bob"]))
	select {
	case v := <-verdict:
		if !v.Approved || len(v.By) != 2 || v.By[0] != "alice" || v.By[1] != "bob" {
			t.Errorf("verdict %+v, want approved by alice and bob", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no verdict")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.approvals) != 2 {
		t.Errorf("approvals recorded %d, want 2 (alice once, bob)", len(log.approvals))
	}
}

// A prompt that cannot be recorded is not sent; the escalation ends
// "other". When the record is another member's (state.ErrConflict), the
// prompts are dropped without notifications/cancelled.
func TestPromptNotRecordedNotSent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		sent int
	}{{fmt.Errorf("store down"), 0}, {fmt.Errorf("adopted: %w", state.ErrConflict), 0}} {
		conn := &fakeConn{roster: []string{"alice", "bob"}}
		e := New(conn, Config{})
		log := &storeLog{fail: tc.err}
		esc := quorumEscalation()
		log.hook(&esc)
		verdict := make(chan fulfill.Verdict, 1)
		e.Escalate(context.Background(), esc, func(v fulfill.Verdict) { verdict <- v })
		select {
		case v := <-verdict:
			if v.Approved || v.Reason != "other" {
				t.Errorf("%v: verdict %+v, want other", tc.err, v)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no verdict")
		}
		if got := conn.payloads(); len(got) != tc.sent {
			t.Errorf("%v: sent %v", tc.err, got)
		}
		e.Close()
	}
}

// A prompt asked while its approver was keyed records so (Prompt.Signed):
// after a restart with the key removed, an unsigned answer to it still
// does not count, as it would not have before the restart. Without the
// record, the keys in force at the resume decided, and any participant
// could answer in the approver's name.
func TestResumedPromptOfAKeyedApproverStaysSigned(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	keyed := func() approval.ApproverKeys { return approval.ApproverKeys{Ed25519: approval.Keys{"alice": pub}} }
	conn := &fakeConn{roster: []string{"alice"}}
	e := New(conn, Config{CurrentKeys: keyed})
	defer e.Close()
	log := &storeLog{}
	esc := quorumEscalation()
	esc.Decision.Approvers, esc.Decision.Quorum = []string{"alice"}, 1
	log.hook(&esc)
	e.Escalate(context.Background(), esc, func(v fulfill.Verdict) { t.Errorf("verdict before the restart: %+v", v) })
	sent := waitSent(t, conn, 1)
	log.mu.Lock()
	if len(log.prompts) != 1 || !log.prompts[0].Signed {
		t.Fatalf("recorded %+v, want alice's prompt marked signed", log.prompts)
	}
	log.mu.Unlock()
	// kill -9, and alice's key removed before the restart.

	conn2 := &fakeConn{roster: []string{"alice"}}
	var events []Event
	var mu sync.Mutex
	e2 := New(conn2, Config{CurrentKeys: func() approval.ApproverKeys { return approval.ApproverKeys{} },
		Observer: func(ev Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }})
	defer e2.Close()
	resumed := esc
	log.mu.Lock()
	resumed.Prompts = log.prompts
	log.mu.Unlock()
	log.hook(&resumed)
	verdict := make(chan fulfill.Verdict, 1)
	e2.Escalate(context.Background(), resumed, func(v fulfill.Verdict) { verdict <- v })
	waitSent(t, conn2, 1) // asked again
	e2.Handle(approve("alice", sent[0], log.prompts[0].RPCID))
	poll.Until(t, "the unsigned answer ignored (or counted)", func() bool {
		if len(verdict) > 0 {
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range events {
			if ev.Kind == EventIgnored && ev.Approver == "alice" {
				return true
			}
		}
		return false
	})
	select {
	case v := <-verdict:
		t.Fatalf("verdict %+v from an unsigned answer to a signed prompt", v)
	default:
	}
}
