package toolserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
)

// clock is a settable time for task timestamps and TTLs.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// stamp is how the server writes the test clock's start.
const stamp = "2026-11-25T10:00:00.000Z"

// outcome is what a gate tool returns when released.
type outcome struct {
	text string
	err  error
}

// gate is a tool that runs until the test releases it, or until its
// context ends if obeyCtx.
type gate struct {
	release chan outcome
	started chan struct{}
	stopped chan error // the context error the tool saw, when it saw one
}

func newGate() *gate {
	return &gate{release: make(chan outcome, 1), started: make(chan struct{}, 8), stopped: make(chan error, 8)}
}

func (g *gate) tool(name, support string, obeyCtx bool) Tool {
	return Tool{Name: name, Description: "Waits for the test", TaskSupport: support,
		Call: func(ctx context.Context, _ json.RawMessage) (string, error) {
			g.started <- struct{}{}
			done := ctx.Done()
			if !obeyCtx {
				done = nil
			}
			select {
			case o := <-g.release:
				return o.text, o.err
			case <-done:
				g.stopped <- ctx.Err()
				return "", ctx.Err()
			}
		}}
}

type harness struct {
	t     *testing.T
	s     *Server
	conn  *fakeConn
	in    chan agent.Envelope
	clk   *clock
	stop  context.CancelFunc
	done  chan struct{}
	seq   int
	owner string
}

func newHarness(t *testing.T, opts TaskOptions, tools ...Tool) *harness {
	t.Helper()
	h := &harness{t: t, conn: &fakeConn{sent: make(chan agent.Envelope, 64)}, in: make(chan agent.Envelope),
		clk: &clock{t: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)}, done: make(chan struct{}), owner: "fulfiller"}
	h.s = New(h.conn, nil, tools...)
	h.s.now = h.clk.now
	h.s.SetTaskOptions(opts)
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() { defer close(h.done); _ = h.s.Serve(ctx, h.in) }()
	t.Cleanup(h.shutdown)
	return h
}

// shutdown stops Serve and waits for it, and so for every task's run.
func (h *harness) shutdown() {
	h.stop()
	<-h.done
}

// send delivers a request from a participant and returns its envelope id.
func (h *harness) send(from, payload string) string {
	h.seq++
	id := fmt.Sprintf("env-%d", h.seq)
	h.in <- agent.Envelope{ID: id, From: from, To: []string{"calculator"}, Kind: agent.KindRequest, Payload: json.RawMessage(payload)}
	return id
}

func (h *harness) next() agent.Envelope {
	h.t.Helper()
	select {
	case env := <-h.conn.sent:
		return env
	case <-time.After(5 * time.Second):
		h.t.Fatal("nothing sent")
		return agent.Envelope{}
	}
}

// ask sends a request from the owner and returns the payload of its answer.
func (h *harness) ask(payload string) json.RawMessage {
	h.t.Helper()
	return h.askAs(h.owner, payload)
}

func (h *harness) askAs(from, payload string) json.RawMessage {
	h.t.Helper()
	id := h.send(from, payload)
	env := h.next()
	h.isResponse(env, id, from)
	return env.Payload
}

func (h *harness) isResponse(env agent.Envelope, reqID, from string) {
	h.t.Helper()
	if env.Kind != agent.KindResponse || !reflect.DeepEqual([]string(env.To), []string{from}) || !reflect.DeepEqual([]string(env.CorrelationID), []string{reqID}) {
		h.t.Fatalf("want the response to %s for %s, got %+v (payload %s)", reqID, from, env, env.Payload)
	}
}

// isNotification checks a status notification's envelope and payload.
func (h *harness) isNotification(env agent.Envelope, createdBy, want string) {
	h.t.Helper()
	if env.Kind != agent.KindRequest || !reflect.DeepEqual([]string(env.To), []string{h.owner}) || !reflect.DeepEqual([]string(env.CorrelationID), []string{createdBy}) {
		h.t.Fatalf("want a notification to %s correlated with %s, got %+v (payload %s)", h.owner, createdBy, env, env.Payload)
	}
	payloadEqual(h.t, env.Payload, want)
}

// quiet checks that the server sends nothing more up to its shutdown.
func (h *harness) quiet() {
	h.t.Helper()
	h.shutdown()
	select {
	case env := <-h.conn.sent:
		h.t.Errorf("unexpected envelope %+v (payload %s)", env, env.Payload)
	default:
	}
}

// create sends a tools/call and returns the task id of its answer and the
// creating envelope's id.
func (h *harness) create(payload string) (taskID, envID string, answer json.RawMessage) {
	h.t.Helper()
	envID = h.send(h.owner, payload)
	env := h.next()
	h.isResponse(env, envID, h.owner)
	if taskID = CreatedTaskID(env.Payload); taskID == "" {
		h.t.Fatalf("no task id in %s", env.Payload)
	}
	return taskID, envID, env.Payload
}

// waiting reports whether a tasks/result is waiting for the task.
func (h *harness) waiting(id string) bool {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	t, ok := h.s.tasks[id]
	return ok && t.waiters > 0
}

func (h *harness) status(id string) string {
	h.t.Helper()
	info, ok := h.s.Task(id)
	if !ok {
		h.t.Fatalf("task %s unknown", id)
	}
	return info.Status
}

const extCap = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

func TestToolsListDeclaresTaskSupportAndLeavesOtherToolsAlone(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{}, Calculator()[0], g.tool("migrate", TaskRequired, true), g.tool("build", TaskOptional, true), g.tool("lint", TaskForbidden, true))
	got := h.ask(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	want := `{"jsonrpc":"2.0","id":1,"result":{"tools":[` +
		`{"annotations":{"readOnlyHint":true},"description":"Add two numbers","inputSchema":{"properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"type":"object"},"name":"add"},` +
		`{"description":"Waits for the test","execution":{"taskSupport":"required"},"inputSchema":{"type":"object"},"name":"migrate"},` +
		`{"description":"Waits for the test","execution":{"taskSupport":"optional"},"inputSchema":{"type":"object"},"name":"build"},` +
		`{"description":"Waits for the test","execution":{"taskSupport":"forbidden"},"inputSchema":{"type":"object"},"name":"lint"}]}}`
	if string(got) != want {
		t.Errorf("tools/list\n got %s\nwant %s", got, want)
	}
}

func TestTask2025Lifecycle(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: Tasks2025, PollInterval: 50 * time.Millisecond}, g.tool("migrate", TaskRequired, true))

	id, created, answer := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate","arguments":{},"task":{"ttl":60000}}}`)
	payloadEqual(t, answer, `{"jsonrpc":"2.0","id":1,"result":{"task":{"taskId":"`+id+`","status":"working","createdAt":"`+stamp+`","lastUpdatedAt":"`+stamp+`","ttl":60000,"pollInterval":50}}}`)
	<-g.started

	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":2,"result":{"taskId":"`+id+`","status":"working","createdAt":"`+stamp+`","lastUpdatedAt":"`+stamp+`","ttl":60000,"pollInterval":50}}`)

	// tasks/result waits for the end: ask first, then let the tool finish.
	resultReq := h.send(h.owner, `{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"`+id+`"}}`)
	h.clk.advance(1500 * time.Millisecond)
	g.release <- outcome{text: "migrated"}
	const later = "2026-11-25T10:00:01.500Z"
	for range 2 { // the notification and the answer race; both must come
		env := h.next()
		if env.Kind == agent.KindRequest {
			h.isNotification(env, created, `{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"`+id+`","status":"completed","createdAt":"`+stamp+`","lastUpdatedAt":"`+later+`","ttl":60000,"pollInterval":50}}`)
			continue
		}
		h.isResponse(env, resultReq, h.owner)
		payloadEqual(t, env.Payload, `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"migrated"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}}}}`)
	}
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":4,"result":{"taskId":"`+id+`","status":"completed","createdAt":"`+stamp+`","lastUpdatedAt":"`+later+`","ttl":60000,"pollInterval":50}}`)
	// A finished task still answers tasks/result at once.
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"migrated"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}}}}`)
	// The extension's method is not this revision's.
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":6,"method":"tasks/update","params":{"taskId":"`+id+`","inputResponses":{}}}`),
		`{"jsonrpc":"2.0","id":6,"error":{"code":-32601,"message":"Method not found: tasks/update"}}`)

	if info, _ := h.s.Task(id); info != (TaskInfo{ID: id, Owner: "fulfiller", Tool: "migrate", Mode: Tasks2025, Status: StatusCompleted}) {
		t.Errorf("Task = %+v", info)
	}
	if h.s.Calls() != 1 {
		t.Errorf("Calls() = %d, want 1", h.s.Calls())
	}
	h.quiet()
}

func TestTask2025FailuresAndToolErrors(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: Tasks2025, PollInterval: 50 * time.Millisecond, Silent: true}, g.tool("build", TaskOptional, true))

	// 2025-11-25 counts a tool result with isError as a failed task, and
	// tasks/result still gives that result.
	id, _, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build","task":{}}}`)
	g.release <- outcome{err: errors.New("compiler crashed")}
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"compiler crashed"}],"isError":true,"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}}}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":3,"result":{"taskId":"`+id+`","status":"failed","statusMessage":"compiler crashed","createdAt":"`+stamp+`","lastUpdatedAt":"`+stamp+`","ttl":3600000,"pollInterval":50}}`)

	// A JSON-RPC error fails the task, and tasks/result answers with it.
	id, _, _ = h.create(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"build","task":{"ttl":1000}}}`)
	g.release <- outcome{err: fmt.Errorf("backend: %w", &agent.RPCError{Code: CodeInternal, Message: "rate limit exceeded"})}
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":5,"error":{"code":-32603,"message":"rate limit exceeded"}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":6,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":6,"result":{"taskId":"`+id+`","status":"failed","statusMessage":"rate limit exceeded","createdAt":"`+stamp+`","lastUpdatedAt":"`+stamp+`","ttl":1000,"pollInterval":50}}`)

	// Without a task the same tool answers as before.
	g.release <- outcome{text: "built"}
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"build"}}`),
		`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"built"}]}}`)
	if h.s.Calls() != 3 {
		t.Errorf("Calls() = %d, want 3", h.s.Calls())
	}
	h.quiet()
}

func TestTask2025Cancel(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: Tasks2025, PollInterval: 50 * time.Millisecond}, g.tool("migrate", TaskRequired, false))

	id, created, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate","task":{"ttl":60000}}}`)
	<-g.started
	h.clk.advance(time.Second)
	const later = "2026-11-25T10:00:01.000Z"
	cancelReq := h.send(h.owner, `{"jsonrpc":"2.0","id":2,"method":"tasks/cancel","params":{"taskId":"`+id+`"}}`)
	cancelled := `{"taskId":"` + id + `","status":"cancelled","statusMessage":"The task was cancelled by request.","createdAt":"` + stamp + `","lastUpdatedAt":"` + later + `","ttl":60000,"pollInterval":50}`
	h.isNotification(h.next(), created, `{"jsonrpc":"2.0","method":"notifications/tasks/status","params":`+cancelled+`}`)
	env := h.next()
	h.isResponse(env, cancelReq, h.owner)
	payloadEqual(t, env.Payload, `{"jsonrpc":"2.0","id":2,"result":`+cancelled+`}`)

	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tasks/cancel","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Cannot cancel task: already in terminal status 'cancelled'"}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"Task `+id+` was cancelled: it has no result"}}`)

	// The tool ignores its context and finishes anyway: the task stays
	// cancelled and no second notification goes out.
	g.release <- outcome{text: "migrated"}
	h.quiet() // waits for the run to be recorded
	if info, _ := h.s.Task(id); info.Status != StatusCancelled || info.Cancels != 2 {
		t.Errorf("Task = %+v, want cancelled with 2 cancels", info)
	}
}

func TestTaskCancelOfAFinishedTask2025(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: Tasks2025, Silent: true}, g.tool("build", TaskOptional, true))
	id, _, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build","task":{}}}`)
	g.release <- outcome{text: "built"}
	h.ask(`{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":"` + id + `"}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tasks/cancel","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Cannot cancel task: already in terminal status 'completed'"}}`)
	if info, _ := h.s.Task(id); info.Status != StatusCompleted || info.Cancels != 1 {
		t.Errorf("Task = %+v, want completed with 1 cancel", info)
	}
}

func TestTaskRequiredAndForbidden(t *testing.T) {
	g := newGate()
	tools := []Tool{g.tool("migrate", TaskRequired, true), g.tool("lint", TaskForbidden, true), Calculator()[0]}
	for _, mode := range []TasksMode{TasksBoth, Tasks2025} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t, TaskOptions{Mode: mode}, tools...)
			payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate"}}`),
				`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Tool migrate requires task-augmented execution"}}`)
			payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"lint","task":{}}}`),
				`{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Tool lint does not support task-augmented execution"}}`)
			payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},"task":{}}}`),
				`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Tool add does not support task-augmented execution"}}`)
			if h.s.Calls() != 0 {
				t.Errorf("Calls() = %d, want 0", h.s.Calls())
			}
		})
	}
	t.Run("only the 2025 revision ignores the extension", func(t *testing.T) {
		h := newHarness(t, TaskOptions{Mode: Tasks2025}, tools...)
		payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate",`+extCap+`}}`),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Tool migrate requires task-augmented execution"}}`)
	})
	t.Run("extension", func(t *testing.T) {
		h := newHarness(t, TaskOptions{Mode: TasksExtension}, tools...)
		missing := `{"code":-32003,"message":"Missing required client capability","data":{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`
		payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate"}}`),
			`{"jsonrpc":"2.0","id":1,"error":`+missing+`}`)
		// This server does not speak 2025-11-25: params.task is no capability.
		payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"migrate","task":{}}}`),
			`{"jsonrpc":"2.0","id":2,"error":`+missing+`}`)
		// Declaring the extension does not make a tool that cannot run as a
		// task run as one: the server decides, and answers plainly.
		payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},`+extCap+`}}`),
			`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"3"}]}}`)
		payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":"x"}}`),
			`{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found: tasks/result"}}`)
	})
}

func TestTaskExtensionLifecycle(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: TasksExtension, PollInterval: 50 * time.Millisecond}, g.tool("migrate", TaskRequired, true))

	id, created, answer := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate","arguments":{},` + extCap + `}}`)
	payloadEqual(t, answer, `{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"`+id+`","status":"working","createdAt":"`+stamp+`","lastUpdatedAt":"`+stamp+`","ttlMs":3600000,"pollIntervalMs":50}}`)
	<-g.started
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","taskId":"`+id+`","status":"working","createdAt":"`+stamp+`","lastUpdatedAt":"`+stamp+`","ttlMs":3600000,"pollIntervalMs":50}}`)

	h.clk.advance(2 * time.Second)
	const later = "2026-11-25T10:00:02.000Z"
	g.release <- outcome{text: "migrated"}
	completed := `"taskId":"` + id + `","status":"completed","createdAt":"` + stamp + `","lastUpdatedAt":"` + later + `","ttlMs":3600000,"pollIntervalMs":50,"result":{"content":[{"type":"text","text":"migrated"}]}`
	h.isNotification(h.next(), created, `{"jsonrpc":"2.0","method":"notifications/tasks","params":{`+completed+`}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete",`+completed+`}}`)
	// The extension acknowledges a late cancel and leaves the task as it ended.
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":4,"result":{"resultType":"complete"}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":5,"method":"tasks/update","params":{"taskId":"`+id+`","inputResponses":{"name":{"action":"accept"}}}}`),
		`{"jsonrpc":"2.0","id":5,"result":{"resultType":"complete"}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":6,"method":"tasks/update","params":{"taskId":"nope","inputResponses":{}}}`),
		`{"jsonrpc":"2.0","id":6,"error":{"code":-32602,"message":"Failed to retrieve task: Task not found"}}`)
	if info, _ := h.s.Task(id); info != (TaskInfo{ID: id, Owner: "fulfiller", Tool: "migrate", Mode: TasksExtension, Status: StatusCompleted, Cancels: 1}) {
		t.Errorf("Task = %+v", info)
	}
	h.quiet()
}

func TestTaskExtensionToolErrorCompletesAndRPCErrorFails(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: TasksExtension, PollInterval: 50 * time.Millisecond}, g.tool("build", TaskOptional, true))

	id, created, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build",` + extCap + `}}`)
	g.release <- outcome{err: errors.New("compiler crashed")}
	done := `"taskId":"` + id + `","status":"completed","createdAt":"` + stamp + `","lastUpdatedAt":"` + stamp + `","ttlMs":3600000,"pollIntervalMs":50,"result":{"content":[{"type":"text","text":"compiler crashed"}],"isError":true}`
	h.isNotification(h.next(), created, `{"jsonrpc":"2.0","method":"notifications/tasks","params":{`+done+`}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete",`+done+`}}`)

	id, created, _ = h.create(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"build",` + extCap + `}}`)
	g.release <- outcome{err: &agent.RPCError{Code: CodeInternal, Message: "rate limit exceeded"}}
	failed := `"taskId":"` + id + `","status":"failed","statusMessage":"rate limit exceeded","createdAt":"` + stamp + `","lastUpdatedAt":"` + stamp + `","ttlMs":3600000,"pollIntervalMs":50,"error":{"code":-32603,"message":"rate limit exceeded"}`
	h.isNotification(h.next(), created, `{"jsonrpc":"2.0","method":"notifications/tasks","params":{`+failed+`}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":4,"result":{"resultType":"complete",`+failed+`}}`)
	h.quiet()
}

func TestTaskExtensionCancel(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: TasksExtension, PollInterval: 50 * time.Millisecond}, g.tool("migrate", TaskRequired, true))
	id, created, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate",` + extCap + `}}`)
	<-g.started
	cancelReq := h.send(h.owner, `{"jsonrpc":"2.0","id":2,"method":"tasks/cancel","params":{"taskId":"`+id+`"}}`)
	cancelled := `"taskId":"` + id + `","status":"cancelled","statusMessage":"The task was cancelled by request.","createdAt":"` + stamp + `","lastUpdatedAt":"` + stamp + `","ttlMs":3600000,"pollIntervalMs":50`
	h.isNotification(h.next(), created, `{"jsonrpc":"2.0","method":"notifications/tasks","params":{`+cancelled+`}}`)
	env := h.next()
	h.isResponse(env, cancelReq, h.owner)
	payloadEqual(t, env.Payload, `{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete"}}`)
	if err := <-g.stopped; !errors.Is(err, context.Canceled) {
		t.Errorf("the tool saw %v, want its context cancelled", err)
	}
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete",`+cancelled+`}}`)
	h.quiet()
	if info, _ := h.s.Task(id); info.Status != StatusCancelled || info.Cancels != 1 {
		t.Errorf("Task = %+v, want cancelled with 1 cancel", info)
	}
}

func TestTaskRevisionFollowsTheRequest(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Silent: true}, g.tool("build", TaskOptional, true))
	_, _, answer := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build","task":{"ttl":5000}}}`)
	if !json.Valid(answer) || !containsKey(t, answer, "task") {
		t.Errorf("params.task alone: want a 2025-11-25 CreateTaskResult, got %s", answer)
	}
	// Both: the extension wins, and the requested ttl (a 2025 field) is
	// not used either.
	id, _, answer := h.create(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"build","task":{"ttl":5000},` + extCap + `}}`)
	payloadEqual(t, answer, `{"jsonrpc":"2.0","id":2,"result":{"resultType":"task","taskId":"`+id+`","status":"working","createdAt":"`+stamp+`","lastUpdatedAt":"`+stamp+`","ttlMs":3600000,"pollIntervalMs":1000}}`)
	if got := h.s.Tasks(); len(got) != 2 || got[0].Mode != Tasks2025 || got[1].Mode != TasksExtension {
		t.Errorf("Tasks() = %+v", got)
	}
	for range 2 {
		<-g.started
	}
	for range 3 { // two for the tasks, one for the plain call below
		g.release <- outcome{text: "built"}
	}
	// With neither, an optional tool just runs.
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"build"}}`),
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"built"}]}}`)
}

func containsKey(t *testing.T, payload json.RawMessage, key string) bool {
	t.Helper()
	var r struct{ Result map[string]json.RawMessage }
	if err := json.Unmarshal(payload, &r); err != nil {
		t.Fatal(err)
	}
	_, ok := r.Result[key]
	return ok
}

func TestTaskSilentLeavesPolling(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: TasksExtension, Silent: true}, g.tool("migrate", TaskRequired, true))
	id, _, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate",` + extCap + `}}`)
	g.release <- outcome{text: "migrated"}
	n := 1
	poll.Until(t, "the task to complete", func() bool {
		n++
		var r struct{ Result struct{ Status string } }
		if err := json.Unmarshal(h.ask(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tasks/get","params":{"taskId":"%s"}}`, n, id)), &r); err != nil {
			t.Fatal(err)
		}
		return r.Result.Status == StatusCompleted
	})
	h.quiet() // every envelope so far was an answer read by ask
}

func TestTaskIsScopedToItsCreator(t *testing.T) {
	g := newGate()
	for _, c := range []struct {
		mode   TasksMode
		create string
	}{
		{Tasks2025, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate","task":{}}}`},
		{TasksExtension, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate",` + extCap + `}}`},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			h := newHarness(t, TaskOptions{Mode: c.mode}, g.tool("migrate", TaskRequired, true))
			id, _, _ := h.create(c.create)
			<-g.started
			notFound := `{"code":-32602,"message":"Failed to retrieve task: Task not found"}`
			methods := []string{"tasks/get", "tasks/cancel", "tasks/result"}
			if c.mode == TasksExtension {
				methods = []string{"tasks/get", "tasks/cancel", "tasks/update"}
			}
			for i, m := range methods {
				for _, taskID := range []string{id, "unknown"} {
					payloadEqual(t, h.askAs("mallory", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"%s","params":{"taskId":"%s"}}`, i, m, taskID)),
						fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"error":%s}`, i, notFound))
				}
			}
			if info, _ := h.s.Task(id); info.Status != StatusWorking || info.Cancels != 0 {
				t.Errorf("after mallory: Task = %+v, want working with no cancels", info)
			}
			g.release <- outcome{text: "done"}
			if env := h.next(); env.Kind != agent.KindRequest || !reflect.DeepEqual([]string(env.To), []string{"fulfiller"}) {
				t.Errorf("completion went to %v", env.To)
			}
		})
	}
}

func TestTaskForgottenAfterTTL(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: Tasks2025, Silent: true}, g.tool("migrate", TaskRequired, true))
	id, _, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate","task":{"ttl":60000}}}`)
	<-g.started
	resultReq := h.send(h.owner, `{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":"`+id+`"}}`)
	poll.Until(t, "tasks/result to start waiting", func() bool { return h.waiting(id) })
	h.clk.advance(59 * time.Second)
	if h.status(id) != StatusWorking {
		t.Fatal("forgotten before its ttl")
	}
	h.clk.advance(time.Second)
	if _, ok := h.s.Task(id); ok {
		t.Error("still known after its ttl")
	}
	if err := <-g.stopped; !errors.Is(err, context.Canceled) {
		t.Errorf("the tool saw %v, want its context cancelled", err)
	}
	env := h.next() // the waiting tasks/result gives up rather than hang
	h.isResponse(env, resultReq, h.owner)
	payloadEqual(t, env.Payload, `{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Failed to retrieve task: Task has expired"}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Failed to retrieve task: Task not found"}}`)
	h.quiet()
}

func TestTaskIDsAreUnguessable(t *testing.T) {
	g := newGate()
	h := newHarness(t, TaskOptions{Mode: Tasks2025, Silent: true}, g.tool("build", TaskOptional, false))
	a, _, _ := h.create(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"build","task":{}}}`)
	b, _, _ := h.create(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"build","task":{}}}`)
	if a == b || len(a) < 26 {
		t.Errorf("task ids %q and %q: want distinct, from 128 random bits", a, b)
	}
	g.release <- outcome{}
	g.release <- outcome{}
}

func TestJobsSamples(t *testing.T) {
	h := newHarness(t, TaskOptions{Mode: TasksBoth, Silent: true}, Jobs{Step: time.Millisecond}.Tools()...)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3}}}`),
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Tool migrate requires task-augmented execution"}}`)
	id, _, _ := h.create(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3},"task":{}}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"migrated 3 steps"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}}}}`)
	id, _, _ = h.create(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"migrate","arguments":{"steps":0},"task":{}}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":"`+id+`"}}`),
		`{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"bad arguments: steps must be an integer from 1 to 1000"}],"isError":true,"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}}}}`)
	payloadEqual(t, h.ask(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"build","arguments":{"target":"web"}}}`),
		`{"jsonrpc":"2.0","id":6,"result":{"content":[{"type":"text","text":"built web"}]}}`)
}
