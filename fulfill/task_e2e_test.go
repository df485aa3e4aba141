package fulfill_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// taskPolicy fulfils the task tools; build runs as a task only when the
// proposal says async (the decision's "task"), stuck gets a 1s task
// deadline.
const taskPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "fulfill"} if input.tool.name == "migrate"

decision := {"action": "fulfill", "task": true} if {
	input.tool.name == "build"
	input.tool.arguments.async == true
}

decision := {"action": "fulfill"} if {
	input.tool.name == "build"
	not input.tool.arguments.async
}

decision := {"action": "fulfill", "task_timeout": "1s"} if input.tool.name == "stuck"
`

// taskWorld is a space with a tool server whose tools run as MCP tasks,
// a fulfiller (optionally on a DIR state store, which survives a crash)
// and an SDK-like proposer.
type taskWorld struct {
	t       *testing.T
	ctx     context.Context
	srv     *space.Server
	wire    *spacetest.Wire
	tools   *toolserver.Server
	prop    *proposer.Proposer
	coder   *agent.Client
	engine  *policies.Engine
	dir     string // state store; "" for none
	release chan struct{}
	tune    func(*fulfill.Config)

	ful     *fulfill.Fulfiller
	fc      *agent.Client
	crash   func() // kill -9: nothing more reaches the wire or the store
	stopFul func()
}

func newTaskWorld(t *testing.T, mode toolserver.TasksMode, silent bool, stateDir string, tune ...func(*fulfill.Config)) *taskWorld {
	t.Helper()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": capsFulfiller,
		"coder-token":     capsProposer,
		// A task owner may send notifications (status), nothing else.
		"calc-token":    append(capsTool, agent.Capability{Kind: agent.KindRequest, Payload: map[string]any{"method": "notifications/*"}}),
		"mallory-token": capsFulfiller, // may send requests: forges in others' names
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	w := &taskWorld{t: t, ctx: context.Background(), srv: srv, wire: spacetest.RecordWire(t, srv), dir: stateDir, release: make(chan struct{})}
	for _, f := range tune {
		w.tune = f
	}
	calc := spacetest.Join(t, w.ctx, srv, "calculator", "calc-token")
	w.tools = spacetest.ServeTools(t, calc,
		toolserver.Tool{Name: "migrate", Description: "Migrates; ends when the test says so", TaskSupport: "required",
			Call: func(ctx context.Context, _ json.RawMessage) (string, error) {
				select {
				case <-w.release:
					return "migrated", nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}},
		toolserver.Tool{Name: "build", Description: "Builds at once", TaskSupport: "optional",
			Call: func(context.Context, json.RawMessage) (string, error) { return "built", nil }},
		toolserver.Tool{Name: "stuck", Description: "Never ends", TaskSupport: "required",
			Call: func(ctx context.Context, _ json.RawMessage) (string, error) { <-ctx.Done(); return "", ctx.Err() }},
	)
	w.tools.SetTaskOptions(toolserver.TaskOptions{Mode: mode, PollInterval: 50 * time.Millisecond, Silent: silent})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(taskPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	w.engine, err = policies.Load(w.ctx, policies.Options{Timeout: time.Minute, Policies: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	w.start()
	w.coder = spacetest.Join(t, w.ctx, srv, "coder", "coder-token")
	w.prop = spacetest.NewProposer(t, w.coder)
	return w
}

// start runs a fulfiller (again, after crash) on the world's store.
func (w *taskWorld) start() {
	t := w.t
	var st *state.Store
	var stopLease context.CancelFunc = func() {}
	if w.dir != "" {
		octx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
		var err error
		st, err = state.Open(octx, state.Config{Mode: state.Mode{Kind: state.Dir, Dir: w.dir}, Space: space.DefaultSpaceID, Member: "fulfiller", Lease: time.Second})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var leaseCtx context.Context
		leaseCtx, stopLease = context.WithCancel(w.ctx)
		if err := st.StartLease(leaseCtx); err != nil {
			t.Fatal(err)
		}
	}
	w.fc = spacetest.Join(t, w.ctx, w.srv, "fulfiller", "fulfiller-token")
	cfg := fulfill.Config{SpaceID: space.DefaultSpaceID, StatusChats: true, TaskTimeout: time.Minute, DiscoverySettle: time.Millisecond}
	if st != nil {
		cfg.Store = st
	}
	if w.tune != nil {
		w.tune(&cfg)
	}
	w.ful = fulfill.New(w.fc, w.engine, cfg)
	sub := w.fc.Subscribe(agent.SubscribeOptions{All: true})
	fctx, fcancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.ful.Run(fctx, sub.C()) }()
	var once sync.Once
	w.stopFul = func() {
		once.Do(func() {
			fcancel()
			<-done
			sub.Close()
			stopLease()
			if st != nil {
				st.Close()
			}
		})
	}
	fc := w.fc
	w.crash = func() {
		stopLease()
		if st != nil {
			st.Close()
		}
		fc.Close()
		poll.Until(t, "the fulfiller to be gone", func() bool { _, here := w.coder.Participant("fulfiller"); return !here })
		w.stopFul()
	}
	t.Cleanup(w.stopFul)
	poll.Until(t, "tool discovery", func() bool { return len(w.ful.Tools()) == 3 })
}

func (w *taskWorld) propose(id, payload string) string {
	w.t.Helper()
	id, err := w.prop.Propose(w.ctx, id, nil, json.RawMessage(payload))
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *taskWorld) outcome(id string) proposer.Outcome {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, spacetest.Timeout)
	defer cancel()
	out, err := w.prop.Wait(ctx, id)
	if err != nil {
		w.t.Fatalf("proposal %s: %v (so far %+v)", id, err, out)
	}
	return out
}

func (w *taskWorld) onWire(what string, pred func(agent.Envelope) bool) agent.Envelope {
	w.t.Helper()
	return w.wire.WaitFor(w.t, what, pred)
}

// from returns the envelopes on the wire from who, of kind, whose payload
// contains each of subs.
func (w *taskWorld) from(who, kind string, subs ...string) []agent.Envelope {
	var out []agent.Envelope
next:
	for _, e := range w.wire.Envelopes() {
		if e.From != who || e.Kind != kind {
			continue
		}
		for _, s := range subs {
			if !strings.Contains(string(e.Payload), s) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// taskOf waits for the calculator's CreateTaskResult and returns the
// task-augmented request and the task id.
func (w *taskWorld) taskOf(tool string) (req agent.Envelope, taskID string) {
	w.t.Helper()
	req = w.onWire("the task-augmented "+tool+" call", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.Kind == agent.KindRequest && strings.Contains(string(e.Payload), `"name":"`+tool+`"`)
	})
	resp := w.onWire("the task handle", func(e agent.Envelope) bool {
		return e.From == "calculator" && e.Kind == agent.KindResponse && e.CorrelationID.First() == req.ID
	})
	if taskID = toolserver.CreatedTaskID(resp.Payload); taskID == "" {
		w.t.Fatalf("no task in %s", resp.Payload)
	}
	return req, taskID
}

// A required task tool, extension revision: the call goes out
// task-augmented and not named after the proposal; the proposer is told
// it runs as a task; its end is relayed as a request named after the
// proposal and the response to it, which is what the SDK proposer
// resolves on, with exactly the tool's result.
func TestE2ETaskRequiredExtensionRelaysTheResult(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksExtension, false, "")
	id := w.propose("p-migrate", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3}}}`)
	req, taskID := w.taskOf("migrate")
	exact(t, req, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3},"task":{"ttl":60000},"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}}`)

	status := w.onWire("the task status chat", func(e agent.Envelope) bool {
		return e.Kind == agent.KindChat && e.CorrelationID.First() == id && strings.Contains(string(e.Payload), `"stage":"task"`)
	})
	var chat struct {
		Text string                            `json:"text"`
		Meta map[string]fulfill.ProposalStatus `json:"_meta"`
	}
	if err := json.Unmarshal(status.Payload, &chat); err != nil {
		t.Fatal(err)
	}
	st := chat.Meta[fulfill.StatusMetaKey]
	if status.From != "fulfiller" || len(status.To) != 1 || status.To[0] != "coder" || st.Version != 1 || st.Proposal != id || st.Stage != "task" ||
		st.Task == nil || st.Task.ID != taskID || st.Task.Spec != fulfill.TaskSpecExtension || st.Task.Status != "working" ||
		!st.Deadline.Equal(st.Task.Deadline) || time.Until(st.Deadline) < 30*time.Second {
		t.Errorf("status chat %s", status.Raw)
	}
	if !strings.Contains(chat.Text, "Running as task "+taskID+" at calculator (working)") {
		t.Errorf("status text %q", chat.Text)
	}
	snap, ok := w.ful.Get(id)
	if !ok || snap.State != "task" || snap.Task == nil || snap.Task.ID != taskID || snap.Task.Status != "working" {
		t.Errorf("operator view %+v (task %+v)", snap, snap.Task)
	}

	close(w.release)
	out := w.outcome(id)
	if !out.Fulfilled || out.FulfilledBy != "fulfiller" || string(out.Result) != `{"content":[{"type":"text","text":"migrated"}]}` {
		t.Fatalf("outcome %+v result %s", out, out.Result)
	}
	relay := w.onWire("the relay request", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.Kind == agent.KindRequest && e.CorrelationID.First() == id
	})
	exact(t, relay, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["fulfiller"],"kind":"mcp/request","correlation_id":["p-migrate"],"payload":{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"`+taskID+`"}}}`)
	resp := w.onWire("the relayed result", func(e agent.Envelope) bool {
		return e.Kind == agent.KindResponse && e.CorrelationID.First() == relay.ID
	})
	exact(t, resp, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/response","correlation_id":["`+relay.ID+`"],"payload":{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"migrated"}]}}}`)
	if n := len(w.from("fulfiller", agent.KindRequest, `"tasks/cancel"`)); n != 0 {
		t.Errorf("%d tasks/cancel for a task that ended", n)
	}
	if calls := len(w.from("fulfiller", agent.KindRequest, `"tools/call"`)); calls != 1 || w.tools.Calls() != 1 {
		t.Errorf("%d tools/call on the wire, %d runs: want 1", calls, w.tools.Calls())
	}
	// One answer: nothing but the relay names the proposal (the status
	// chat is not an answer).
	for _, e := range w.wire.Envelopes() {
		if e.From == "fulfiller" && e.CorrelationID.First() == id && e.Kind != agent.KindChat && e.ID != relay.ID {
			t.Errorf("another envelope names the proposal: %s", e.Raw)
		}
	}
}

// The 2025-11-25 revision, without status notifications: followed by
// polling tasks/get, and its result read with tasks/result (exactly what
// the call returns) before it is relayed.
func TestE2ETask2025PolledAndRelayed(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.Tasks2025, true, "")
	id := w.propose("p-migrate", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":1}}}`)
	req, taskID := w.taskOf("migrate")
	get := w.onWire("a tasks/get", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"tasks/get"`)
	})
	exact(t, get, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["`+req.ID+`"],"payload":{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"`+taskID+`"}}}`)
	close(w.release)
	out := w.outcome(id)
	want := `{"content":[{"type":"text","text":"migrated"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"` + taskID + `"}}}`
	if !out.Fulfilled || !jsonSame(out.Result, want) {
		t.Fatalf("outcome %+v result %s, want %s", out, out.Result, want)
	}
	result := w.onWire("the tasks/result", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.To[0] == "calculator" && strings.Contains(string(e.Payload), `"tasks/result"`)
	})
	exact(t, result, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["`+req.ID+`"],"payload":{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"`+taskID+`"}}}`)
	if n := len(w.from("calculator", agent.KindRequest, "notifications/tasks")); n != 0 {
		t.Errorf("%d status notifications from a silent owner", n)
	}
}

func jsonSame(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && strings.EqualFold(mustJSON(x), mustJSON(y))
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// An optional tool is called as a task only when the decision says so;
// otherwise exactly as before: named after the proposal, answered by the
// owner, no task.
func TestE2ETaskOptionalOnlyWhenTheDecisionAsks(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksBoth, false, "")
	plain := w.propose("p-build", `{"method":"tools/call","params":{"name":"build","arguments":{"target":"app"}}}`)
	if out := w.outcome(plain); !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"built"}]}` {
		t.Fatalf("plain build: %+v %s", out, out.Result)
	}
	req := w.onWire("the plain call", func(e agent.Envelope) bool { return e.Kind == agent.KindRequest && e.CorrelationID.First() == plain })
	exact(t, req, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["p-build"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build","arguments":{"target":"app"}}}}`)

	async := w.propose("p-build-async", `{"method":"tools/call","params":{"name":"build","arguments":{"target":"app","async":true}}}`)
	out := w.outcome(async)
	if !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"built"}]}` {
		t.Fatalf("async build: %+v %s", out, out.Result)
	}
	if tasks := w.tools.Tasks(); len(tasks) != 1 || tasks[0].Tool != "build" || tasks[0].Status != "completed" {
		t.Errorf("tasks at the owner %+v, want the one async build", tasks)
	}
}

// A proposer's own params.task and task capability are not passed on: a
// proposer cannot follow a task, so the owner must not make one of a
// call that is not task-augmented by fulfiller.
func TestE2ETaskFieldsFromTheProposerAreDropped(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksBoth, false, "")
	id := w.propose("p-sneaky", `{"method":"tools/call","params":{"name":"build","arguments":{"target":"app"},"task":{"ttl":1},"_meta":{"trace":"x","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`)
	if out := w.outcome(id); !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"built"}]}` {
		t.Fatalf("outcome %+v %s", out, out.Result)
	}
	req := w.onWire("the call", func(e agent.Envelope) bool { return e.Kind == agent.KindRequest && e.CorrelationID.First() == id })
	exact(t, req, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["p-sneaky"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build","arguments":{"target":"app"},"_meta":{"trace":"x"}}}}`)
	if n := len(w.tools.Tasks()); n != 0 {
		t.Errorf("%d tasks made of a plain call", n)
	}
}

// A withdrawal mid-task sends tasks/cancel once (a second withdrawal
// none), and nothing to the proposer.
func TestE2ETaskWithdrawCancelsOnce(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksExtension, false, "")
	id := w.propose("p-migrate", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3}}}`)
	req, taskID := w.taskOf("migrate")
	poll.Until(t, "the task state", func() bool { s, ok := w.ful.Get(id); return ok && s.State == "task" })
	for range 2 {
		if err := w.prop.Withdraw(w.ctx, id, "no_longer_needed"); err != nil {
			t.Fatal(err)
		}
	}
	cancel := w.onWire("the tasks/cancel", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"tasks/cancel"`)
	})
	exact(t, cancel, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["`+req.ID+`"],"payload":{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"`+taskID+`"}}}`)
	poll.Until(t, "the task cancelled at its owner", func() bool {
		ti, ok := w.tools.Task(taskID)
		return ok && ti.Status == "cancelled"
	})
	w.marker()
	if n := len(w.from("fulfiller", agent.KindRequest, `"tasks/cancel"`)); n != 1 {
		t.Errorf("%d tasks/cancel, want 1", n)
	}
	if ti, _ := w.tools.Task(taskID); ti.Cancels != 1 {
		t.Errorf("the owner got %d cancels", ti.Cancels)
	}
	for _, e := range w.wire.Envelopes() {
		if e.From == "fulfiller" && e.CorrelationID.First() == id && e.Kind != agent.KindChat {
			t.Errorf("answered a withdrawn proposal: %s", e.Raw)
		}
	}
	if _, ok := w.ful.Get(id); ok {
		t.Error("still pending after the withdrawal")
	}
}

// marker sends a chat and waits for it on the wire: everything sent
// before it has been recorded.
func (w *taskWorld) marker() {
	w.t.Helper()
	m, err := w.coder.Send(w.ctx, agent.Envelope{Kind: agent.KindChat, Payload: json.RawMessage(`{"text":"marker"}`)})
	if err != nil {
		w.t.Fatal(err)
	}
	// Let the fulfiller act on what it had read (its sends are
	// asynchronous to the reader) before the marker is looked for.
	time.Sleep(200 * time.Millisecond)
	w.onWire("the marker", func(e agent.Envelope) bool { return e.ID == m.ID })
}

// A task past its deadline (the decision's task_timeout, 1s) is cancelled
// at its owner and the proposer gets mcp/reject "timeout".
func TestE2ETaskDeadlineCancelsAndRejectsTimeout(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksExtension, false, "")
	id := w.propose("p-stuck", `{"method":"tools/call","params":{"name":"stuck"}}`)
	req, taskID := w.taskOf("stuck")
	out := w.outcome(id)
	if !out.Rejected || out.Reason != "timeout" || out.RejectedBy != "fulfiller" {
		t.Fatalf("outcome %+v", out)
	}
	rej := w.onWire("the reject", func(e agent.Envelope) bool { return e.Kind == agent.KindReject && e.CorrelationID.First() == id })
	exact(t, rej, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["p-stuck"],"payload":{"reason":"timeout"}}`)
	cancel := w.onWire("the tasks/cancel", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && strings.Contains(string(e.Payload), `"tasks/cancel"`)
	})
	exact(t, cancel, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["`+req.ID+`"],"payload":{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"`+taskID+`"}}}`)
	if chat := w.prop.WaitChat(w.ctx, id); !strings.Contains(chat, "task "+taskID+" at calculator did not end within 1s") {
		t.Errorf("explanation %q", chat)
	}
	w.marker()
	if n := len(w.from("fulfiller", agent.KindRequest, `"tasks/cancel"`)); n != 1 {
		t.Errorf("%d tasks/cancel, want 1", n)
	}
}

// kill -9 of the fulfiller while a task runs, then a restart on the same
// DIR store: the task is followed again (never called a second time) and
// its result reaches the proposer.
func TestE2ETaskSurvivesRestart(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksExtension, false, t.TempDir())
	id := w.propose("p-migrate", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3}}}`)
	_, taskID := w.taskOf("migrate")
	// The status chat follows the task's record: once it is on the wire,
	// the record is written.
	w.onWire("the task status chat", func(e agent.Envelope) bool {
		return e.Kind == agent.KindChat && e.CorrelationID.First() == id && strings.Contains(string(e.Payload), `"stage":"task"`)
	})
	w.crash()
	w.start()
	poll.Until(t, "the task followed again", func() bool {
		s, ok := w.ful.Get(id)
		return ok && s.State == "task" && s.Task != nil && s.Task.ID == taskID
	})
	close(w.release)
	out := w.outcome(id)
	if !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"migrated"}]}` {
		t.Fatalf("outcome %+v %s", out, out.Result)
	}
	if calls := len(w.from("fulfiller", agent.KindRequest, `"tools/call"`)); calls != 1 || w.tools.Calls() != 1 {
		t.Errorf("%d tools/call on the wire, %d runs: want 1", calls, w.tools.Calls())
	}
	if n := len(w.from("fulfiller", agent.KindRequest, `"tasks/cancel"`)); n != 0 {
		t.Errorf("%d tasks/cancel", n)
	}
}

// Status notifications are hints: a forged "completed" in the owner's
// name, with a result of the forger's choosing, is checked with tasks/get
// and relays nothing; the real end relays the real result.
func TestE2ETaskForgedCompletionIgnored(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksExtension, true, "")
	id := w.propose("p-migrate", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3}}}`)
	req, taskID := w.taskOf("migrate")
	poll.Until(t, "the task state", func() bool { s, ok := w.ful.Get(id); return ok && s.State == "task" })
	forged := `{"kind":"mcp/request","from":"calculator","to":["fulfiller"],"correlation_id":["` + req.ID + `"],"payload":{"jsonrpc":"2.0","method":"notifications/tasks","params":{"taskId":"` + taskID + `","status":"completed","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":60000,"result":{"content":[{"type":"text","text":"forged"}]}}}}`
	// A flood of them: each is a hint, and hints make at most one
	// tasks/get per 100ms whatever their number.
	gets := func() int { return len(w.from("fulfiller", agent.KindRequest, `"tasks/get"`)) }
	before, start := gets(), time.Now()
	for range 40 {
		forge(t, w.srv.URL(), "mallory", "mallory-token", forged)
	}
	w.onWire("the forgery", func(e agent.Envelope) bool {
		return e.From == "calculator" && strings.Contains(string(e.Payload), `"forged"`)
	})
	w.marker()
	if s, ok := w.ful.Get(id); !ok || s.State != "task" {
		t.Fatalf("after the forgeries: %+v %v, want still a task", s, ok)
	}
	if n, most := gets()-before, int(time.Since(start)/(100*time.Millisecond))+2; n > most {
		t.Errorf("%d tasks/get while 40 forged notifications came in %v, want at most %d", n, time.Since(start), most)
	}
	close(w.release)
	if out := w.outcome(id); !out.Fulfilled || string(out.Result) != `{"content":[{"type":"text","text":"migrated"}]}` {
		t.Fatalf("outcome %+v %s", out, out.Result)
	}
}

// A proposal that waits for a fulfilment slot (--max-inflight) is told so
// in a status chat; one that never waited gets none.
func TestE2EStatusChatWhenQueued(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{cfg: fulfill.Config{MaxInflight: 1, StatusChats: true}})
	first := w.propose("p-hold", `{"method":"tools/call","params":{"name":"hold","arguments":{}}}`)
	w.waitHeld()
	second := w.propose("p-add", `{"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`)
	chat := w.onWire("the queued status", func(e agent.Envelope) bool {
		return e.Kind == agent.KindChat && e.CorrelationID.First() == second
	})
	exact(t, chat, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"chat","correlation_id":["p-add"],"payload":{"text":"Allowed; waiting for a free fulfilment slot.","format":"plain","_meta":{"fulfiller/status":{"v":1,"proposal":"p-add","stage":"queued"}}}}`)
	close(w.release)
	for _, id := range []string{first, second} {
		if out := w.outcome(id); !out.Fulfilled {
			t.Fatalf("%s: %+v", id, out)
		}
	}
	for _, e := range w.wire.Envelopes() {
		if e.Kind == agent.KindChat && e.CorrelationID.First() == first {
			t.Errorf("a status chat for a proposal that never waited: %s", e.Raw)
		}
	}
}

// A running task is pending work: it counts toward --max-pending (a new
// proposal is rejected busy while it runs, though it holds no fulfilment
// slot), an operator's cancel stops it at its owner (tasks/cancel) and
// rejects "other", and so does shutdown.
func TestE2ETaskIsPendingWork(t *testing.T) {
	t.Parallel()
	w := newTaskWorld(t, toolserver.TasksExtension, false, "", func(c *fulfill.Config) { c.MaxPending, c.MaxPendingPerProposer, c.MaxInflight = 1, 10, 1 })
	first := w.propose("p-first", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":1}}}`)
	_, firstTask := w.taskOf("migrate")
	poll.Until(t, "the task state", func() bool { s, ok := w.ful.Get(first); return ok && s.State == "task" })
	if pending, inflight := w.ful.Counts(); pending != 1 || inflight != 0 {
		t.Errorf("counts %d pending, %d in flight; want the task pending and its slot free", pending, inflight)
	}
	busy := w.propose("p-busy", `{"method":"tools/call","params":{"name":"build","arguments":{"target":"app"}}}`)
	if out := w.outcome(busy); !out.Rejected || out.Reason != "busy" {
		t.Fatalf("a proposal while the task runs with --max-pending 1: %+v, want busy", out)
	}

	if err := w.ful.Cancel(first, "ops@example"); err != nil {
		t.Fatal(err)
	}
	if out := w.outcome(first); !out.Rejected || out.Reason != "other" {
		t.Fatalf("cancelled task: %+v, want reject other", out)
	}
	poll.Until(t, "the task cancelled at its owner", func() bool {
		ti, ok := w.tools.Task(firstTask)
		return ok && ti.Status == "cancelled" && ti.Cancels == 1
	})

	second := w.propose("p-second", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":1}}}`)
	var secondTask string
	poll.Until(t, "the second task", func() bool {
		s, ok := w.ful.Get(second)
		if ok && s.Task != nil {
			secondTask = s.Task.ID
		}
		return secondTask != ""
	})
	w.stopFul()
	if out := w.outcome(second); !out.Rejected || out.Reason != "other" {
		t.Fatalf("a task at shutdown: %+v, want reject other", out)
	}
	poll.Until(t, "the task cancelled at shutdown", func() bool {
		ti, ok := w.tools.Task(secondTask)
		return ok && ti.Status == "cancelled" && ti.Cancels == 1
	})
}
