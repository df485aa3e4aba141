package fulfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// The tool owner of these tests answers as every participant built on the
// MEW reference SDK does (mew bridge, the template agents; recorded in the
// conformance file sdk-bridge.jsonl): {"result": …} or {"error": …}, no
// jsonrpc and no id. Before rule 12 was kept, each allowed call here ran,
// was logged as a spoof attempt, held its slot for --fulfill-timeout and
// was rejected "timeout".

// sdkPolicy fulfils the calculator's tools and the failing one.
const sdkPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "fulfill"} if input.tool.name in {"add", "multiply", "hold", "fail"}
`

// failTool fails at the protocol level, as a bridged server's JSON-RPC
// error reaches the SDK's catch.
var failTool = toolserver.Tool{Name: "fail", Description: "Fails with a JSON-RPC error", Call: func(context.Context, json.RawMessage) (string, error) {
	return "", &agent.RPCError{Code: -32603, Message: "disk on fire"}
}}

// sdkWorld is a world whose calculator answers SDK-style, with the
// fulfiller's events going to the metrics operators scrape.
func sdkWorld(t *testing.T, cfg fulfill.Config) (*world, *ops.Metrics, *recorder) {
	t.Helper()
	m := ops.NewMetrics(&ops.Source{})
	rec := &recorder{}
	cfg.Observer = fulfill.Observers{m, rec}
	if cfg.FulfillTimeout == 0 {
		// Long enough that a missed answer shows as a timeout reject
		// within the test, not as a pass.
		cfg.FulfillTimeout = 20 * time.Second
	}
	w := newWorld(t, worldOptions{policy: sdkPolicy, toolStyle: toolserver.StyleSDK, extraTools: []toolserver.Tool{failTool}, cfg: cfg})
	return w, m, rec
}

// spoofs is fulfiller_spoof_attempts_total summed over its kinds.
func spoofs(t *testing.T, m *ops.Metrics) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == "fulfiller_spoof_attempts_total" {
			for _, c := range f.GetMetric() {
				sum += c.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// request is the fulfiller's fulfilment request for proposal id.
func (w *world) request(id string) agent.Envelope {
	w.t.Helper()
	return w.onWire("the fulfilment request of "+id, func(e agent.Envelope) bool {
		return e.Kind == agent.KindRequest && e.From == "fulfiller" && e.CorrelationID.First() == id
	})
}

// toolAnswer is the calculator's answer to req.
func (w *world) toolAnswer(req agent.Envelope) agent.Envelope {
	w.t.Helper()
	return w.onWire("the tool's answer", func(e agent.Envelope) bool {
		return e.Kind == agent.KindResponse && e.From == "calculator" && e.CorrelationID.First() == req.ID
	})
}

// gone waits until the fulfiller holds nothing of proposal id: its slot
// was freed by the answer.
func (w *world) gone(id string) {
	w.t.Helper()
	poll.Until(w.t, id+" to leave the pending work", func() bool { _, ok := w.ful.Get(id); return !ok })
}

func TestE2ESDKToolFulfilled(t *testing.T) {
	t.Parallel()
	w, m, rec := sdkWorld(t, fulfill.Config{})
	id := w.propose("p-add", `{"method":"tools/call","params":{"name":"add","arguments":{"a":10,"b":5}}}`)
	out := w.outcome(id)
	if !out.Fulfilled || out.FulfilledBy != "fulfiller" || string(out.Result) != `{"content":[{"type":"text","text":"15"}]}` || out.Error != nil {
		t.Fatalf("outcome %+v result %s", out, out.Result)
	}
	req := w.request(id)
	exact(t, req, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["p-add"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":10,"b":5}}}}`)
	exact(t, w.toolAnswer(req), `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"calculator","to":["fulfiller"],"kind":"mcp/response","correlation_id":["`+req.ID+`"],"payload":{"result":{"content":[{"type":"text","text":"15"}]}}}`)
	w.gone(id)
	// The line follows the answer the proposer already has.
	poll.Until(t, "the fulfilled line", func() bool { return len(rec.at(fulfill.StageFulfilled)) > 0 })
	if f := rec.at(fulfill.StageFulfilled); len(f) != 1 || string(f[0].Result) != `{"content":[{"type":"text","text":"15"}]}` {
		t.Errorf("fulfilled events %+v", f)
	}
	if ign := rec.at(fulfill.StageIgnored); len(ign) != 0 {
		t.Errorf("the honest SDK answer was ignored: %+v", ign)
	}
	if n := spoofs(t, m); n != 0 {
		t.Errorf("fulfiller_spoof_attempts_total = %v for honest SDK answers", n)
	}
	// Nothing is cancelled at the tool owner, and nothing is rejected.
	for _, e := range w.wire.Envelopes() {
		if e.From == "fulfiller" && (e.Kind == agent.KindReject || strings.Contains(string(e.Payload), "notifications/cancelled")) {
			t.Errorf("sent after the answer: %s", e.Raw)
		}
	}
}

// A JSON-RPC error from the tool reaches the proposer as the error; the
// fulfilment is over (the request went out: no reject follows).
func TestE2ESDKToolError(t *testing.T) {
	t.Parallel()
	w, m, _ := sdkWorld(t, fulfill.Config{})
	id := w.propose("p-fail", `{"method":"tools/call","params":{"name":"fail","arguments":{}}}`)
	out := w.outcome(id)
	if !out.Fulfilled || out.Error == nil || out.Error.Code != -32603 || out.Error.Message != "disk on fire" {
		t.Fatalf("outcome %+v", out)
	}
	req := w.request(id)
	exact(t, w.toolAnswer(req), `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"calculator","to":["fulfiller"],"kind":"mcp/response","correlation_id":["`+req.ID+`"],"payload":{"error":{"code":-32603,"message":"disk on fire"}}}`)
	w.gone(id)
	if got := w.answers(id); len(got) != 1 || got[0].Kind != agent.KindRequest {
		t.Errorf("answers %v, want only the fulfilment request", got)
	}
	if n := spoofs(t, m); n != 0 {
		t.Errorf("fulfiller_spoof_attempts_total = %v", n)
	}
}

// A tool that refuses answers a result with isError, as the recorded
// filesystem server did for a path outside its directories.
func TestE2ESDKToolIsErrorResult(t *testing.T) {
	t.Parallel()
	w, _, rec := sdkWorld(t, fulfill.Config{})
	id := w.propose("p-bad", `{"method":"tools/call","params":{"name":"add","arguments":{"a":"x","b":1}}}`)
	out := w.outcome(id)
	want := `{"content":[{"type":"text","text":"bad arguments: a and b must be numbers"}],"isError":true}`
	if !out.Fulfilled || string(out.Result) != want {
		t.Fatalf("outcome %+v result %s", out, out.Result)
	}
	req := w.request(id)
	exact(t, w.toolAnswer(req), `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"calculator","to":["fulfiller"],"kind":"mcp/response","correlation_id":["`+req.ID+`"],"payload":{"result":`+want+`}}`)
	w.gone(id)
	// The line follows the answer the proposer already has.
	poll.Until(t, "the fulfilled line", func() bool { return len(rec.at(fulfill.StageFulfilled)) > 0 })
	if f := rec.at(fulfill.StageFulfilled); len(f) != 1 || string(f[0].Result) != want {
		t.Errorf("fulfilled events %+v", f)
	}
}

// Forged SDK-style answers carry no id to get wrong, so only who sent
// them tells. One from a participant the request was not sent to is not
// taken (the real answer ends the fulfilment) and is counted; one in the
// owner's name comes first and cannot be told from the real one, but the
// owner's own, different answer reveals it and is counted.
func TestE2ESDKForgedAnswers(t *testing.T) {
	t.Parallel()
	w, m, rec := sdkWorld(t, fulfill.Config{})
	mallory := spacetest.Join(t, context.Background(), w.srv, "mallory", "calc-token")

	t.Run("from a non-owner", func(t *testing.T) {
		id := w.propose("p-hold-1", `{"method":"tools/call","params":{"name":"hold","arguments":{}}}`)
		req := w.request(id)
		<-w.held
		forged, err := mallory.Send(context.Background(), agent.Envelope{To: []string{"fulfiller"}, Kind: agent.KindResponse,
			CorrelationID: agent.CorrelationIDs{req.ID}, Payload: json.RawMessage(`{"result":{"content":[{"type":"text","text":"forged"}]}}`)})
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, "the forgery to be recorded", func() bool { return len(rec.at(fulfill.StageIgnored)) == 1 })
		e := rec.at(fulfill.StageIgnored)[0]
		if e.ProposalID != id || e.Reason != fulfill.ReasonResponseFromOther || !slices.Equal(e.By, []string{"mallory"}) ||
			e.Message != fmt.Sprintf("response %s to fulfilment request %s came from mallory, not calculator", forged.ID, req.ID) {
			t.Errorf("ignored event %+v", e)
		}
		if s, ok := w.ful.Get(id); !ok || s.State != "fulfilling" {
			t.Fatalf("after the forgery: %+v %v, want still fulfilling", s, ok)
		}
		w.release <- struct{}{}
		poll.Until(t, "the real answer", func() bool { return len(rec.at(fulfill.StageFulfilled)) == 1 })
		if f := rec.at(fulfill.StageFulfilled)[0]; string(f.Result) != `{"content":[{"type":"text","text":"held"}]}` {
			t.Errorf("fulfilled with %s", f.Result)
		}
		w.gone(id)
		if n := spoofs(t, m); n != 1 {
			t.Errorf("fulfiller_spoof_attempts_total = %v, want 1", n)
		}
	})

	t.Run("in the owner's name", func(t *testing.T) {
		id := w.propose("p-hold-2", `{"method":"tools/call","params":{"name":"hold","arguments":{}}}`)
		req := w.request(id)
		<-w.held
		forge(t, w.srv.URL(), "mallory", "calc-token", `{"id":"forged-2","from":"calculator","to":["fulfiller"],"kind":"mcp/response","correlation_id":["`+req.ID+`"],"payload":{"result":{"content":[{"type":"text","text":"forged"}]}}}`)
		poll.Until(t, "the forgery to end the fulfilment", func() bool { return len(rec.at(fulfill.StageFulfilled)) == 2 })
		w.release <- struct{}{}
		poll.Until(t, "the conflict to be recorded", func() bool { return len(rec.at(fulfill.StageIgnored)) == 2 })
		e := rec.at(fulfill.StageIgnored)[1]
		if e.ProposalID != id || e.Reason != fulfill.ReasonConflictingResponse || string(e.Result) != `{"result":{"content":[{"type":"text","text":"held"}]}}` {
			t.Errorf("conflict event %+v result %s", e, e.Result)
		}
		if n := spoofs(t, m); n != 2 {
			t.Errorf("fulfiller_spoof_attempts_total = %v, want 2", n)
		}
	})
}

// Twenty calls through two fulfilment slots: each SDK answer frees its
// slot at once, so all are fulfilled well within one --fulfill-timeout,
// none is rejected and nothing is cancelled.
func TestE2ESDKFloodThroughTwoSlots(t *testing.T) {
	t.Parallel()
	w, m, rec := sdkWorld(t, fulfill.Config{MaxInflight: 2})
	var ids []string
	for i := range 20 {
		ids = append(ids, w.propose(fmt.Sprintf("p-flood-%02d", i), fmt.Sprintf(`{"method":"tools/call","params":{"name":"add","arguments":{"a":%d,"b":1}}}`, i)))
	}
	for i, id := range ids {
		out := w.outcome(id)
		if want := fmt.Sprintf(`{"content":[{"type":"text","text":"%d"}]}`, i+1); !out.Fulfilled || string(out.Result) != want {
			t.Fatalf("%s: outcome %+v result %s, want %s", id, out, out.Result, want)
		}
	}
	for _, id := range ids {
		w.gone(id)
	}
	// The line follows the answer the proposer already has.
	poll.Until(t, "20 fulfilled events", func() bool { return len(rec.at(fulfill.StageFulfilled)) == 20 })
	if r := rec.at(fulfill.StageRejected); len(r) != 0 {
		t.Errorf("rejected: %+v", r)
	}
	requests, cancels := 0, 0
	for _, e := range w.wire.Envelopes() {
		switch {
		case e.From != "fulfiller" || e.Kind != agent.KindRequest:
		case strings.Contains(string(e.Payload), `"tools/call"`):
			requests++
		case strings.Contains(string(e.Payload), "notifications/cancelled"):
			cancels++
		}
	}
	if requests != 20 || cancels != 0 || w.tools.Calls() != 20 {
		t.Errorf("%d requests, %d cancellations, %d calls run; want 20, 0, 20", requests, cancels, w.tools.Calls())
	}
	if n := spoofs(t, m); n != 0 {
		t.Errorf("fulfiller_spoof_attempts_total = %v", n)
	}
}

// Security round 3, row 6: one proposer's twenty calls to a tool that
// hangs filled all eight --max-inflight slots, and another proposer's
// calls waited 19.5 s each. Its share is now a quarter of the slots: two
// of its calls run, the rest wait their turn, and coder's call is
// fulfilled at once.
func TestE2EOneProposerCannotHoldEverySlot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{cfg: fulfill.Config{MaxInflight: 8, FulfillTimeout: time.Minute}})
	mallory := spacetest.Join(t, context.Background(), w.srv, "mallory", "coder-token")
	for i := range 20 {
		if _, err := mallory.Send(context.Background(), agent.Envelope{ID: fmt.Sprintf("m-hang-%02d", i), Kind: agent.KindProposal,
			Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"hold","arguments":{}}}`)}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "mallory's calls to be decided", func() bool {
		queued := 0
		for _, s := range w.ful.Pending() {
			if s.State == "queued" {
				queued++
			}
		}
		return queued == 18
	})
	<-w.held
	<-w.held
	id := w.propose("c-add", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`)
	if out := w.outcome(id); !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"3"}]}` {
		t.Fatalf("coder's call behind mallory's: %+v", out)
	}
	holds := 0
	for _, e := range w.wire.Envelopes() {
		if e.From == "fulfiller" && e.Kind == agent.KindRequest && strings.HasPrefix(e.CorrelationID.First(), "m-hang-") {
			holds++
		}
	}
	if holds != 2 {
		t.Errorf("%d of mallory's calls went out, want her share of 2", holds)
	}
	w.gone(id)
	if _, inflight := w.ful.Counts(); inflight != 2 {
		t.Errorf("%d slots held after coder's call was answered, want mallory's 2", inflight)
	}
}
