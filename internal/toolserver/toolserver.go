// Package toolserver is a small MCP tool server that takes part in a MEW
// space: it answers tools/list and tools/call requests addressed to it.
// `fulfiller demo`, `fulfiller bench` and the end-to-end tests use it as the
// participant that owns the tools; it is a fixture, not a product.
package toolserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/mewkit/fulfiller/agent"
)

// Tool is one tool the server offers.
type Tool struct {
	Name        string
	Description string
	InputSchema map[string]any
	Annotations map[string]any // nil: none sent (MCP defaults apply)
	// Call runs the tool. A returned error becomes a tool result with
	// isError true, as MCP asks for failures of the tool itself.
	Call func(ctx context.Context, args json.RawMessage) (string, error)
}

// JSON-RPC error codes the server answers with.
const (
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
)

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
}

// New makes a server for the given tools. log may be nil.
func New(conn Conn, log *slog.Logger, tools ...Tool) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{conn: conn, tools: map[string]Tool{}, log: log, running: map[string]context.CancelFunc{}}
	for _, t := range tools {
		s.tools[t.Name] = t
		s.order = append(s.order, t.Name)
	}
	return s
}

// Serve answers requests from in until ctx ends or in closes. Each call
// runs in its own goroutine, owned by Serve, which waits for them.
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
	if err := json.Unmarshal(env.Payload, &req); err != nil {
		s.log.Warn("unreadable request", "id", env.ID, "err", err)
		return
	}
	switch req.Method {
	case agent.MethodToolsList:
		s.reply(ctx, env, req, map[string]any{"tools": s.list()}, nil)
	case agent.MethodToolsCall:
		s.call(ctx, env, req)
	case agent.MethodCancelled:
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		_ = json.Unmarshal(req.Params, &p)
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
		out = append(out, entry)
	}
	return out
}

func (s *Server) call(ctx context.Context, env agent.Envelope, req agent.RPCRequest) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInvalidParams, Message: "params: " + err.Error()})
		return
	}
	t, ok := s.tools[p.Name]
	if !ok {
		s.reply(ctx, env, req, nil, &agent.RPCError{Code: CodeInvalidParams, Message: "Unknown tool: " + p.Name})
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
	text, err := t.Call(callCtx, p.Arguments)
	if errors.Is(callCtx.Err(), context.Canceled) && ctx.Err() == nil {
		return // cancelled by the requester: MCP says send nothing
	}
	result := callResult{Content: []textContent{{Type: "text", Text: text}}}
	if err != nil {
		result = callResult{Content: []textContent{{Type: "text", Text: err.Error()}}, IsError: true}
	}
	s.reply(ctx, env, req, result, nil)
}

func (s *Server) reply(ctx context.Context, env agent.Envelope, req agent.RPCRequest, result any, rpcErr *agent.RPCError) {
	resp := agent.RPCResponse{JSONRPC: "2.0", ID: req.ID, Error: rpcErr}
	if rpcErr == nil {
		resp.Result = agent.MustPayload(result)
	}
	_, err := s.conn.Send(ctx, agent.Envelope{
		To:            []string{env.From},
		Kind:          agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{env.ID},
		Payload:       agent.MustPayload(resp),
	})
	if err != nil {
		s.log.Warn("response not sent", "request", env.ID, "err", err)
	}
}

// callResult is MCP's CallToolResult. Structs, not maps, so that keys go
// out in the order the recorded reference tool servers use.
type callResult struct {
	Content []textContent `json:"content"`
	IsError bool          `json:"isError,omitempty"`
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
