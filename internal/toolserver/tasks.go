package toolserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// Task methods and notifications of the two MCP revisions the server
// speaks. tasks/result exists only in 2025-11-25, tasks/update only in the
// extension; tasks/get and tasks/cancel in both, with different answers.
const (
	MethodTasksGet    = "tasks/get"
	MethodTasksResult = "tasks/result"
	MethodTasksCancel = "tasks/cancel"
	MethodTasksUpdate = "tasks/update"

	// MethodTaskStatus2025 is 2025-11-25's status notification.
	MethodTaskStatus2025 = "notifications/tasks/status"
	// MethodTaskStatusExtension is the extension's status notification.
	MethodTaskStatusExtension = "notifications/tasks"

	// ExtensionTasks names the tasks extension in a request's
	// _meta["io.modelcontextprotocol/clientCapabilities"].extensions.
	ExtensionTasks = "io.modelcontextprotocol/tasks"
)

// Task statuses. The server never asks for input, so a task goes from
// working straight to one of the three terminal ones.
const (
	StatusWorking   = "working"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// TasksMode says which revision of MCP tasks the server understands.
type TasksMode int

const (
	// TasksBoth (the default) accepts both revisions and answers each
	// request in the shape of the one it used: params.task asks for a
	// 2025-11-25 task, the extension in the request's client capabilities
	// for an extension task. A request carrying both is read as an
	// extension request and its params.task is ignored: a client that
	// declares the extension reads its shapes, and sends params.task only
	// for servers that predate it. A task-required tool called with neither
	// answers 2025-11-25's -32601.
	TasksBoth TasksMode = iota
	// Tasks2025 speaks only MCP 2025-11-25 tasks (params.task, CreateTaskResult
	// {"task":{…}}, tasks/result); the extension's capability is ignored.
	Tasks2025
	// TasksExtension speaks only the io.modelcontextprotocol/tasks
	// extension; params.task is ignored, as a receiver that does not
	// declare 2025-11-25 tasks must.
	TasksExtension
)

// String names the mode as the tests and logs spell it.
func (m TasksMode) String() string {
	switch m {
	case Tasks2025:
		return "2025-11-25"
	case TasksExtension:
		return ExtensionTasks
	default:
		return "both"
	}
}

// TaskOptions tune how the server runs tasks.
type TaskOptions struct {
	// Mode is the revision (or both) the server speaks.
	Mode TasksMode
	// PollInterval is the pollInterval(Ms) the server suggests; 0 means
	// DefaultPollInterval.
	PollInterval time.Duration
	// TTL is how long a task is kept when the request names no ttl (the
	// extension never does); 0 means DefaultTaskTTL. Requested ttls are
	// capped at MaxTaskTTL.
	TTL time.Duration
	// Silent turns status notifications off, so that a caller's polling
	// path can be tested on its own.
	Silent bool
}

// Task lifetimes and polling the server uses unless told otherwise.
const (
	DefaultPollInterval = time.Second
	DefaultTaskTTL      = time.Hour
	MaxTaskTTL          = 24 * time.Hour
)

// TaskInfo is what tests may learn about a task.
type TaskInfo struct {
	ID     string
	Owner  string    // the from of the tools/call that created it
	Tool   string    // the tool it runs
	Mode   TasksMode // Tasks2025 or TasksExtension: the revision it speaks
	Status string
	// Cancels counts the tasks/cancel requests its owner sent for it,
	// those refused because it had ended included.
	Cancels int
}

// task is one task-augmented tools/call. Fields after mu-guarded ones are
// written only while Server.mu is held.
type task struct {
	id, owner, tool string
	rev             TasksMode
	reqEnv          string // envelope id of the creating tools/call
	seq             int    // creation order: createdAt ties under a test clock
	createdAt       time.Time
	ttl             time.Duration
	cancel          context.CancelFunc
	done            chan struct{} // closed when the status becomes terminal

	status        string
	statusMessage string
	updatedAt     time.Time
	result        *callResult
	rpcErr        *agent.RPCError
	cancels       int
	waiters       int // tasks/result requests waiting for the end; tests wait on it
}

func (t *task) terminal() bool { return t.status != StatusWorking }

// SetTaskOptions sets how tasks are run from now on. It is safe to call
// while Serve runs, so that a test can tune a server someone else started;
// tasks already created keep the revision they were created with.
func (s *Server) SetTaskOptions(o TaskOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts = o
}

// Task reports a task's state, for tests; ok is false once it is unknown
// or forgotten.
func (s *Server) Task(id string) (TaskInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	t, ok := s.tasks[id]
	if !ok {
		return TaskInfo{}, false
	}
	return t.info(), true
}

// Tasks lists the tasks the server holds, oldest first.
func (s *Server) Tasks() []TaskInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	ts := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *task) int { return a.seq - b.seq })
	out := make([]TaskInfo, len(ts))
	for i, t := range ts {
		out[i] = t.info()
	}
	return out
}

func (t *task) info() TaskInfo {
	return TaskInfo{ID: t.id, Owner: t.owner, Tool: t.tool, Mode: t.rev, Status: t.status, Cancels: t.cancels}
}

// taskRevision decides how a tools/call is run: as a task of a revision
// (Tasks2025 or TasksExtension), as a plain call (asTask false), or not at
// all (an error to answer with).
func (s *Server) taskRevision(t Tool, p callParams) (rev TasksMode, asTask bool, rpcErr *agent.RPCError) {
	s.mu.Lock()
	mode := s.opts.Mode
	s.mu.Unlock()
	ext := false
	if raw, ok := p.Meta.ClientCapabilities.Extensions[ExtensionTasks]; ok && string(raw) != "null" {
		ext = mode != Tasks2025
	}
	asked2025 := p.Task != nil && mode != TasksExtension
	supported := t.TaskSupport == TaskOptional || t.TaskSupport == TaskRequired
	switch {
	case ext && supported:
		// The extension lets the server choose; a tool that can run as a
		// task does, so that callers meet tasks whenever they may.
		return TasksExtension, true, nil
	case ext:
		return 0, false, nil
	case asked2025 && supported:
		return Tasks2025, true, nil
	case asked2025:
		return 0, false, &agent.RPCError{Code: CodeMethodNotFound, Message: "Tool " + t.Name + " does not support task-augmented execution"}
	case t.TaskSupport != TaskRequired:
		return 0, false, nil
	case mode == TasksExtension:
		return 0, false, &agent.RPCError{Code: CodeMissingCapability, Message: "Missing required client capability",
			Data: json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + ExtensionTasks + `":{}}}}`)}
	default:
		return 0, false, &agent.RPCError{Code: CodeMethodNotFound, Message: "Tool " + t.Name + " requires task-augmented execution"}
	}
}

// runTask creates a task for a tools/call, answers with the task, then
// runs the tool to the task's end. It runs on the goroutine Serve gave the
// request, so Serve owns the tool's run.
func (s *Server) runTask(ctx context.Context, env agent.Envelope, req agent.RPCRequest, tool Tool, p callParams, rev TasksMode) {
	taskCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.sweep()
	now := s.now()
	t := &task{
		id: rand.Text(), owner: env.From, tool: tool.Name, rev: rev, reqEnv: env.ID,
		createdAt: now, updatedAt: now, ttl: s.ttl(p, rev), cancel: cancel, done: make(chan struct{}),
		status: StatusWorking,
	}
	s.made++
	t.seq = s.made
	s.tasks[t.id] = t
	s.calls++
	created := s.view(t, "task")
	s.mu.Unlock()
	// The task is in the table before the answer goes, so a tasks/get
	// right after it finds it; the tool starts after, so that no status
	// notification can overtake the answer.
	s.reply(ctx, env, req, created, nil)

	result, rpcErr := runTool(taskCtx, tool, p.Arguments)

	s.mu.Lock()
	if s.tasks[t.id] != t || t.terminal() {
		s.mu.Unlock() // forgotten, or cancelled while the tool ran: that stands
		return
	}
	stopped := ctx.Err() != nil
	switch {
	case stopped:
		rpcErr = &agent.RPCError{Code: CodeInternal, Message: "tool server stopped"}
		s.finish(t, StatusFailed, rpcErr.Message)
		t.rpcErr = rpcErr
	case rpcErr != nil:
		s.finish(t, StatusFailed, rpcErr.Message)
		t.rpcErr = rpcErr
	case result.IsError && rev == Tasks2025:
		// 2025-11-25 counts a tool error as a failed task; the
		// extension keeps failed for JSON-RPC errors alone.
		s.finish(t, StatusFailed, result.Content[0].Text)
		t.result = &result
	default:
		s.finish(t, StatusCompleted, "")
		t.result = &result
	}
	note := s.notification(t)
	s.mu.Unlock()
	if !stopped {
		s.notify(ctx, note)
	}
}

// ttl is the lifetime a new task gets: what a 2025-11-25 request asked
// for, or the server's choice (the extension leaves it to the server).
// Called with s.mu held.
func (s *Server) ttl(p callParams, rev TasksMode) time.Duration {
	d := s.opts.TTL
	if d <= 0 {
		d = DefaultTaskTTL
	}
	if rev == Tasks2025 && p.Task != nil && p.Task.TTL != nil && *p.Task.TTL > 0 {
		d = time.Duration(*p.Task.TTL) * time.Millisecond
	}
	return min(d, MaxTaskTTL)
}

// finish moves t to a terminal status. Called with s.mu held, only for a
// task still working: terminal statuses never change.
func (s *Server) finish(t *task, status, message string) {
	t.status, t.statusMessage, t.updatedAt = status, message, s.now()
	close(t.done)
}

// sweep forgets tasks whose TTL has passed, stopping those still running.
// Called with s.mu held, whenever tasks are looked at.
func (s *Server) sweep() {
	now := s.now()
	for id, t := range s.tasks {
		if now.Sub(t.createdAt) < t.ttl {
			continue
		}
		delete(s.tasks, id)
		t.cancel()
		if !t.terminal() {
			// Ended so that a tasks/result still waiting on it answers
			// rather than waiting for a run no one will record.
			t.rpcErr = &agent.RPCError{Code: CodeInvalidParams, Message: "Failed to retrieve task: Task has expired"}
			s.finish(t, StatusFailed, t.rpcErr.Message)
		}
	}
}

// pendingNote is a status notification decided under the lock and sent
// after it.
type pendingNote struct {
	method string
	params any
	owner  string
	reqEnv string
}

func (s *Server) notification(t *task) *pendingNote {
	if s.opts.Silent {
		return nil
	}
	n := &pendingNote{method: MethodTaskStatus2025, params: s.view(t, ""), owner: t.owner, reqEnv: t.reqEnv}
	if t.rev == TasksExtension {
		n.method = MethodTaskStatusExtension
	}
	return n
}

// notify sends a status notification to the task's creator, correlated
// with the tools/call that created it.
func (s *Server) notify(ctx context.Context, n *pendingNote) {
	if n == nil {
		return
	}
	params := agent.MustPayload(n.params)
	_, err := s.conn.Send(ctx, agent.Envelope{
		To:            []string{n.owner},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{n.reqEnv},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", Method: n.method, Params: params}),
	})
	if err != nil {
		s.log.Warn("task notification not sent", "request", n.reqEnv, "err", err)
	}
}

// task2025 is 2025-11-25's Task.
type task2025 struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           int64  `json:"ttl"`
	PollInterval  int64  `json:"pollInterval"`
}

// taskExtension is the extension's DetailedTask, and with ResultType set
// its CreateTaskResult and GetTaskResult.
type taskExtension struct {
	ResultType     string          `json:"resultType,omitempty"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          int64           `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         *callResult     `json:"result,omitempty"`
	Error          *agent.RPCError `json:"error,omitempty"`
}

// view is t in its revision's shape. resultType "task" makes a
// CreateTaskResult, "complete" a tasks/get answer, "" a notification's
// params; 2025-11-25 wraps only the CreateTaskResult. Called with s.mu held.
func (s *Server) view(t *task, resultType string) any {
	poll := s.opts.PollInterval
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	const stamp = "2006-01-02T15:04:05.000Z07:00"
	if t.rev == Tasks2025 {
		v := task2025{
			TaskID: t.id, Status: t.status, StatusMessage: t.statusMessage,
			CreatedAt: t.createdAt.UTC().Format(stamp), LastUpdatedAt: t.updatedAt.UTC().Format(stamp),
			TTL: t.ttl.Milliseconds(), PollInterval: poll.Milliseconds(),
		}
		if resultType == "task" {
			return struct {
				Task task2025 `json:"task"`
			}{v}
		}
		return v
	}
	v := taskExtension{
		ResultType: resultType, TaskID: t.id, Status: t.status, StatusMessage: t.statusMessage,
		CreatedAt: t.createdAt.UTC().Format(stamp), LastUpdatedAt: t.updatedAt.UTC().Format(stamp),
		TTLMs: t.ttl.Milliseconds(), PollIntervalMs: poll.Milliseconds(),
	}
	if t.status == StatusCompleted {
		v.Result = t.result
	}
	if t.status == StatusFailed {
		v.Error = t.rpcErr
	}
	return v
}

// errTaskNotFound is the answer for a task that does not exist, has been
// forgotten, or belongs to someone else: the three are not told apart, so
// that no one learns another participant's task ids exist.
var errTaskNotFound = &agent.RPCError{Code: CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}

// taskMethod answers tasks/get, tasks/result, tasks/cancel and tasks/update.
func (s *Server) taskMethod(ctx context.Context, env agent.Envelope, req agent.RPCRequest) {
	s.mu.Lock()
	mode := s.opts.Mode
	s.mu.Unlock()
	if (req.Method == MethodTasksResult && mode == TasksExtension) || (req.Method == MethodTasksUpdate && mode == Tasks2025) {
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeMethodNotFound, Message: "Method not found: " + req.Method})
		return
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	if err := agent.Unmarshal(req.Params, &p); err != nil {
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInvalidParams, Message: "params: " + err.Error()})
		return
	}
	s.mu.Lock()
	s.sweep()
	t, ok := s.tasks[p.TaskID]
	if !ok || t.owner != env.From {
		s.mu.Unlock()
		s.reply(ctx, env, req, nil, errTaskNotFound)
		return
	}
	switch req.Method {
	case MethodTasksGet:
		v := s.view(t, "complete")
		s.mu.Unlock()
		s.reply(ctx, env, req, v, nil)
	case MethodTasksUpdate:
		// No tool here asks for input, so no inputResponses key is ever
		// outstanding: the extension says to ignore them and acknowledge.
		s.mu.Unlock()
		s.reply(ctx, env, req, map[string]string{"resultType": "complete"}, nil)
	case MethodTasksCancel:
		s.cancelTask(ctx, env, req, t)
	case MethodTasksResult:
		s.mu.Unlock()
		s.taskResult(ctx, env, req, t)
	}
}

// cancelTask answers tasks/cancel for t. Called with s.mu held; releases it.
func (s *Server) cancelTask(ctx context.Context, env agent.Envelope, req agent.RPCRequest, t *task) {
	t.cancels++
	if t.terminal() {
		status := t.status
		s.mu.Unlock()
		if t.rev == TasksExtension {
			// Cancellation there is eventually consistent: a task
			// that ended first simply stays ended.
			s.reply(ctx, env, req, map[string]string{"resultType": "complete"}, nil)
			return
		}
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInvalidParams, Message: "Cannot cancel task: already in terminal status '" + status + "'"})
		return
	}
	s.finish(t, StatusCancelled, "The task was cancelled by request.")
	t.cancel()
	answer := s.view(t, "")
	if t.rev == TasksExtension {
		answer = map[string]string{"resultType": "complete"}
	}
	note := s.notification(t)
	s.mu.Unlock()
	s.notify(ctx, note)
	s.reply(ctx, env, req, answer, nil)
}

// taskResult answers 2025-11-25's tasks/result: it waits for t to end, then
// answers what the tools/call would have, naming the task in _meta.
func (s *Server) taskResult(ctx context.Context, env agent.Envelope, req agent.RPCRequest, t *task) {
	s.mu.Lock()
	t.waiters++
	s.mu.Unlock()
	select {
	case <-ctx.Done():
		return
	case <-t.done:
	}
	s.mu.Lock()
	t.waiters--
	status, result, rpcErr := t.status, t.result, t.rpcErr
	s.mu.Unlock()
	switch {
	case status == StatusCancelled:
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInvalidParams, Message: "Task " + t.id + " was cancelled: it has no result"})
	case rpcErr != nil:
		s.reply(ctx, env, req, nil, rpcErr)
	case result == nil:
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInternal, Message: "task ended without a result"})
	default:
		r := *result
		r.Meta = &resultMeta{}
		r.Meta.RelatedTask.TaskID = t.id
		s.reply(ctx, env, req, r, nil)
	}
}

// CreatedTaskID reads the task id from the payload of a JSON-RPC response
// carrying a CreateTaskResult of either revision (result.task.taskId, or
// result.taskId); "" when it carries none. For callers that check what
// the server answered.
func CreatedTaskID(payload json.RawMessage) string {
	var r struct {
		Result struct {
			TaskID string `json:"taskId"`
			Task   struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		} `json:"result"`
	}
	if agent.Unmarshal(payload, &r) != nil {
		return ""
	}
	return r.Result.TaskID + r.Result.Task.TaskID
}
