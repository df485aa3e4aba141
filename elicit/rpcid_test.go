package elicit_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mewkit/fulfiller/agent"
)

// docs/design.md rule 11: over a run that discovers tools, fulfils, escalates and
// cancels prompts, no peer ever receives the same JSON-RPC id twice, and
// every notifications/cancelled names the id of the request it cancels.
// (Discovery, fulfilment and elicitation used to count separately, so the
// tool server got tools/list and tools/call with the same id.)
func TestE2EJSONRPCIDsNeverRepeat(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	// Escalated: alice approves, fs gets the call, bob's prompt is cancelled.
	id := w.propose("p-write", writeCall)
	ea, eb := w.ask("alice"), w.ask("bob")
	w.answer("alice", ea, `{"action":"accept","content":{"approve":true}}`)
	if out := w.outcome(id); !out.Fulfilled {
		t.Fatalf("outcome %+v", out)
	}
	w.cancellation(eb)
	w.ask("bob") // that cancellation
	// Escalated again, then withdrawn: both prompts are cancelled.
	id2 := w.propose("p-write-2", writeCall)
	ea2, eb2 := w.ask("alice"), w.ask("bob")
	if err := w.prop.Withdraw(context.Background(), id2, "no_longer_needed"); err != nil {
		t.Fatal(err)
	}
	w.cancellation(ea2)
	w.cancellation(eb2)
	w.marker() // a read, fulfilled at once

	type sent struct{ envelope, method string }
	byPeer := map[string]map[string]sent{}  // recipient → JSON-RPC id → request
	methods := map[string]map[string]bool{} // recipient → methods it was sent
	var cancels []agent.Envelope
	for _, env := range w.wireSnapshot() {
		if env.From != "fulfiller" || env.Kind != agent.KindRequest {
			continue
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal(env.Payload, &req); err != nil {
			t.Fatalf("request payload %s: %v", env.Payload, err)
		}
		if req.Method == agent.MethodCancelled {
			cancels = append(cancels, env)
			continue
		}
		to := env.To[0]
		if byPeer[to] == nil {
			byPeer[to], methods[to] = map[string]sent{}, map[string]bool{}
		}
		if prev, dup := byPeer[to][string(req.ID)]; dup {
			t.Errorf("%s got JSON-RPC id %s twice: %s (%s) and %s (%s)", to, req.ID, prev.method, prev.envelope, req.Method, env.ID)
		}
		byPeer[to][string(req.ID)] = sent{env.ID, req.Method}
		methods[to][req.Method] = true
	}
	// The run must have exercised every kind of request, or it proves nothing.
	if !methods["fs"][agent.MethodToolsList] || !methods["fs"][agent.MethodToolsCall] || !methods["alice"][agent.MethodElicitationCreate] || !methods["alice"][agent.MethodToolsList] || len(cancels) < 3 {
		t.Fatalf("the run sent %v and %d cancellations: want discovery, fulfilment, elicitation and cancellations", methods, len(cancels))
	}
	for _, c := range cancels {
		var n struct {
			Params struct {
				RequestID json.RawMessage `json:"requestId"`
			} `json:"params"`
		}
		_ = json.Unmarshal(c.Payload, &n)
		if got := byPeer[c.To[0]][string(n.Params.RequestID)]; got.envelope != c.CorrelationID.First() {
			t.Errorf("cancellation to %s names JSON-RPC id %s, which is %+v, not request %s", c.To[0], n.Params.RequestID, got, c.CorrelationID.First())
		}
	}
}
