package fulfill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/internal/clocktest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// wireRec is the shell's side of a wire under test: what its journal
// and observers heard.
type wireRec struct {
	mu         sync.Mutex
	writes     []string
	undelivers []string
	observed   []Event
	methods    map[string]string
}

func (r *wireRec) written(proposalID, envelopeID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, proposalID+" "+envelopeID)
}

func (r *wireRec) undelivered(proposalID, kind, reason, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.undelivers = append(r.undelivers, proposalID+" "+kind+" "+reason)
}

func (r *wireRec) observe(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observed = append(r.observed, ev)
}

func (r *wireRec) heard() (writes, undelivers []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes), slices.Clone(r.undelivers)
}

// newTestWire is a wire over space whose hooks are a wireRec's;
// proposals call tools/call unless rec.methods says otherwise.
func newTestWire(t *testing.T, space Space) (*wire, *wireRec) {
	t.Helper()
	rec := &wireRec{methods: map[string]string{}}
	hooks := wireHooks{
		events: rec,
		method: func(id string) string {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if m, ok := rec.methods[id]; ok {
				return m
			}
			return agent.MethodToolsCall
		},
	}
	w := newWire(space, wireConfig{FulfillTimeout: 5 * time.Second}, nil)
	w.hooks = hooks
	return w, rec
}

var stamped = regexp.MustCompile(`"ts":"[^"]*"`)

// onWire is env as the gateway gets it, its ts (the time of the write)
// blanked, and its id too when minted is set (an envelope whose id the
// link mints).
func onWire(t *testing.T, env agent.Envelope, minted bool) string {
	t.Helper()
	if minted {
		if env.ID == "" {
			t.Errorf("envelope without an id: %+v", env)
		}
		env.ID = "*"
	}
	b, err := agent.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	return stamped.ReplaceAllString(string(b), `"ts":"*"`)
}

// sameOnWire checks that the wire, driven alone, wrote what a whole
// Fulfiller (the harness) writes in the same case, byte for byte.
func sameOnWire(t *testing.T, what string, got, want agent.Envelope, minted bool) {
	t.Helper()
	if g, w := onWire(t, got, minted), onWire(t, want, minted); g != w {
		t.Errorf("%s:\n got %s\nwant %s (the Fulfiller's)", what, g, w)
	}
}

func literalOnWire(t *testing.T, what string, got agent.Envelope, minted bool, want string) {
	t.Helper()
	if g := onWire(t, got, minted); g != want {
		t.Errorf("%s:\n got %s\nwant %s", what, g, want)
	}
}

// failingSpace fails every Send with err.
type failingSpace struct {
	*fakeSpace
	err error
}

func (s *failingSpace) Send(context.Context, agent.Envelope) (agent.Envelope, error) {
	return agent.Envelope{}, s.err
}

// queueSpace is a Space with a Queuer: what went through SendOrQueue.
type queueSpace struct {
	*fakeSpace
	queued chan agent.Envelope
}

func (s *queueSpace) SendOrQueue(_ context.Context, env agent.Envelope) (agent.Envelope, bool, error) {
	agent.Stamp(&env, s.id, time.Now())
	s.queued <- env
	return env, true, nil
}

// The reject and its explanation, as the Fulfiller writes them for a
// policy's deny; the journal hears of the reject once it is written,
// and a refusal by the gateway is reported undelivered.
func TestWireRejectAsTheFulfiller(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", `{"method":"tools/call","params":{"name":"sub","arguments":{}}}`))
	oldReject, oldChat := h.space.next(t), h.space.next(t)

	space := newFakeSpace()
	w, rec := newTestWire(t, space)
	if err := w.SendReject(t.Context(), lifecycle.SendReject{ID: "p1", To: "coder", EnvelopeID: oldReject.ID, Reason: "policy", Message: "default deny"}); err != nil {
		t.Fatalf("SendReject: %v", err)
	}
	reject, chat := space.next(t), space.next(t)
	sameOnWire(t, "reject", reject, oldReject, false)
	sameOnWire(t, "its explanation", chat, oldChat, true)
	literalOnWire(t, "reject", reject, false, `{"protocol":"mew/v0.4","id":"`+oldReject.ID+`","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["p1"],"payload":{"reason":"policy"}}`)
	literalOnWire(t, "its explanation", chat, true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"chat","correlation_id":["`+oldReject.ID+`"],"payload":{"text":"default deny","format":"plain"}}`)
	writes, undelivered := rec.heard()
	if !slices.Equal(writes, []string{"p1 " + oldReject.ID}) || len(undelivered) != 0 {
		t.Errorf("journal heard written %v, undelivered %v", writes, undelivered)
	}

	// The gateway refuses it afterwards.
	refusal := agent.Envelope{ID: "err-1", From: agent.GatewayID, To: []string{"fulfiller"}, Kind: agent.KindError, CorrelationID: agent.CorrelationIDs{oldReject.ID},
		Payload: json.RawMessage(`{"error":"capability_violation","attempted_kind":"mcp/reject"}`)}
	pid, kind, ok := w.refused(t.Context(), refusal)
	if !ok || pid != "p1" || kind != agent.KindReject {
		t.Fatalf("refused = %q %q %v, want p1's reject", pid, kind, ok)
	}
	if _, undelivered := rec.heard(); !slices.Equal(undelivered, []string{"p1 mcp/reject refused"}) {
		t.Errorf("undelivered %v", undelivered)
	}
	if _, _, ok := w.refused(t.Context(), refusal); ok {
		t.Error("the same refusal was reported twice")
	}
	// A refusal of something the wire did not write, or not from the
	// gateway, is not the wire's.
	other := refusal
	other.CorrelationID = agent.CorrelationIDs{"someone-elses"}
	forged := refusal
	forged.From = "coder"
	for _, env := range []agent.Envelope{other, forged} {
		if _, _, ok := w.refused(t.Context(), env); ok {
			t.Errorf("refused(%s) reported", env.CorrelationID)
		}
	}

	// Without a message, nothing follows the reject.
	if err := w.SendReject(t.Context(), lifecycle.SendReject{ID: "p2", To: "coder", EnvelopeID: "rej-2", Reason: "busy"}); err != nil {
		t.Fatal(err)
	}
	literalOnWire(t, "reject without a message", space.next(t), false, `{"protocol":"mew/v0.4","id":"rej-2","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["p2"],"payload":{"reason":"busy"}}`)
	space.quiet(t, 20*time.Millisecond)
}

// A reject that cannot be written is the effect's error (the core
// writes it again), reported undelivered, and no longer refusable.
func TestWireRejectNotWritten(t *testing.T) {
	t.Parallel()
	space := &failingSpace{fakeSpace: newFakeSpace(), err: errors.New("link down")}
	w, rec := newTestWire(t, space)
	err := w.SendReject(t.Context(), lifecycle.SendReject{ID: "p1", To: "coder", EnvelopeID: "rej-1", Reason: "policy", Message: "no"})
	if err == nil || !errors.Is(err, space.err) {
		t.Fatalf("SendReject = %v, want the write's error", err)
	}
	writes, undelivered := rec.heard()
	if len(writes) != 0 || !slices.Equal(undelivered, []string{"p1 mcp/reject not_written"}) {
		t.Errorf("written %v, undelivered %v", writes, undelivered)
	}
	refusal := agent.Envelope{ID: "err-1", From: agent.GatewayID, To: []string{"fulfiller"}, Kind: agent.KindError, CorrelationID: agent.CorrelationIDs{"rej-1"},
		Payload: json.RawMessage(`{"error":"capability_violation"}`)}
	if _, _, ok := w.refused(t.Context(), refusal); ok {
		t.Error("a reject never written was reported refused")
	}
}

// The fulfilment request, as the Fulfiller writes it: the proposal's
// method and params, correlated to the proposal, with the recorded ids.
func TestWireRequestAsTheFulfiller(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},"task":{"ttl":5},"_meta":{"progressToken":1}}}`))
	old := h.space.next(t)

	space := newFakeSpace()
	w, rec := newTestWire(t, space)
	err := w.SendRequest(t.Context(), lifecycle.SendRequest{ID: "p1", To: "calculator", EnvelopeID: old.ID, RPCID: rpcID(t, old),
		Params: json.RawMessage(`{"name":"add","arguments":{"a":1,"b":2},"task":{"ttl":5},"_meta":{"progressToken":1}}`), TaskTTL: time.Hour})
	if err != nil {
		t.Fatalf("SendRequest: %v", err)
	}
	req := space.next(t)
	sameOnWire(t, "fulfilment request", req, old, false)
	// The proposer's own task is left out (a proposer cannot follow one).
	literalOnWire(t, "fulfilment request", req, false, fmt.Sprintf(`{"protocol":"mew/v0.4","id":"%s","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["p1"],"payload":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},"_meta":{"progressToken":1}}}}`, old.ID, rpcID(t, old)))

	// Another method goes out with its params as they are.
	space.setPresent("files", true)
	rec.methods["p2"] = "resources/read"
	if err := w.SendRequest(t.Context(), lifecycle.SendRequest{ID: "p2", To: "files", EnvelopeID: "req-2", RPCID: 12, Params: json.RawMessage(`{"uri":"file:///a","task":{"ttl":5}}`)}); err != nil {
		t.Fatal(err)
	}
	literalOnWire(t, "resources/read", space.next(t), false, `{"protocol":"mew/v0.4","id":"req-2","ts":"*","from":"fulfiller","to":["files"],"kind":"mcp/request","correlation_id":["p2"],"payload":{"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":"file:///a","task":{"ttl":5}}}}`)
	writes, _ := rec.heard()
	if !slices.Equal(writes, []string{"p1 " + old.ID, "p2 req-2"}) {
		t.Errorf("written %v", writes)
	}

	// A refused request is the wire's to report; the shell ends the
	// proposal.
	refusal := agent.Envelope{ID: "err-1", From: agent.GatewayID, To: []string{"fulfiller"}, Kind: agent.KindError, CorrelationID: agent.CorrelationIDs{"req-2"},
		Payload: json.RawMessage(`{"error":"capability_violation"}`)}
	if pid, kind, ok := w.refused(t.Context(), refusal); !ok || pid != "p2" || kind != agent.KindRequest {
		t.Errorf("refused = %q %q %v", pid, kind, ok)
	}
	if _, undelivered := rec.heard(); !slices.Equal(undelivered, []string{"p2 mcp/request refused"}) {
		t.Errorf("undelivered %v", undelivered)
	}
}

// A write the link lost midway may have reached the owner: it counts
// as written. Any other failure is the effect's error.
func TestWireRequestSessionLost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err         error
		wantErr     bool
		written     []string
		undelivered []string
	}{
		{fmt.Errorf("write: %w", agent.ErrSessionLost), false, []string{"p1 req-1"}, nil},
		{errors.New("link down"), true, nil, []string{"p1 mcp/request not_written"}},
	} {
		w, rec := newTestWire(t, &failingSpace{fakeSpace: newFakeSpace(), err: c.err})
		err := w.SendRequest(t.Context(), lifecycle.SendRequest{ID: "p1", To: "calculator", EnvelopeID: "req-1", RPCID: 1, Params: json.RawMessage(`{"name":"add"}`)})
		if (err != nil) != c.wantErr || (err != nil && !errors.Is(err, c.err)) {
			t.Errorf("%v: SendRequest = %v", c.err, err)
		}
		if writes, undelivered := rec.heard(); !slices.Equal(writes, c.written) || !slices.Equal(undelivered, c.undelivered) {
			t.Errorf("%v: written %v, undelivered %v", c.err, writes, undelivered)
		}
	}
}

// The cancellation at the tool owner, as the Fulfiller writes it at the
// fulfil timeout; through the Queuer when the Space has one.
func TestWireCancelAsTheFulfiller(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	h := newHarness(t, Config{FulfillTimeout: 30 * time.Second, PendingTTL: time.Hour, Clock: clock}, &fakeDecider{decisions: fulfilAdd})
	h.deliver(proposalEnv("p1", "coder", addCall))
	req := h.space.next(t)
	if !clock.WaitArmed(2, poll.Limit) {
		t.Fatal("the fulfil timeout was not armed")
	}
	clock.Advance(30 * time.Second)
	old := h.space.next(t)

	space := newFakeSpace()
	w, _ := newTestWire(t, space)
	c := lifecycle.SendCancel{ID: "p1", To: "calculator", RequestEnvelopeID: req.ID, RPCID: rpcID(t, req), Reason: "timeout"}
	w.SendCancel(t.Context(), c)
	got := space.next(t)
	sameOnWire(t, "cancellation", got, old, true)
	literalOnWire(t, "cancellation", got, true, fmt.Sprintf(`{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["%s"],"payload":{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"timeout"}}}`, req.ID, rpcID(t, req)))

	qs := &queueSpace{fakeSpace: newFakeSpace(), queued: make(chan agent.Envelope, 1)}
	qw, _ := newTestWire(t, qs)
	qw.SendCancel(t.Context(), c)
	select {
	case env := <-qs.queued:
		sameOnWire(t, "queued cancellation", env, old, true)
	default:
		t.Fatal("the cancellation did not go through the Queuer")
	}
	qs.quiet(t, 10*time.Millisecond)
}

// Status chats, as the Fulfiller writes them for an escalation and a
// queued fulfilment; the proposer's deadline hint and the
// impersonation chat.
func TestWireStatusAsTheFulfiller(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	dec := &fakeDecider{decisions: map[string]decision.Decision{
		"add": {Action: decision.Escalate, Approvers: []string{"alice", "bob"}, Quorum: 2, Timeout: time.Minute},
	}}
	hs := newFakeSpace()
	hs.setPresent("alice", true)
	hs.setPresent("bob", true)
	h := newHarnessOn(t, hs, Config{StatusChats: true, Approvals: testApprovals(), Clock: clock}, dec)
	h.deliver(proposalEnv("p1", "coder", addCall))
	var oldEscalated agent.Envelope
	for oldEscalated.Kind != agent.KindChat { // beside the prompts to alice and bob
		oldEscalated = h.space.next(t)
	}

	space := newFakeSpace()
	w, _ := newTestWire(t, space)
	w.Status(t.Context(), lifecycle.Status{ID: "p1", To: "coder", Stage: lifecycle.StatusEscalated, Approvers: []string{"alice", "bob"}, Quorum: 2, Deadline: clock.Now().Add(time.Minute)})
	got := space.next(t)
	sameOnWire(t, "escalated status chat", got, oldEscalated, true)
	literalOnWire(t, "escalated status chat", got, true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"chat","correlation_id":["p1"],"payload":{"text":"Waiting for approval by alice, bob (2 needed) until 2026-11-27T03:01:00Z.","format":"plain","_meta":{"fulfiller/status":{"v":1,"proposal":"p1","stage":"escalated","approvers":["alice","bob"],"quorum":2,"deadline":"2026-11-27T03:01:00Z"}}}}`)

	w.Status(t.Context(), lifecycle.Status{ID: "p2", To: "coder", Stage: lifecycle.StatusQueued})
	literalOnWire(t, "queued status chat", space.next(t), true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"chat","correlation_id":["p2"],"payload":{"text":"Allowed; waiting for a free fulfilment slot.","format":"plain","_meta":{"fulfiller/status":{"v":1,"proposal":"p2","stage":"queued"}}}}`)

	// A deadline the proposer's hint set says so (the escalation's
	// decision records it).
	p := escalatedProposal(t, "p3", true)
	w.Status(t.Context(), lifecycle.Status{ID: "p3", To: "coder", Stage: lifecycle.StatusEscalated, Decision: p.Decision, Approvers: []string{"alice"}, Quorum: 1, Deadline: clock.Now().Add(30 * time.Second)})
	literalOnWire(t, "hinted status chat", space.next(t), true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"chat","correlation_id":["p3"],"payload":{"text":"Waiting for approval by alice (1 needed) until 2026-11-27T03:00:30Z.","format":"plain","_meta":{"fulfiller/status":{"v":1,"proposal":"p3","stage":"escalated","approvers":["alice"],"quorum":1,"deadline":"2026-11-27T03:00:30Z","deadline_by":"proposer"}}}}`)

	w.impersonated(t.Context(), "p1", "coder", agent.Envelope{ID: "forged-1", Kind: agent.KindReject})
	literalOnWire(t, "impersonation chat", space.next(t), true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"chat","correlation_id":["p1"],"payload":{"text":"The mcp/reject in fulfiller's name (envelope forged-1) was not sent by fulfiller: someone else wrote it. Your proposal is still pending; fulfiller's answer follows.","format":"plain","_meta":{"fulfiller/status":{"v":1,"proposal":"p1","stage":"impersonated","forged":"forged-1","forged_kind":"mcp/reject"}}}}`)
}

// A task-augmented fulfilment end to end, as the Fulfiller writes it
// (2025-11-25: tasks/result read at the end): the request, the task's
// status chat, the follower's TaskEnded with the call's result, and the
// relay to the proposer.
func TestWireTaskAsTheFulfiller(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC))
	handle := `{"task":{"taskId":"T1","status":"working","pollInterval":100}}`
	answer := func(req agent.RPCRequest) (agent.RPCResponse, error) {
		switch req.Method {
		case "tasks/get":
			return agent.RPCResponse{Result: json.RawMessage(`{"taskId":"T1","status":"completed","createdAt":"2026-11-27T03:00:00Z"}`)}, nil
		case "tasks/result":
			return agent.RPCResponse{Result: json.RawMessage(`{"content":[{"type":"text","text":"migrated"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"T1"}}}`)}, nil
		}
		return agent.RPCResponse{}, fmt.Errorf("unexpected %s", req.Method)
	}
	taskSpace := func() *fakeSpace {
		s := newFakeSpace()
		s.tools["calculator"] = append(s.tools["calculator"], ToolInfo{Name: "migrate", Description: "runs as an MCP task", Execution: json.RawMessage(`{"taskSupport":"required"}`)})
		s.taskAnswer = answer
		return s
	}
	h := newHarnessOn(t, taskSpace(), Config{StatusChats: true, TaskTimeout: time.Minute, Clock: clock}, &fakeDecider{decisions: map[string]decision.Decision{"migrate": {Action: decision.Fulfill}}})
	h.deliver(proposalEnv("job", "coder", callOf("migrate")))
	oldReq := h.space.next(t)
	h.deliver(agent.Envelope{ID: "resp-1", From: "calculator", To: []string{"fulfiller"}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{oldReq.ID},
		Payload: json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":%s}`, rpcID(t, oldReq), handle))})
	oldStatus, oldRelay, oldResp := h.space.next(t), h.space.next(t), h.space.next(t)

	space := taskSpace()
	w, rec := newTestWire(t, space)
	params := json.RawMessage(`{"name":"migrate","arguments":{"a":1}}`)
	if err := w.SendRequest(t.Context(), lifecycle.SendRequest{ID: "job", To: "calculator", EnvelopeID: oldReq.ID, RPCID: rpcID(t, oldReq), Params: params, Task: true, TaskTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	req := space.next(t)
	sameOnWire(t, "task-augmented request", req, oldReq, false)
	literalOnWire(t, "task-augmented request", req, false, fmt.Sprintf(`{"protocol":"mew/v0.4","id":"%s","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","payload":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"migrate","arguments":{"a":1},"task":{"ttl":60000},"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}}`, oldReq.ID, rpcID(t, oldReq)))

	// The reader read the handle; the core recorded the task and asks
	// for its status chat.
	if !w.taskCreated("calculator", json.RawMessage(handle), clock.Now()) {
		t.Fatal("the task handle was not taken for one")
	}
	if w.taskCreated("calculator", json.RawMessage(`{"content":[]}`), clock.Now()) {
		t.Error("a plain result was taken for a task handle")
	}
	w.Status(t.Context(), lifecycle.Status{ID: "job", To: "coder", Stage: lifecycle.StatusTask, Deadline: clock.Now().Add(time.Minute), Target: "calculator", TaskID: "T1", TaskStatus: "working"})
	status := space.next(t)
	sameOnWire(t, "task status chat", status, oldStatus, true)
	literalOnWire(t, "task status chat", status, true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"chat","correlation_id":["job"],"payload":{"text":"Running as task T1 at calculator (working) until 2026-11-27T03:01:00Z.","format":"plain","_meta":{"fulfiller/status":{"v":1,"proposal":"job","stage":"task","deadline":"2026-11-27T03:01:00Z","task":{"id":"T1","spec":"2025-11-25","status":"working","created":"2026-11-27T03:00:00Z","deadline":"2026-11-27T03:01:00Z"}}}}}`)

	var reports []lifecycle.Event
	w.FollowTask(t.Context(), lifecycle.FollowTask{ID: "job", To: "calculator", TaskID: "T1", RequestEnvelopeID: req.ID, Deadline: clock.Now().Add(time.Minute)},
		func(ev lifecycle.Event) { reports = append(reports, ev) })
	if len(reports) != 1 {
		t.Fatalf("follower reported %v, want its end", reports)
	}
	ended, ok := reports[0].(lifecycle.TaskEnded)
	if !ok || ended.ID != "job" || ended.TaskID != "T1" || ended.Status != "completed" || ended.Gone != "" || ended.Error != nil ||
		string(ended.Result) != `{"content":[{"type":"text","text":"migrated"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"T1"}}}` {
		t.Fatalf("follower reported %+v", reports[0])
	}

	if err := w.SendRelay(t.Context(), lifecycle.SendRelay{ID: "job", To: "coder", EnvelopeID: oldRelay.ID, RPCID: rpcID(t, oldRelay), TaskID: "T1", Result: ended.Result}); err != nil {
		t.Fatal(err)
	}
	relay, resp := space.next(t), space.next(t)
	sameOnWire(t, "relay request", relay, oldRelay, false)
	sameOnWire(t, "relayed result", resp, oldResp, true)
	literalOnWire(t, "relay request", relay, false, fmt.Sprintf(`{"protocol":"mew/v0.4","id":"%s","ts":"*","from":"fulfiller","to":["fulfiller"],"kind":"mcp/request","correlation_id":["job"],"payload":{"jsonrpc":"2.0","id":%d,"method":"tasks/result","params":{"taskId":"T1"}}}`, oldRelay.ID, rpcID(t, oldRelay)))
	literalOnWire(t, "relayed result", resp, true, fmt.Sprintf(`{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/response","correlation_id":["%s"],"payload":{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"migrated"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"T1"}}}}}`, oldRelay.ID, rpcID(t, oldRelay)))
	writes, _ := rec.heard()
	if !slices.Equal(writes, []string{"job " + oldReq.ID, "job " + oldRelay.ID}) {
		t.Errorf("written %v", writes)
	}
}

// An error relayed, and a relay without a result; tasks/cancel.
func TestWireRelayErrorAndTaskCancel(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	w, _ := newTestWire(t, space)
	if err := w.SendRelay(t.Context(), lifecycle.SendRelay{ID: "job", To: "coder", EnvelopeID: "rel-1", RPCID: 7, TaskID: "T1", Error: json.RawMessage(`{"code":-32603,"message":"task T1 was cancelled at calculator"}`)}); err != nil {
		t.Fatal(err)
	}
	space.next(t)
	literalOnWire(t, "relayed error", space.next(t), true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/response","correlation_id":["rel-1"],"payload":{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"task T1 was cancelled at calculator"}}}`)
	// The owner answered the task-augmented call without a task, and
	// with nothing: relayed as an empty result.
	if err := w.SendRelay(t.Context(), lifecycle.SendRelay{ID: "job2", To: "coder", EnvelopeID: "rel-2", RPCID: 8}); err != nil {
		t.Fatal(err)
	}
	literalOnWire(t, "relay without a task", space.next(t), false, `{"protocol":"mew/v0.4","id":"rel-2","ts":"*","from":"fulfiller","to":["fulfiller"],"kind":"mcp/request","correlation_id":["job2"],"payload":{"jsonrpc":"2.0","id":8,"method":"tasks/result","params":{"taskId":""}}}`)
	literalOnWire(t, "empty result", space.next(t), true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/response","correlation_id":["rel-2"],"payload":{"jsonrpc":"2.0","id":8,"result":{}}}`)

	w.CancelTask(t.Context(), lifecycle.CancelTask{ID: "job", To: "calculator", TaskID: "T1", RequestEnvelopeID: "req-1", Reason: "withdrawn"})
	literalOnWire(t, "tasks/cancel", space.next(t), true, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["req-1"],"payload":{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"T1"}}}`)

	// A relay whose request cannot be written is the effect's error.
	fw, rec := newTestWire(t, &failingSpace{fakeSpace: newFakeSpace(), err: errors.New("link down")})
	if err := fw.SendRelay(t.Context(), lifecycle.SendRelay{ID: "job", To: "coder", EnvelopeID: "rel-1", RPCID: 7}); err == nil {
		t.Error("SendRelay of an unwritten relay succeeded")
	}
	if writes, undelivered := rec.heard(); len(writes) != 0 || !slices.Equal(undelivered, []string{"job mcp/request not_written"}) {
		t.Errorf("written %v, undelivered %v", writes, undelivered)
	}
}

// taskOwner answers tasks/get from a script of states, counting asks.
type taskOwner struct {
	mu     sync.Mutex
	states []string // tasks/get results, the last repeated
	asks   atomic.Int32
	asked  chan struct{}
}

func (o *taskOwner) answer(req agent.RPCRequest) (agent.RPCResponse, error) {
	if req.Method != "tasks/get" {
		return agent.RPCResponse{}, fmt.Errorf("unexpected %s", req.Method)
	}
	o.asks.Add(1)
	select {
	case o.asked <- struct{}{}:
	default:
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.states[0]
	if len(o.states) > 1 {
		o.states = o.states[1:]
	}
	if s == "gone" {
		return agent.RPCResponse{Error: &agent.RPCError{Code: codeTaskNotFound, Message: "unknown task T1"}}, nil
	}
	return agent.RPCResponse{Result: json.RawMessage(s)}, nil
}

func followOnce(t *testing.T, w *wire, owner *taskOwner) []lifecycle.Event {
	t.Helper()
	var reports []lifecycle.Event
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.FollowTask(t.Context(), lifecycle.FollowTask{ID: "job", To: "calculator", TaskID: "T1", RequestEnvelopeID: "req-1"},
			func(ev lifecycle.Event) { reports = append(reports, ev) })
	}()
	select {
	case <-done:
	case <-time.After(poll.Limit):
		t.Fatal("the follower never ended")
	}
	return reports
}

// The follower (extension revision, a task followed again after a
// restart, so nothing known of its handle): each new status once, the
// inline result at the end; a failed task without an error gets one; a
// task its owner forgot is Gone.
func TestWireFollowTask(t *testing.T) {
	t.Parallel()
	ext := func(status, extra string) string {
		return `{"resultType":"complete","taskId":"T1","status":"` + status + `","pollIntervalMs":1` + extra + `}`
	}
	for _, c := range []struct {
		name   string
		states []string
		want   []lifecycle.Event
	}{
		{"completed", []string{ext("working", ""), ext("input_required", `,"statusMessage":"needs a key"`), ext("input_required", ""), ext("completed", `,"result":{"content":[]}`)},
			[]lifecycle.Event{
				lifecycle.TaskStatus{ID: "job", TaskID: "T1", Status: "working"},
				lifecycle.TaskStatus{ID: "job", TaskID: "T1", Status: "input_required", Message: "needs a key"},
				lifecycle.TaskEnded{ID: "job", TaskID: "T1", Status: "completed", Result: json.RawMessage(`{"content":[]}`)},
			}},
		{"failed", []string{ext("failed", `,"statusMessage":"rate limit"`)},
			[]lifecycle.Event{lifecycle.TaskEnded{ID: "job", TaskID: "T1", Status: "failed", Error: json.RawMessage(`{"code":-32603,"message":"task T1 failed at calculator: rate limit"}`)}}},
		{"failed with its error", []string{ext("failed", `,"error":{"code":-32000,"message":"boom"}`)},
			[]lifecycle.Event{lifecycle.TaskEnded{ID: "job", TaskID: "T1", Status: "failed", Error: json.RawMessage(`{"code":-32000,"message":"boom"}`)}}},
		{"cancelled", []string{ext("cancelled", "")},
			[]lifecycle.Event{lifecycle.TaskEnded{ID: "job", TaskID: "T1", Status: "cancelled", Error: json.RawMessage(`{"code":-32603,"message":"task T1 was cancelled at calculator"}`)}}},
		{"gone", []string{ext("input_required", ""), "gone"},
			[]lifecycle.Event{lifecycle.TaskStatus{ID: "job", TaskID: "T1", Status: "input_required"}, lifecycle.TaskEnded{ID: "job", TaskID: "T1", Gone: "task not found: unknown task T1"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			space := newFakeSpace()
			owner := &taskOwner{states: c.states, asked: make(chan struct{}, 1)}
			space.taskAnswer = owner.answer
			w, _ := newTestWire(t, space)
			if c.name != "completed" {
				// Handed over by the reader (the others: followed again
				// after a restart, nothing known but what tasks/get says).
				w.taskCreated("calculator", json.RawMessage(`{"resultType":"task","taskId":"T1","status":"working","pollIntervalMs":1}`), time.Now())
			}
			got := followOnce(t, w, owner)
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
				t.Errorf("reported\n %+v\nwant\n %+v", got, c.want)
			}
		})
	}
}

// A status notification from the owner, about our task, addressed to
// us, makes the follower ask at once (the owner suggests 30 s); one in
// someone else's name, or about another task, does not.
func TestWireTaskNoticeWakesTheFollower(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	owner := &taskOwner{states: []string{`{"taskId":"T1","status":"working","pollInterval":30000}`}, asked: make(chan struct{}, 1)}
	space.taskAnswer = owner.answer
	w, _ := newTestWire(t, space)
	w.taskCreated("calculator", json.RawMessage(`{"task":{"taskId":"T1","status":"working","pollInterval":30000}}`), time.Now())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.FollowTask(ctx, lifecycle.FollowTask{ID: "job", To: "calculator", TaskID: "T1", RequestEnvelopeID: "req-1"}, func(lifecycle.Event) {})
	}()
	defer func() { cancel(); <-done }()
	notice := func(from, task string) agent.Envelope {
		return agent.Envelope{ID: "n-" + from, From: from, To: []string{"fulfiller"}, Kind: agent.KindRequest,
			Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"` + task + `","status":"completed"}}`)}
	}
	poll.Until(t, "the follower is registered", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.followers[taskKey("calculator", "T1")] != nil
	})
	for _, env := range []agent.Envelope{notice("mallory", "T1"), notice("calculator", "T2")} {
		if w.taskNotice(env) {
			t.Errorf("notice from %s about %s taken", env.From, env.Payload)
		}
	}
	select {
	case <-owner.asked:
		t.Fatal("the owner was asked before its poll interval, without a notice of its own")
	case <-time.After(200 * time.Millisecond):
	}
	if !w.taskNotice(notice("calculator", "T1")) {
		t.Fatal("the owner's notice was not taken")
	}
	select {
	case <-owner.asked:
	case <-time.After(poll.Limit):
		t.Fatal("the notice did not make the follower ask")
	}
}

// escalatedProposal is proposal id as the core holds it once escalated
// to alice, with a grant on offer; hinted: the proposer's deadline
// hint set its deadline.
func escalatedProposal(t *testing.T, id string, hinted bool) lifecycle.Proposal {
	t.Helper()
	frame := `{"protocol":"mew/v0.4","id":"` + id + `","ts":"2026-11-27T03:00:00Z","from":"coder","kind":"mcp/proposal","payload":` + addCall + `}`
	d := decision.Decision{Action: decision.Escalate, Approvers: []string{"alice"}, Timeout: time.Minute, Revision: "rev-1",
		Grantable: &decision.Grantable{MaxTTL: time.Hour, Scope: []decision.GrantField{{Path: "tool"}, {Path: "arguments.a"}}}}
	cd := coreDecision(d, "calculator", hinted)
	return lifecycle.Proposal{ID: id, From: "coder", Envelope: json.RawMessage(frame), Params: json.RawMessage(`{"name":"add","arguments":{"a":1,"b":2}}`),
		Method: "tools/call", Tool: "add", Phase: lifecycle.AwaitingApproval, DecisionID: "dec-" + id, Decision: &cd}
}

// CreateGrant makes the grant the approver chose, pinned to the call
// committed (the edited one when edited): the proposer's, the route's,
// the params sent, with the signed answer as its evidence; its id is the
// proposal's, so the same grant made again after a crash is not a
// second; StageGranted says so.
func TestEngineWireCreateGrant(t *testing.T) {
	t.Parallel()
	reg := grantstore.NewRegistry(nil, nil)
	rec := &wireRec{}
	w := newEngineWire(&wire{}, rec, Config{SpaceID: "lab", Grants: reg}, slog.New(slog.DiscardHandler))
	p := escalatedProposal(t, "p1", false)
	g := lifecycle.CreateGrant{ID: "p1", Approver: "alice", Duration: time.Hour, Params: json.RawMessage(`{"name":"add","arguments":{"a":5,"b":2}}`),
		Content: json.RawMessage(`{"approve":true,"a":5}`), Request: "req-el", Signature: "sig", DecisionID: "dec-p1",
		Proposer: "coder", Method: "tools/call", Tool: "add", Target: "calculator", Revision: "rev-1", Proposed: p.Params, Grantable: p.Decision.Grantable}
	w.CreateGrant(t.Context(), g)
	gs := reg.List()
	if len(gs) != 1 {
		t.Fatalf("grants %+v, want one", gs)
	}
	gr := gs[0]
	sum := sha256.Sum256([]byte("lab\x00p1"))
	digest, _ := approval.CallDigest("tools/call", p.Params)
	if gr.ID != "grant-"+hex.EncodeToString(sum[:8]) || gr.Tool != "add" || gr.Server != "calculator" || gr.Proposer != "" || gr.GrantedBy != "alice" || gr.Expires.Sub(gr.Created) != time.Hour ||
		len(gr.Pins) != 1 || gr.Pins[0].Field != "arguments.a" || string(gr.Pins[0].Value) != "5" || gr.Evidence == nil ||
		gr.Evidence.Signature != "sig" || gr.Evidence.Request != "req-el" || gr.Evidence.Digest != digest || gr.Evidence.Action != approval.ActionAccept || string(gr.Evidence.Content) != `{"approve":true,"a":5}` {
		t.Errorf("grant %+v (evidence %+v)", gr, gr.Evidence)
	}
	rec.mu.Lock()
	observed := slices.Clone(rec.observed)
	rec.mu.Unlock()
	if len(observed) != 1 {
		t.Fatalf("observed %+v, want StageGranted", observed)
	}
	ev := observed[0]
	want := fmt.Sprintf("%s → add, a = 5 allowed for 1h, until %s", grants.Anyone, gr.Expires.Format(time.RFC3339))
	if ev.Stage != StageGranted || ev.ProposalID != "p1" || ev.DecisionID != "dec-p1" || ev.Revision != "rev-1" || ev.Proposer != "coder" || ev.Method != "tools/call" ||
		ev.Tool != "add" || ev.Target != "calculator" || !slices.Equal(ev.By, []string{"alice"}) || ev.GrantID != gr.ID || ev.Message != want || ev.Time.IsZero() {
		t.Errorf("granted event %+v (message want %q)", ev, want)
	}
	// Made again (its effect carried out again after a crash): no second.
	w.CreateGrant(t.Context(), g)
	if n := len(reg.List()); n != 1 {
		t.Errorf("%d grants after the same grant again, want one", n)
	}
}

// A request to a tool owner not in the space is not written (the
// gateway replays nothing): lifecycle.ErrAway, and the core holds it.
func TestWireRequestToAnAbsentOwner(t *testing.T) {
	t.Parallel()
	space := newFakeSpace()
	w, _ := newTestWire(t, space)
	space.setPresent("calculator", false)
	err := w.SendRequest(t.Context(), lifecycle.SendRequest{ID: "p1", To: "calculator", EnvelopeID: "req-1", RPCID: 3, Params: json.RawMessage(`{"name":"add"}`)})
	if !errors.Is(err, lifecycle.ErrAway) {
		t.Fatalf("SendRequest to an absent owner: %v, want ErrAway", err)
	}
	space.quiet(t, 50*time.Millisecond)
}
