package fulfill

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// MCP tasks: a tool that declares execution.taskSupport "required" (or
// "optional", when the decision says "task": true) is called
// task-augmented. Its owner answers with a task handle at once; the
// --fulfill-timeout watch ends there, and the task's own deadline starts
// (the decision's task_timeout, else Config.TaskTimeout). The task is
// followed — status notifications wake the follower, tasks/get polling
// with the owner's pollInterval (or a backoff) is the authority — to its
// end, and its result is relayed to the proposer; a withdrawal, an
// operator's cancel, shutdown or the deadline sends tasks/cancel, once.
//
// Both revisions are spoken, since fulfiller cannot tell which one the
// owner implements before it answers: every task-augmented request
// carries the 2025-11-25 params.task and the 2026-07-28 extension's
// per-request capability in params._meta; the shape of the answer
// (result.task, or resultType "task") says which the owner speaks, and
// the follow-up messages use that one.
//
// What the proposer sees. The reference SDK proposer resolves a proposal
// on the first mcp/response to an mcp/request whose correlation_id[0] is
// the proposal (docs/tasks.md quotes its source). The task-augmented
// request therefore does not name the proposal — its answer is a task
// handle, which the SDK would take for the tool's result — and the end of
// the task is relayed as a pair this fulfiller writes: an mcp/request
// "tasks/result" {taskId} correlated to the proposal and addressed to
// itself, then the mcp/response to it, to the proposer, whose result (or
// error) is exactly what the tool call would have returned.

// Task spec revisions, as recorded and shown.
const (
	TaskSpec2025      = "2025-11-25"
	TaskSpecExtension = "2026-07-28"
)

// MCP task methods, statuses and _meta keys, of both revisions.
const (
	methodTasksGet      = "tasks/get"
	methodTasksResult   = "tasks/result" // 2025-11-25; also the relay's method (see relay)
	methodTasksCancel   = "tasks/cancel"
	methodTaskStatus    = "notifications/tasks/status" // 2025-11-25
	methodTaskStatusExt = "notifications/tasks"        // 2026-07-28 extension
	metaClientCaps      = "io.modelcontextprotocol/clientCapabilities"
	extensionTasks      = "io.modelcontextprotocol/tasks"

	taskStatusWorking   = "working"
	taskStatusInput     = "input_required"
	taskStatusCompleted = "completed"
	taskStatusFailed    = "failed"
	taskStatusCancelled = "cancelled"

	codeTaskNotFound = -32602 // tasks/get of a task the owner does not know (both revisions)
	codeTaskEnded    = -32603 // what a task that ended without a result is relayed as
)

// How often a task is polled: the owner's pollInterval, within these
// bounds, else a backoff from defaultTaskPoll. minTaskPoll is also the
// most a flood of status notifications can make the follower ask.
const (
	defaultTaskPoll = time.Second
	minTaskPoll     = 100 * time.Millisecond
	maxTaskPoll     = 30 * time.Second
)

// TaskInfo is a running task as events and the operator API show it.
type TaskInfo struct {
	ID       string    `json:"id"`
	Spec     string    `json:"spec"`
	Status   string    `json:"status"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
}

// requestParams are the params of the fulfilment request: the call as
// proposed (or as edited and checked again), where fulfiller owns two
// fields. A proposer cannot follow a task (it may only propose), so its
// own params.task, and its own per-request client capabilities in
// params._meta, are left out: with them a tool owner would make a task of
// a call nobody follows. A task-augmented call gets fulfiller's: the
// 2025-11-25 task with a ttl of the task's timeout, and the extension's
// capability. Key order is kept; nothing changes for other calls.
func requestParams(params json.RawMessage, task bool, ttl time.Duration) json.RawMessage {
	members, err := agent.Members(params)
	if err != nil {
		return params // validated as an object on admission; cannot happen
	}
	var meta []agent.Member
	hasMeta, changed := false, false
	out := members[:0:0]
	for _, m := range members {
		switch m.Key {
		case "task":
			changed = true
			continue
		case "_meta":
			ms, err := agent.Members(m.Value)
			if err != nil {
				out = append(out, m) // not ours to mend; the owner judges it
				continue
			}
			hasMeta = true
			for _, x := range ms {
				if x.Key == metaClientCaps {
					changed = true
					continue
				}
				meta = append(meta, x)
			}
			continue
		}
		out = append(out, m)
	}
	if !changed && !task {
		return params
	}
	if task {
		out = append(out, agent.Member{Key: "task", Value: agent.MustPayload(map[string]int64{"ttl": ttl.Milliseconds()})})
		meta = append(meta, agent.Member{Key: metaClientCaps, Value: json.RawMessage(`{"extensions":{"` + extensionTasks + `":{}}}`)})
		hasMeta = true
	}
	if hasMeta {
		out = append(out, agent.Member{Key: "_meta", Value: writeObject(meta)})
	}
	return writeObject(out)
}

// writeObject writes members as a JSON object, in order.
func writeObject(ms []agent.Member) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.Key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.Value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// taskState is a task as either revision writes it: a 2025-11-25 Task
// (tasks/get, notifications/tasks/status, CreateTaskResult.task) or an
// extension DetailedTask (CreateTaskResult, tasks/get, with its result or
// error inline once it ends).
type taskState struct {
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	PollInterval   int64           `json:"pollInterval,omitempty"`
	PollIntervalMs int64           `json:"pollIntervalMs,omitempty"`
	ResultType     string          `json:"resultType,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *agent.RPCError `json:"error,omitempty"`
}

func (s taskState) valid() bool {
	switch s.Status {
	case taskStatusWorking, taskStatusInput, taskStatusCompleted, taskStatusFailed, taskStatusCancelled:
		return s.TaskID != ""
	}
	return false
}

func (s taskState) terminal() bool {
	return s.Status == taskStatusCompleted || s.Status == taskStatusFailed || s.Status == taskStatusCancelled
}

func (s taskState) poll() time.Duration {
	ms := max(s.PollInterval, s.PollIntervalMs)
	return time.Duration(ms) * time.Millisecond
}

// taskHandle reads the answer to a task-augmented request: a
// CreateTaskResult of either revision, or (ok false) an ordinary result.
func taskHandle(result json.RawMessage) (s taskState, spec string, ok bool) {
	var r struct {
		Task *taskState `json:"task"`
		taskState
	}
	if agent.Unmarshal(result, &r) != nil {
		return taskState{}, "", false
	}
	switch {
	case r.ResultType == "task" && r.taskState.valid():
		return r.taskState, TaskSpecExtension, true
	case r.ResultType == "" && r.Task != nil && r.Task.valid():
		return *r.Task, TaskSpec2025, true
	}
	return taskState{}, "", false
}

// errTaskGone: the owner says it does not know the task (expired, or
// never made): nothing more will come of it.
var errTaskGone = errors.New("task not found")

func taskKey(owner, id string) string { return owner + "\x00" + id }
