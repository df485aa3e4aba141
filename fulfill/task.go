package fulfill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/state"
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

// runningTask is the MCP task a fulfilment became. Its fields are
// written under Fulfiller.mu; wake and stop are the follower's.
type runningTask struct {
	id, spec, owner string
	status          string
	created         time.Time
	deadline        time.Time
	poll            time.Duration // the owner's suggestion; 0: none
	request         string        // envelope id of the task-augmented request: the follow-ups' correlation
	stopTimer       func() bool   // the deadline's timer, on Fulfiller.clock
	wake            chan struct{} // a status notification came (capacity 1)
	stop            chan struct{} // closed when the proposal ends
	stopOnce        sync.Once
	cancelOnce      sync.Once
}

func (t *runningTask) info() *TaskInfo {
	if t == nil {
		return nil
	}
	return &TaskInfo{ID: t.id, Spec: t.spec, Status: t.status, Created: t.created, Deadline: t.deadline}
}

func (t *runningTask) end() { t.stopOnce.Do(func() { close(t.stop) }) }

func taskKey(owner, id string) string { return owner + "\x00" + id }

// callsAsTask reports whether a call to tool at target goes out
// task-augmented: the tool requires it, or allows it and the decision
// asks for it.
func (f *Fulfiller) callsAsTask(p *proposal, target string) bool {
	if p.method != agent.MethodToolsCall || p.tool == "" {
		return false
	}
	info, ok := f.catalog.tool(target, p.tool)
	if !ok {
		return false
	}
	switch info.TaskSupport() {
	case TaskRequired:
		return true
	case TaskOptional:
		return p.decision.Task
	}
	return false
}

// taskTimeout is how long the task may run once created.
func (f *Fulfiller) taskTimeout(p *proposal) time.Duration {
	if p.decision.TaskTimeout > 0 {
		return p.decision.TaskTimeout
	}
	return f.cfg.TaskTimeout
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
	members, err := objectMembers(params)
	if err != nil {
		return params // validated as an object on admission; cannot happen
	}
	var meta []jsonMember
	hasMeta, changed := false, false
	out := members[:0:0]
	for _, m := range members {
		switch m.key {
		case "task":
			changed = true
			continue
		case "_meta":
			ms, err := objectMembers(m.val)
			if err != nil {
				out = append(out, m) // not ours to mend; the owner judges it
				continue
			}
			hasMeta = true
			for _, x := range ms {
				if x.key == metaClientCaps {
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
		out = append(out, jsonMember{"task", agent.MustPayload(map[string]int64{"ttl": ttl.Milliseconds()})})
		meta = append(meta, jsonMember{metaClientCaps, json.RawMessage(`{"extensions":{"` + extensionTasks + `":{}}}`)})
		hasMeta = true
	}
	if hasMeta {
		out = append(out, jsonMember{"_meta", writeObject(meta)})
	}
	return writeObject(out)
}

// jsonMember is one key of a JSON object, its value as written.
type jsonMember struct {
	key string
	val json.RawMessage
}

// objectMembers reads a JSON object's members in order.
func objectMembers(raw json.RawMessage) ([]jsonMember, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []jsonMember
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		out = append(out, jsonMember{key, val})
	}
	return out, nil
}

// writeObject writes members as a JSON object, in order.
func writeObject(ms []jsonMember) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.val)
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
	if json.Unmarshal(result, &r) != nil {
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

// taskAnswered handles the answer to a task-augmented fulfilment request
// (on the reader, after the request's write was reported): a task is
// followed; anything else is the call's outcome, relayed at once, since
// the proposer saw no request named after its proposal.
func (f *Fulfiller) taskAnswered(p *proposal, resp agent.RPCResponse) {
	s, spec, isTask := taskHandle(resp.Result)
	if resp.Error != nil || !isTask {
		_, next, ok := f.end(p, StateFulfilled, isState(StateFulfilling))
		if !ok {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.relay(p, nil, resp.Result, resp.Error)
			f.release(p, StateFulfilled, next)
		}()
		return
	}
	now := f.clock.Now()
	t := &runningTask{id: s.TaskID, spec: spec, owner: p.target, status: s.Status, created: now,
		poll: s.poll(), request: p.requestID, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	f.mu.Lock()
	if p.State() != StateFulfilling {
		f.mu.Unlock()
		return
	}
	t.deadline = now.Add(f.taskTimeout(p))
	p.state.Store(int32(StateTask))
	p.task = t
	next := f.freeSlotLocked(p)
	f.byTask[taskKey(t.owner, t.id)] = p
	t.stopTimer = f.clock.AfterFunc(t.deadline.Sub(f.clock.Now()), func() { f.taskTimedOut(p) })
	f.mu.Unlock()
	f.log.Info("fulfilment runs as a task at its tool owner", "proposal", p.env.ID, "target", p.target, "task", t.id, "spec", spec, "deadline", t.deadline)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for _, q := range next {
			f.sendRequest(q)
		}
		if err := f.saveRecord(p, func(r *state.Pending) {
			r.Phase = state.Running
			r.Task = &state.Task{ID: t.id, Spec: t.spec, Status: t.status, Created: t.created.UTC(), Deadline: t.deadline.UTC(), Poll: t.poll.Milliseconds()}
		}); err != nil {
			// Fail closed: a task whose record is lost would be followed by
			// nobody after a crash. Stop it while we still can.
			if _, ok := f.transition(p, StateRejected, isState(StateTask)); ok {
				f.cancelTask(p, t)
				if p.fenced.Load() {
					f.notAnsweredHere(p, "other")
					return
				}
				f.log.Error("pending-work store cannot record the task; cancelled, proposal rejected", "proposal", p.env.ID, "task", t.id, "err", err)
				f.answerReject(p, decision.ReasonOther, storeUnavailable)
			}
			return
		}
		f.taskEvent(p, t, "")
		f.follow(p, t)
	}()
}

// taskEvent reports the task's (new) status.
func (f *Fulfiller) taskEvent(p *proposal, t *runningTask, message string) {
	f.mu.Lock()
	ev := p.event(StageTask)
	ev.Task = t.info()
	f.mu.Unlock()
	ev.Message = message
	f.emit(ev)
	f.sendStatus(p, ev)
}

// follow follows t until it ends, the proposal ends, or shutdown.
func (f *Fulfiller) follow(p *proposal, t *runningTask) {
	wait := t.poll
	backoff := defaultTaskPoll
	var last time.Time
	for {
		d := wait
		if d <= 0 {
			d = backoff
			backoff = min(2*backoff, maxTaskPoll)
		}
		d = min(max(d, minTaskPoll), maxTaskPoll)
		timer := time.NewTimer(d)
		select {
		case <-t.stop:
			timer.Stop()
			return
		case <-f.runCtx.Done():
			timer.Stop()
			return
		case <-t.wake:
			timer.Stop()
			// A notification is a hint (anyone can send one in the owner's
			// name): the owner's answer to tasks/get is what counts, at
			// most one per minTaskPoll however many hints come.
			if gap := minTaskPoll - time.Since(last); gap > 0 && !sleepStop(t.stop, gap) {
				return
			}
		case <-timer.C:
		}
		last = time.Now()
		s, err := f.taskGet(p, t)
		switch {
		case errors.Is(err, errTaskGone):
			if _, ok := f.transition(p, StateRejected, isState(StateTask)); ok {
				f.answerReject(p, decision.ReasonOther, fmt.Sprintf("%s no longer knows task %s: %v", t.owner, t.id, err))
			}
			return
		case err != nil:
			f.log.Warn("task status not read; trying again", "proposal", p.env.ID, "task", t.id, "err", err)
			continue
		}
		if s.poll() > 0 {
			wait = s.poll()
		}
		if s.terminal() {
			f.finishTask(p, t, s)
			return
		}
		f.mu.Lock()
		changed := s.Status != t.status
		t.status = s.Status
		f.mu.Unlock()
		if changed {
			_ = f.noteRecord(p, func(r *state.Pending) {
				if r.Task != nil {
					r.Task.Status = s.Status
				}
			})
			f.taskEvent(p, t, s.StatusMessage)
		}
	}
}

func sleepStop(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// errTaskGone: the owner says it does not know the task (expired, or
// never made): nothing more will come of it.
var errTaskGone = errors.New("task not found")

// taskRequest sends a task method to the task's owner and waits for the
// answer, correlated to the task-augmented request.
func (f *Fulfiller) taskRequest(t *runningTask, method string) (agent.RPCResponse, error) {
	f.mu.Lock()
	parent := f.stopCtx
	if parent == nil {
		parent = f.sendsCtx
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(parent, f.cfg.FulfillTimeout)
	defer cancel()
	return f.space.RequestEnvelope(ctx, taskEnvelope(t, method, nil))
}

// taskEnvelope is a task method for t's owner, correlated to the
// task-augmented request; id nil: RequestEnvelope gives it one.
func taskEnvelope(t *runningTask, method string, id json.RawMessage) agent.Envelope {
	return agent.Envelope{
		To:            []string{t.owner},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{t.request},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", ID: id, Method: method, Params: agent.MustPayload(map[string]string{"taskId": t.id})}),
	}
}

// taskGet asks the owner where the task stands.
func (f *Fulfiller) taskGet(p *proposal, t *runningTask) (taskState, error) {
	resp, err := f.taskRequest(t, methodTasksGet)
	if err != nil {
		return taskState{}, err
	}
	if resp.Error != nil {
		if resp.Error.Code == codeTaskNotFound {
			return taskState{}, fmt.Errorf("%w: %s", errTaskGone, resp.Error.Message)
		}
		return taskState{}, resp.Error
	}
	var s taskState
	if err := json.Unmarshal(resp.Result, &s); err != nil || !s.valid() || s.TaskID != t.id {
		return taskState{}, fmt.Errorf("tasks/get answer from %s is not task %s: %s", t.owner, t.id, resp.Result)
	}
	return s, nil
}

// finishTask relays the outcome of a task that ended at its owner.
func (f *Fulfiller) finishTask(p *proposal, t *runningTask, s taskState) {
	result, rpcErr := s.Result, s.Error
	if t.spec == TaskSpec2025 {
		// The 2025-11-25 Task carries no result: tasks/result returns
		// exactly what the call would have.
		resp, err := f.taskRequest(t, methodTasksResult)
		if err != nil {
			f.log.Warn("task result not read", "proposal", p.env.ID, "task", t.id, "err", err)
			rpcErr = &agent.RPCError{Code: codeTaskEnded, Message: fmt.Sprintf("task %s %s at %s, and its result could not be read: %v", t.id, s.Status, t.owner, err)}
		} else {
			result, rpcErr = resp.Result, resp.Error
		}
	}
	if s.Status == taskStatusCancelled && rpcErr == nil && len(result) == 0 {
		rpcErr = &agent.RPCError{Code: codeTaskEnded, Message: fmt.Sprintf("task %s was cancelled at %s", t.id, t.owner)}
	}
	if s.Status == taskStatusFailed && rpcErr == nil && len(result) == 0 {
		rpcErr = &agent.RPCError{Code: codeTaskEnded, Message: fmt.Sprintf("task %s failed at %s: %s", t.id, t.owner, s.StatusMessage)}
	}
	f.mu.Lock()
	t.status = s.Status
	f.mu.Unlock()
	_, next, ok := f.end(p, StateFulfilled, isState(StateTask))
	if !ok {
		return
	}
	f.relay(p, t, result, rpcErr)
	f.release(p, StateFulfilled, next)
}

// relay gives the proposer the outcome of a task-augmented fulfilment the
// way MEW proposers take a fulfilment's result: an mcp/request correlated
// to the proposal (tasks/result, addressed to this fulfiller, which
// holds the result), then the mcp/response to it, to the proposer.
func (f *Fulfiller) relay(p *proposal, t *runningTask, result json.RawMessage, rpcErr *agent.RPCError) {
	taskID := ""
	if t != nil {
		taskID = t.id
	}
	rpc := json.RawMessage(strconv.FormatInt(f.space.NextRPCID(), 10))
	req := agent.Envelope{
		ID:            agent.NewID(f.space.ID()),
		To:            []string{f.space.ID()},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{p.env.ID},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", ID: rpc, Method: methodTasksResult, Params: agent.MustPayload(map[string]string{"taskId": taskID})}),
	}
	resp := agent.RPCResponse{JSONRPC: "2.0", ID: rpc, Error: rpcErr}
	if rpcErr == nil {
		resp.Result = result
		if len(resp.Result) == 0 {
			resp.Result = json.RawMessage(`{}`)
		}
	}
	ev := p.event(StageFulfilled)
	ev.Task, ev.Result, ev.Latency, ev.By = t.info(), resp.Result, f.clock.Now().Sub(p.requestSent), p.approvedBy
	if rpcErr != nil {
		ev.RPCError = agent.MustPayload(rpcErr)
	}
	if p.fenced.Load() {
		f.log.Info("task result not relayed: the proposal's record is another member's now", "proposal", p.env.ID, "task", taskID)
		return
	}
	if err := f.send(req); err != nil {
		f.log.Error("task result not relayed: request not written", "proposal", p.env.ID, "task", taskID, "err", err)
		f.undelivered(p, agent.KindRequest, UndeliveredNotWritten, err.Error())
		return
	}
	if err := f.send(agent.Envelope{To: []string{p.env.From}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{req.ID}, Payload: agent.MustPayload(resp)}); err != nil {
		f.log.Error("task result not relayed: response not written", "proposal", p.env.ID, "task", taskID, "err", err)
		f.undelivered(p, agent.KindResponse, UndeliveredNotWritten, err.Error())
		return
	}
	f.emit(ev)
}

// cancelTask sends tasks/cancel for t, once whatever ends the proposal
// (a withdrawal, an operator, the deadline, shutdown). Its answer is not
// awaited: cancellation is cooperative in both revisions, and nothing
// about the proposal depends on it.
func (f *Fulfiller) cancelTask(p *proposal, t *runningTask) {
	if p.fenced.Load() {
		return // the adopter follows the task now
	}
	t.cancelOnce.Do(func() {
		env := taskEnvelope(t, methodTasksCancel, json.RawMessage(strconv.FormatInt(f.space.NextRPCID(), 10)))
		if q, ok := f.space.(Queuer); ok {
			// Kept until the link is back, like notifications/cancelled:
			// a task left running after its proposal ended is work
			// nobody wants.
			ctx, cancel := f.sendContext()
			defer cancel()
			if _, queued, err := q.SendOrQueue(ctx, env); err != nil {
				f.log.Warn("tasks/cancel not sent", "proposal", p.env.ID, "task", t.id, "target", t.owner, "err", err)
			} else if queued {
				f.log.Warn("tasks/cancel kept until the link is back", "proposal", p.env.ID, "task", t.id, "target", t.owner)
			}
			return
		}
		if err := f.send(env); err != nil {
			f.log.Warn("tasks/cancel not sent", "proposal", p.env.ID, "task", t.id, "target", t.owner, "err", err)
			return
		}
		f.log.Info("tasks/cancel sent", "proposal", p.env.ID, "task", t.id, "target", t.owner)
	})
}

// endTask is what ending a proposal in StateTask releases. Called with
// f.mu held.
func (f *Fulfiller) endTaskLocked(p *proposal) {
	t := p.task
	if t == nil {
		return
	}
	stopTimer(t.stopTimer)
	t.end()
	delete(f.byTask, taskKey(t.owner, t.id))
}

// taskTimedOut: the task ran past its deadline. It is cancelled at its
// owner and the proposer gets reject "timeout".
func (f *Fulfiller) taskTimedOut(p *proposal) {
	if _, ok := f.transition(p, StateRejected, isState(StateTask)); !ok {
		return
	}
	f.mu.Lock()
	t := p.task
	f.mu.Unlock()
	f.cancelTask(p, t)
	f.answerReject(p, decision.ReasonTimeout, fmt.Sprintf("task %s at %s did not end within %s", t.id, t.owner, f.taskTimeout(p)))
}

// onTaskStatus takes a status notification about one of our tasks as a
// hint to ask the owner now. Only notifications in the owner's name about
// a task of ours count; the follower asks at most once per minTaskPoll.
func (f *Fulfiller) onTaskStatus(env agent.Envelope, params json.RawMessage) {
	var s taskState
	if json.Unmarshal(params, &s) != nil || s.TaskID == "" {
		return
	}
	f.mu.Lock()
	p, ok := f.byTask[taskKey(env.From, s.TaskID)]
	var t *runningTask
	if ok {
		t = p.task
	}
	f.mu.Unlock()
	if !ok {
		f.log.Debug("status of a task that is not ours ignored", "from", env.From, "task", s.TaskID)
		return
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// resumeTask follows a task recorded before a restart (or by a lapsed
// member): the request is never written again, and the task keeps its
// deadline.
func (f *Fulfiller) resumeTask(p *proposal, r *state.Pending) {
	rt := r.Task
	t := &runningTask{id: rt.ID, spec: rt.Spec, owner: r.Request.Target, status: rt.Status, created: rt.Created, deadline: rt.Deadline,
		poll: time.Duration(rt.Poll) * time.Millisecond, request: r.Request.EnvelopeID, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	f.mu.Lock()
	p.target, p.requestID, p.rpcID, p.requestSent, p.taskAug = r.Request.Target, r.Request.EnvelopeID, r.Request.RPCID, r.Request.SentAt, true
	p.written = make(chan struct{})
	close(p.written)
	p.task = t
	p.state.Store(int32(StateTask))
	f.byTask[taskKey(t.owner, t.id)] = p
	t.stopTimer = f.clock.AfterFunc(t.deadline.Sub(f.clock.Now()), func() { f.taskTimedOut(p) })
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.taskEvent(p, t, "followed again after a restart or adoption")
		f.follow(p, t)
	}()
}
