package elicit

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/poll"
)

// fakeConn records what the Elicitor sends; everyone in roster is online.
type fakeConn struct {
	mu     sync.Mutex
	roster []string
	sent   []agent.Envelope
	rpcSeq atomic.Int64
}

func (c *fakeConn) ID() string { return "fulfiller" }

func (c *fakeConn) NextRPCID() int64 { return c.rpcSeq.Add(1) }

func (c *fakeConn) Send(_ context.Context, env agent.Envelope) (agent.Envelope, error) {
	agent.Stamp(&env, "fulfiller", time.Now())
	c.mu.Lock()
	c.sent = append(c.sent, env)
	c.mu.Unlock()
	return env, nil
}

func (c *fakeConn) Participant(id string) (agent.Participant, bool) {
	for _, p := range c.roster {
		if p == id {
			return agent.Participant{ID: id}, true
		}
	}
	return agent.Participant{}, false
}

func (c *fakeConn) payloads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.sent {
		out = append(out, e.To[0]+" "+string(e.Payload))
	}
	return out
}

func TestNewWarnsOnceWithoutKeys(t *testing.T) {
	var logs strings.Builder
	New(&fakeConn{}, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if n := strings.Count(logs.String(), "approvals are taken on the gateway's word"); n != 1 {
		t.Errorf("warned %d times:\n%s", n, logs.String())
	}
	logs.Reset()
	New(&fakeConn{}, Config{DefaultApprovers: []string{"alice", "bob"}, Keys: approval.Keys{"alice": make([]byte, 32)}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !strings.Contains(logs.String(), `approvers without a key: their answers are taken on the gateway's word" approvers=[bob]`) {
		t.Errorf("logs:\n%s", logs.String())
	}
}

// TestNewWithAnEmptyReloadedKeysFile: a keys file that lists nobody yet
// (the team inbox before its first enrolment) is not "no keys
// configured": the warning says the file is reloaded.
func TestNewWithAnEmptyReloadedKeysFile(t *testing.T) {
	var logs strings.Builder
	New(&fakeConn{}, Config{CurrentKeys: func() approval.ApproverKeys { return approval.ApproverKeys{} }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if got := logs.String(); !strings.Contains(got, `msg="the approver keys file lists no approver yet: approvals are taken on the gateway's word until someone enrols (the file is reloaded when it changes)"`) || strings.Contains(got, "no approver keys configured") {
		t.Errorf("logs:\n%s", got)
	}
}

// TestCloseCancelsOpenPrompts: shutting the Elicitor down stops every
// escalation goroutine, tells the approvers, and reports no verdict.
func TestCloseCancelsOpenPrompts(t *testing.T) {
	conn := &fakeConn{roster: []string{"alice"}}
	e := New(conn, Config{})
	var verdicts int
	esc := fulfill.Escalation{
		Proposal: agent.Envelope{ID: "p1", From: "coder"},
		Method:   "tools/call",
		Params:   json.RawMessage(`{"name":"x"}`),
		Decision: decision.Decision{Action: decision.Escalate, Approvers: []string{"alice"}},
		Deadline: time.Now().Add(time.Hour),
	}
	e.Escalate(context.Background(), esc, func(fulfill.Verdict) { verdicts++ })
	poll.Until(t, "the prompt sent", func() bool { return len(conn.payloads()) > 0 })
	e.Close()
	got := conn.payloads()
	if len(got) != 2 || got[1] != `alice {"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"shutdown"}}` {
		t.Errorf("sent %v", got)
	}
	if verdicts != 0 || e.Open() != 0 {
		t.Errorf("%d verdicts, %d open", verdicts, e.Open())
	}
	// After Close, escalations are refused at once.
	var v fulfill.Verdict
	e.Escalate(context.Background(), esc, func(got fulfill.Verdict) { v = got })
	if v.Reason != "other" {
		t.Errorf("after Close: %+v", v)
	}
}

func TestDeadlineAlreadyPassed(t *testing.T) {
	conn := &fakeConn{roster: []string{"alice"}}
	e := New(conn, Config{})
	defer e.Close()
	got := make(chan fulfill.Verdict, 1)
	e.Escalate(context.Background(), fulfill.Escalation{
		Proposal: agent.Envelope{ID: "p1", From: "coder"}, Method: "tools/list",
		Decision: decision.Decision{Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: time.Minute},
		Deadline: time.Now().Add(-time.Second),
	}, func(v fulfill.Verdict) { got <- v })
	if v := <-got; v.Reason != "timeout" || v.Message != "no approval within 1m0s" {
		t.Errorf("verdict %+v", v)
	}
	if n := len(conn.payloads()); n != 0 {
		t.Errorf("%d envelopes sent for a prompt that could not be answered in time", n)
	}
}
