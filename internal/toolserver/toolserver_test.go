package toolserver

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

type fakeConn struct {
	sent chan agent.Envelope
	id   string // "calculator" when empty
}

func (c *fakeConn) ID() string {
	if c.id == "" {
		return "calculator"
	}
	return c.id
}
func (c *fakeConn) Send(_ context.Context, env agent.Envelope) (agent.Envelope, error) {
	c.sent <- env
	return env, nil
}

func exchange(t *testing.T, s *Server, conn *fakeConn, in chan agent.Envelope, payload string) agent.Envelope {
	t.Helper()
	in <- agent.Envelope{ID: "req-1", From: "fulfiller", To: []string{"calculator"}, Kind: agent.KindRequest, Payload: json.RawMessage(payload)}
	select {
	case env := <-conn.sent:
		if env.Kind != agent.KindResponse || !reflect.DeepEqual([]string(env.To), []string{"fulfiller"}) || env.CorrelationID.First() != "req-1" {
			t.Fatalf("response envelope %+v", env)
		}
		return env
	case <-time.After(5 * time.Second):
		t.Fatal("no response")
		return agent.Envelope{}
	}
}

func payloadEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("payload\n got %s\nwant %s", got, want)
	}
}

func TestCalculatorAnswersLikeTheRecordedOne(t *testing.T) {
	conn := &fakeConn{sent: make(chan agent.Envelope, 8)}
	s := New(conn, nil, Calculator()...)
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, in) }()
	defer func() { cancel(); <-done }()

	env := exchange(t, s, conn, in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":10,"b":5}}}`)
	payloadEqual(t, env.Payload, `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"15"}]}}`)

	env = exchange(t, s, conn, in, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"divide","arguments":{"a":1,"b":0}}}`)
	payloadEqual(t, env.Payload, `{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool: divide"}}`)

	env = exchange(t, s, conn, in, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"add","arguments":{"a":"x"}}}`)
	payloadEqual(t, env.Payload, `{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"bad arguments: a and b must be numbers"}],"isError":true}}`)

	env = exchange(t, s, conn, in, `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}`)
	var list struct {
		Result struct {
			Tools []struct {
				Name        string         `json:"name"`
				Annotations map[string]any `json:"annotations"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(env.Payload, &list); err != nil || len(list.Result.Tools) != 2 || list.Result.Tools[0].Name != "add" || list.Result.Tools[0].Annotations["readOnlyHint"] != true {
		t.Errorf("tools/list = %s", env.Payload)
	}
	if s.Calls() != 2 {
		t.Errorf("Calls() = %d, want 2 (add, and add with bad arguments)", s.Calls())
	}
}
