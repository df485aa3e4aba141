package elicit

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/poll"
)

// queueingConn is a connection whose link is down: SendOrQueue keeps what
// it is given (as *agent.Client does until the reconnect).
type queueingConn struct {
	fakeConn
	kept []agent.Envelope
}

func (c *queueingConn) SendOrQueue(_ context.Context, env agent.Envelope) (agent.Envelope, bool, error) {
	agent.Stamp(&env, "fulfiller", time.Now())
	c.mu.Lock()
	c.kept = append(c.kept, env)
	c.mu.Unlock()
	return env, true, nil
}

// A prompt's cancellation goes through the connection's outbox when it
// has one, so that one due while the link is down is sent after the
// reconnect instead of being lost (the outbox itself is tested in agent).
func TestPromptCancellationKeptWhileLinkIsDown(t *testing.T) {
	conn := &queueingConn{fakeConn: fakeConn{roster: []string{"alice"}}}
	e := New(conn, Config{})
	esc := fulfill.Escalation{
		Proposal: agent.Envelope{ID: "p1", From: "coder"},
		Method:   "tools/call",
		Params:   json.RawMessage(`{"name":"x"}`),
		Decision: decision.Decision{Action: decision.Escalate, Approvers: []string{"alice"}},
		Deadline: time.Now().Add(time.Hour),
	}
	e.Escalate(context.Background(), esc, func(fulfill.Verdict) {})
	poll.Until(t, "the prompt sent", func() bool { return len(conn.payloads()) > 0 })
	conn.mu.Lock()
	prompt := conn.sent[0]
	conn.mu.Unlock()
	e.Cancel("p1", "withdrawn")
	e.Close()
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if len(conn.kept) != 1 || len(conn.sent) != 1 {
		t.Fatalf("kept %d, sent %d; want the cancellation kept and only the prompt sent", len(conn.kept), len(conn.sent))
	}
	k := conn.kept[0]
	if k.To[0] != "alice" || k.CorrelationID.First() != prompt.ID || string(k.Payload) != `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"withdrawn"}}` {
		t.Errorf("kept %s to %v correlated %v", k.Payload, k.To, k.CorrelationID)
	}
}
