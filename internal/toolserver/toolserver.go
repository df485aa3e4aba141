// Package toolserver is a small MCP tool server that takes part in a MEW
// space: it answers tools/list and tools/call requests addressed to it.
// `fulfiller demo`, `fulfiller bench` and the end-to-end tests use it as the
// participant that owns the tools; it is a fixture, not a product.
//
// Tools that declare execution.taskSupport also run as MCP tasks, in
// either revision of tasks: MCP 2025-11-25's and the
// io.modelcontextprotocol/tasks extension's (see TasksMode), so that
// fulfiller's task-following can be tested against a faithful receiver.
package toolserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/mewkit/fulfiller/agent"
)

// Tool is one tool the server offers.
type Tool struct {
	Name        string
	Description string
	InputSchema map[string]any
	Annotations map[string]any // nil: none sent (MCP defaults apply)
	// TaskSupport is the tool's execution.taskSupport: TaskOptional,
	// TaskRequired, TaskForbidden, or "" to declare nothing (which MCP
	// reads as forbidden).
	TaskSupport string
	// Call runs the tool. A returned error becomes a tool result with
	// isError true, as MCP asks for failures of the tool itself, unless it
	// is (or wraps) an *agent.RPCError: that one is answered as the
	// JSON-RPC error, so a fixture can play a protocol-level failure (and a
	// task's "failed" status).
	Call func(ctx context.Context, args json.RawMessage) (string, error)
}

// Values of Tool.TaskSupport, as MCP spells them.
const (
	TaskOptional  = "optional"
	TaskRequired  = "required"
	TaskForbidden = "forbidden"
)

// JSON-RPC error codes the server answers with.
const (
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	// CodeMissingCapability is the tasks extension's "Missing required
	// client capability".
	CodeMissingCapability = -32003
)

// Style is how a server answers, as the two kinds of tool owner seen in
// real MEW spaces do.
type Style int

const (
	// StyleJSONRPC answers as an MCP server speaking JSON-RPC: every
	// answer echoes jsonrpc and the request's id, tools/list carries
	// annotations and execution, unknown methods get -32601, and
	// notifications/cancelled stops the call.
	StyleJSONRPC Style = iota
	// StyleSDK answers as a participant built on the MEW reference SDK's
	// MEWParticipant does — `mew bridge` in front of an MCP server, the
	// template agents (recorded in the conformance file sdk-bridge.jsonl):
	// payload {"result": …} or {"error": …} with no jsonrpc and no id, a
	// uuid envelope id, tools/list with name, description and inputSchema
	// only (the bridge drops annotations and execution), an unknown tool
	// as error -32603 "Tool not found: NAME", and silence for every
	// method it does not handle (tasks, notifications/cancelled: the call
	// runs on and is answered).
	StyleSDK
)

// ParseStyle reads a Style by name: "jsonrpc" or "sdk".
func ParseStyle(name string) (Style, error) {
	switch name {
	case "jsonrpc":
		return StyleJSONRPC, nil
	case "sdk":
		return StyleSDK, nil
	}
	return 0, fmt.Errorf("tool style %q: want jsonrpc or sdk", name)
}

// String names the style as ParseStyle reads it.
func (s Style) String() string {
	if s == StyleSDK {
		return "sdk"
	}
	return "jsonrpc"
}

// Conn is what the server needs of its MEW session; *agent.Client has it.
type Conn interface {
	ID() string
	Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error)
}

// Server answers MCP requests with its tools.
type Server struct {
	conn  Conn
	tools map[string]Tool
	order []string
	log   *slog.Logger

	mu      sync.Mutex
	running map[string]context.CancelFunc // request envelope id → cancel
	calls   int
	opts    TaskOptions
	tasks   map[string]*task // task id → task
	made    int              // tasks made so far, for their creation order
	now     func() time.Time // the clock of task timestamps and TTLs; tests replace it
	style   Style
}

// SetStyle makes the server answer in the given style; call it before
// Serve.
func (s *Server) SetStyle(st Style) {
	s.mu.Lock()
	s.style = st
	s.mu.Unlock()
}

func (s *Server) sdk() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.style == StyleSDK
}

// New makes a server for the given tools. log may be nil.
func New(conn Conn, log *slog.Logger, tools ...Tool) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{conn: conn, tools: map[string]Tool{}, log: log, running: map[string]context.CancelFunc{},
		tasks: map[string]*task{}, now: time.Now}
	for _, t := range tools {
		s.tools[t.Name] = t
		s.order = append(s.order, t.Name)
	}
	return s
}

// Serve answers requests from in until ctx ends or in closes. Each call,
// and each task's run of its tool, is a goroutine owned by Serve, which
// waits for them; ctx's end cancels them.
func (s *Server) Serve(ctx context.Context, in <-chan agent.Envelope) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case env, ok := <-in:
			if !ok {
				return nil
			}
			if env.Kind != agent.KindRequest || !env.AddressedTo(s.conn.ID()) || env.From == s.conn.ID() {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.handle(ctx, env)
			}()
		}
	}
}

// Calls reports how many tools/call requests the server has carried out,
// so tests can prove a call was not made twice.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *Server) handle(ctx context.Context, env agent.Envelope) {
	var req agent.RPCRequest
	if err := agent.Unmarshal(env.Payload, &req); err != nil {
		s.log.Warn("unreadable request", "id", env.ID, "err", err)
		return
	}
	if s.sdk() {
		s.handleSDK(ctx, env, req)
		return
	}
	switch req.Method {
	case agent.MethodToolsList:
		s.reply(ctx, env, req, map[string]any{"tools": s.list()}, nil)
	case agent.MethodToolsCall:
		s.call(ctx, env, req)
	case MethodTasksGet, MethodTasksResult, MethodTasksCancel, MethodTasksUpdate:
		if req.ID == nil {
			return // not a request: there is no one to answer
		}
		s.taskMethod(ctx, env, req)
	case agent.MethodCancelled:
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		_ = agent.Unmarshal(req.Params, &p)
		s.mu.Lock()
		if cancel, ok := s.running[env.CorrelationID.First()]; ok {
			cancel()
		}
		s.mu.Unlock()
	default:
		if req.ID == nil {
			return // a notification we do not know: nothing to answer
		}
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeMethodNotFound, Message: "Method not found: " + req.Method})
	}
}

// handleSDK answers as MEWParticipant.handleMCPRequest does: tools/list
// and tools/call, nothing else.
func (s *Server) handleSDK(ctx context.Context, env agent.Envelope, req agent.RPCRequest) {
	switch req.Method {
	case agent.MethodToolsList:
		tools := make([]sdkTool, 0, len(s.order))
		for _, name := range s.order {
			t := s.tools[name]
			schema := t.InputSchema
			if schema == nil {
				schema = map[string]any{"type": "object"}
			}
			tools = append(tools, sdkTool{Name: t.Name, Description: t.Description, InputSchema: schema})
		}
		s.reply(ctx, env, req, map[string]any{"tools": tools}, nil)
	case agent.MethodToolsCall:
		var p callParams
		if err := agent.Unmarshal(req.Params, &p); err != nil || len(req.Params) == 0 || string(req.Params) == "null" {
			// The SDK destructures params and throws a TypeError.
			s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInternal, Message: "Cannot destructure property 'name' of 'params' as it is undefined."})
			return
		}
		t, ok := s.tools[p.Name]
		if !ok {
			s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInternal, Message: "Tool not found: " + p.Name})
			return
		}
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
		// No cancellation: the SDK hands notifications/cancelled to no
		// one, and the bridge's call runs to its end and is answered.
		result, rpcErr := runTool(ctx, t, p.Arguments)
		if ctx.Err() != nil {
			return
		}
		s.reply(ctx, env, req, result, rpcErr)
	default:
		// Handed to request handlers; the bridge has none: no answer,
		// not even an error.
	}
}

// sdkTool is a tools/list entry as the reference SDK lists it: the three
// fields it keeps, in its order.
type sdkTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

func (s *Server) list() []map[string]any {
	out := make([]map[string]any, 0, len(s.order))
	for _, name := range s.order {
		t := s.tools[name]
		schema := t.InputSchema
		if schema == nil {
			schema = map[string]any{"type": "object"}
		}
		entry := map[string]any{"name": t.Name, "description": t.Description, "inputSchema": schema}
		if t.Annotations != nil {
			entry["annotations"] = t.Annotations
		}
		if t.TaskSupport != "" {
			entry["execution"] = map[string]any{"taskSupport": t.TaskSupport}
		}
		out = append(out, entry)
	}
	return out
}

func (s *Server) call(ctx context.Context, env agent.Envelope, req agent.RPCRequest) {
	var p callParams
	if err := agent.Unmarshal(req.Params, &p); err != nil {
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInvalidParams, Message: "params: " + err.Error()})
		return
	}
	t, ok := s.tools[p.Name]
	if !ok {
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInvalidParams, Message: "Unknown tool: " + p.Name})
		return
	}
	rev, asTask, rpcErr := s.taskRevision(t, p)
	if rpcErr != nil {
		s.reply(ctx, env, req, nil, rpcErr)
		return
	}
	if asTask {
		s.runTask(ctx, env, req, t, p, rev)
		return
	}
	callCtx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.calls++
	s.running[env.ID] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, env.ID)
		s.mu.Unlock()
		cancel()
	}()
	result, rpcErr := runTool(callCtx, t, p.Arguments)
	if errors.Is(callCtx.Err(), context.Canceled) && ctx.Err() == nil {
		return // cancelled by the requester: MCP says send nothing
	}
	if rpcErr != nil {
		s.reply(ctx, env, req, nil, rpcErr)
		return
	}
	s.reply(ctx, env, req, result, nil)
}

// callParams is what tools/call carries, including both revisions' ways
// of asking for a task.
type callParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// Task is the 2025-11-25 task augmentation; nil when absent or null.
	Task *struct {
		TTL *float64 `json:"ttl"`
	} `json:"task"`
	Meta struct {
		ClientCapabilities struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		} `json:"io.modelcontextprotocol/clientCapabilities"`
	} `json:"_meta"`
}

// runTool runs t and turns what it returns into a CallToolResult or, for
// an *agent.RPCError, the JSON-RPC error to answer with.
func runTool(ctx context.Context, t Tool, args json.RawMessage) (callResult, *agent.RPCError) {
	text, err := t.Call(ctx, args)
	if err == nil {
		return callResult{Content: []textContent{{Type: "text", Text: text}}}, nil
	}
	if rpcErr, ok := errors.AsType[*agent.RPCError](err); ok {
		return callResult{}, rpcErr
	}
	return callResult{Content: []textContent{{Type: "text", Text: err.Error()}}, IsError: true}, nil
}

func (s *Server) reply(ctx context.Context, env agent.Envelope, req agent.RPCRequest, result any, rpcErr *agent.RPCError) {
	resp := agent.RPCResponse{JSONRPC: "2.0", ID: req.ID, Error: rpcErr}
	if rpcErr == nil {
		resp.Result = agent.MustPayload(result)
	}
	out := agent.Envelope{
		To:            []string{env.From},
		Kind:          agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{env.ID},
		Payload:       agent.MustPayload(resp),
	}
	if s.sdk() {
		// payload: error ? {error} : {result}, under a uuid envelope id.
		resp.JSONRPC, resp.ID = "", nil
		out.ID, out.Payload = uuid.NewString(), agent.MustPayload(resp)
	}
	_, err := s.conn.Send(ctx, out)
	if err != nil {
		s.log.Warn("response not sent", "request", env.ID, "err", err)
	}
}

// callResult is MCP's CallToolResult. Structs, not maps, so that keys go
// out in the order the recorded reference tool servers use.
type callResult struct {
	Content []textContent `json:"content"`
	IsError bool          `json:"isError,omitempty"`
	Meta    *resultMeta   `json:"_meta,omitempty"`
}

// resultMeta is the _meta of a tasks/result answer, which names its task
// because the CallToolResult itself does not.
type resultMeta struct {
	RelatedTask struct {
		TaskID string `json:"taskId"`
	} `json:"io.modelcontextprotocol/related-task"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ErrBadArguments is what the sample tools return for arguments they
// cannot use; it becomes an isError result.
var ErrBadArguments = errors.New("bad arguments")

func badArgs(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadArguments, fmt.Sprintf(format, args...))
}
