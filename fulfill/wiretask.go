package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// The wire's side of MCP tasks (task.go's follow, taskGet, finishTask,
// relay, cancelTask and onTaskStatus, over the core's effects): the core
// records the task and its end; the wire follows it at its owner and
// writes the relay and tasks/cancel.

// wireTaskHandle is what the reader saw of a task handle (the answer to
// a task-augmented request): the revision its owner speaks, the poll
// interval it suggests, and when it was read.
type wireTaskHandle struct {
	spec    string
	status  string
	poll    time.Duration
	created time.Time
}

// taskCreated tells the wire what the reader read of the answer of
// owner to a task-augmented request (its result), when the reader posts
// it to the core as Responded: the revision the owner speaks, its poll
// interval and when the task was made, which the core's FollowTask and
// Status do not carry. It reports whether result is a task handle.
func (w *wire) taskCreated(owner string, result json.RawMessage, at time.Time) bool {
	s, spec, ok := taskHandle(result)
	if !ok {
		return false
	}
	w.handles.Add(taskKey(owner, s.TaskID), wireTaskHandle{spec: spec, status: s.Status, poll: s.poll(), created: at})
	return true
}

// taskInfo is the task a Status reports, as observers see it (TaskInfo).
func (w *wire) taskInfo(s lifecycle.Status) *TaskInfo {
	info := &TaskInfo{ID: s.TaskID, Status: s.TaskStatus, Deadline: s.Deadline}
	if h, ok := w.handles.Peek(taskKey(s.Target, s.TaskID)); ok {
		info.Spec, info.Created = h.spec, h.created
	}
	return info
}

// taskFollower is one FollowTask running.
type taskFollower struct {
	proposalID, owner, taskID, request string
	wake                               chan struct{} // a status notification came (capacity 1)
}

// FollowTask follows the task at its owner until it ends or ctx does
// (task.go's follow): tasks/get at the owner's poll interval (within
// minTaskPoll and maxTaskPoll) or a backoff from defaultTaskPoll, a
// status notification (taskNotice) asking at once, at most once per
// minTaskPoll. A new status is reported as TaskStatus; the end as
// TaskEnded with what the call returned (tasks/result for 2025-11-25,
// inline for the extension; the error of a task that ended without
// one), or Gone when the owner no longer knows the task.
func (w *wire) FollowTask(ctx context.Context, ft lifecycle.FollowTask, report func(lifecycle.Event)) {
	f := &taskFollower{proposalID: ft.ID, owner: ft.To, taskID: ft.TaskID, request: ft.RequestEnvelopeID, wake: make(chan struct{}, 1)}
	key := taskKey(ft.To, ft.TaskID)
	w.mu.Lock()
	w.followers[key] = f
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.followers[key] == f {
			delete(w.followers, key)
		}
		w.mu.Unlock()
	}()
	h, _ := w.handles.Peek(key)
	status, wait := h.status, h.poll
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
		case <-ctx.Done():
			timer.Stop()
			return
		case <-f.wake:
			timer.Stop()
			// A notification is a hint (anyone can send one in the owner's
			// name): the owner's answer to tasks/get is what counts, at
			// most one per minTaskPoll however many hints come.
			if gap := minTaskPoll - time.Since(last); gap > 0 && !sleepCtx(ctx, gap) {
				return
			}
		case <-timer.C:
		}
		last = time.Now()
		s, spec, err := w.taskGet(ctx, f)
		switch {
		case errors.Is(err, errTaskGone):
			report(lifecycle.TaskEnded{ID: ft.ID, TaskID: ft.TaskID, Gone: err.Error()})
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("task status not read; trying again", "proposal", ft.ID, "task", ft.TaskID, "err", err)
			continue
		}
		if h.spec == "" {
			// Followed again after a restart: the revision is the one
			// its tasks/get answer speaks.
			h.spec = spec
			w.handles.Add(key, wireTaskHandle{spec: spec, status: s.Status, poll: s.poll(), created: h.created})
		}
		if s.poll() > 0 {
			wait = s.poll()
		}
		if s.terminal() {
			result, rpcErr := w.taskOutcome(ctx, f, h.spec, s)
			ended := lifecycle.TaskEnded{ID: ft.ID, TaskID: ft.TaskID, Status: s.Status, Result: result}
			if rpcErr != nil {
				ended.Result, ended.Error = nil, agent.MustPayload(rpcErr)
			}
			report(ended)
			return
		}
		if s.Status != status {
			status = s.Status
			report(lifecycle.TaskStatus{ID: ft.ID, TaskID: ft.TaskID, Status: s.Status, Message: s.StatusMessage})
		}
	}
}

// taskRequest sends a task method to the task's owner and waits for the
// answer, correlated to the task-augmented request, bounded by the
// fulfil timeout (task.go's taskRequest).
func (w *wire) taskRequest(ctx context.Context, f *taskFollower, method string) (agent.RPCResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.FulfillTimeout)
	defer cancel()
	return w.space.RequestEnvelope(ctx, wireTaskEnvelope(f.owner, f.taskID, f.request, method, nil))
}

// wireTaskEnvelope is a task method for the task's owner, correlated to
// the task-augmented request; id nil: RequestEnvelope gives it one.
func wireTaskEnvelope(owner, taskID, request, method string, id json.RawMessage) agent.Envelope {
	return agent.Envelope{
		To:            []string{owner},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{request},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", ID: id, Method: method, Params: agent.MustPayload(map[string]string{"taskId": taskID})}),
	}
}

// taskGet asks the owner where the task stands (task.go's taskGet); spec
// is the revision the answer speaks (the extension's carries a
// resultType).
func (w *wire) taskGet(ctx context.Context, f *taskFollower) (s taskState, spec string, err error) {
	resp, err := w.taskRequest(ctx, f, methodTasksGet)
	if err != nil {
		return taskState{}, "", err
	}
	if resp.Error != nil {
		if resp.Error.Code == codeTaskNotFound {
			return taskState{}, "", fmt.Errorf("%w: %s", errTaskGone, resp.Error.Message)
		}
		return taskState{}, "", resp.Error
	}
	if err := agent.Unmarshal(resp.Result, &s); err != nil || !s.valid() || s.TaskID != f.taskID {
		return taskState{}, "", fmt.Errorf("tasks/get answer from %s is not task %s: %s", f.owner, f.taskID, resp.Result)
	}
	spec = TaskSpec2025
	if s.ResultType != "" {
		spec = TaskSpecExtension
	}
	return s, spec, nil
}

// taskOutcome is what a task that ended returned (task.go's
// finishTask): for 2025-11-25, tasks/result's answer; for the
// extension, the terminal tasks/get answer's result or error; and the
// error of a task cancelled or failed without one.
func (w *wire) taskOutcome(ctx context.Context, f *taskFollower, spec string, s taskState) (json.RawMessage, *agent.RPCError) {
	result, rpcErr := s.Result, s.Error
	if spec == TaskSpec2025 {
		// The 2025-11-25 Task carries no result: tasks/result returns
		// exactly what the call would have.
		resp, err := w.taskRequest(ctx, f, methodTasksResult)
		if err != nil {
			w.log.Warn("task result not read", "proposal", f.proposalID, "task", f.taskID, "err", err)
			rpcErr = &agent.RPCError{Code: codeTaskEnded, Message: fmt.Sprintf("task %s %s at %s, and its result could not be read: %v", f.taskID, s.Status, f.owner, err)}
		} else {
			result, rpcErr = resp.Result, resp.Error
		}
	}
	if s.Status == taskStatusCancelled && rpcErr == nil && len(result) == 0 {
		rpcErr = &agent.RPCError{Code: codeTaskEnded, Message: fmt.Sprintf("task %s was cancelled at %s", f.taskID, f.owner)}
	}
	if s.Status == taskStatusFailed && rpcErr == nil && len(result) == 0 {
		rpcErr = &agent.RPCError{Code: codeTaskEnded, Message: fmt.Sprintf("task %s failed at %s: %s", f.taskID, f.owner, s.StatusMessage)}
	}
	return result, rpcErr
}

// taskNotice takes a task status notification addressed to this
// fulfiller (notifications/tasks/status, or the extension's
// notifications/tasks) as a hint: the follower of the task it names, in
// its owner's name, asks the owner now (task.go's onTaskStatus). It
// reports whether env was such a notification about a task followed.
func (w *wire) taskNotice(env agent.Envelope) bool {
	if env.Kind != agent.KindRequest || !env.AddressedTo(w.space.ID()) {
		return false
	}
	var req agent.RPCRequest
	if agent.Unmarshal(env.Payload, &req) != nil || (req.Method != methodTaskStatus && req.Method != methodTaskStatusExt) {
		return false
	}
	var s taskState
	if agent.Unmarshal(req.Params, &s) != nil || s.TaskID == "" {
		return false
	}
	w.mu.Lock()
	f := w.followers[taskKey(env.From, s.TaskID)]
	w.mu.Unlock()
	if f == nil {
		w.log.Debug("status of a task that is not ours ignored", "from", env.From, "task", s.TaskID)
		return false
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return true
}

// CancelTask sends tasks/cancel for the task to its owner (task.go's
// cancelTask), through the Queuer when the Space has one; its answer is
// not awaited (cancellation is cooperative). The Loop stopped the
// follower before, and sends nothing for DropReason.
func (w *wire) CancelTask(ctx context.Context, c lifecycle.CancelTask) {
	env := wireTaskEnvelope(c.To, c.TaskID, c.RequestEnvelopeID, methodTasksCancel, json.RawMessage(strconv.FormatInt(w.space.NextRPCID(), 10)))
	if w.sendOrQueue(ctx, env, "tasks/cancel", "proposal", c.ID, "task", c.TaskID, "target", c.To) == nil {
		w.log.Info("tasks/cancel sent", "proposal", c.ID, "task", c.TaskID, "target", c.To)
	}
}

// SendRelay gives the proposer the outcome of its task-augmented
// fulfilment (task.go's relay): an mcp/request tasks/result correlated
// to the proposal, addressed to this fulfiller (which holds the result),
// then the mcp/response to it, to the proposer, whose result or error is
// what the tool call returned. The ids are the committed relay's.
func (w *wire) SendRelay(ctx context.Context, r lifecycle.SendRelay) error {
	rpc := json.RawMessage(strconv.FormatInt(r.RPCID, 10))
	req := agent.Envelope{
		ID:            r.EnvelopeID,
		To:            []string{w.space.ID()},
		Kind:          agent.KindRequest,
		CorrelationID: agent.CorrelationIDs{r.ID},
		Payload:       agent.MustPayload(agent.RPCRequest{JSONRPC: "2.0", ID: rpc, Method: methodTasksResult, Params: agent.MustPayload(map[string]string{"taskId": r.TaskID})}),
	}
	resp := agent.RPCResponse{JSONRPC: "2.0", ID: rpc}
	if len(r.Error) > 0 {
		var rpcErr agent.RPCError
		if err := agent.Unmarshal(r.Error, &rpcErr); err != nil {
			// Recorded by the core from what the follower or the reader
			// read as an error object; relayed as the error it was.
			rpcErr = agent.RPCError{Code: codeTaskEnded, Message: fmt.Sprintf("the call failed with an unreadable error: %s", r.Error)}
		}
		resp.Error = &rpcErr
	} else {
		resp.Result = r.Result
		if len(resp.Result) == 0 {
			resp.Result = json.RawMessage(`{}`)
		}
	}
	if err := w.send(ctx, req); err != nil {
		w.log.Error("task result not relayed: request not written", "proposal", r.ID, "task", r.TaskID, "err", err)
		w.hooks.events.undelivered(r.ID, agent.KindRequest, UndeliveredNotWritten, err.Error())
		return fmt.Errorf("relay %s of proposal %s: %w", r.EnvelopeID, r.ID, err)
	}
	if err := w.send(ctx, agent.Envelope{To: []string{r.To}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{req.ID}, Payload: agent.MustPayload(resp)}); err != nil {
		w.log.Error("task result not relayed: response not written", "proposal", r.ID, "task", r.TaskID, "err", err)
		w.hooks.events.undelivered(r.ID, agent.KindResponse, UndeliveredNotWritten, err.Error())
		return fmt.Errorf("relay response of proposal %s: %w", r.ID, err)
	}
	w.hooks.events.written(r.ID, r.EnvelopeID)
	return nil
}
