package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
)

// Request sends an MCP request to one participant and waits for its answer:
// an mcp/request envelope with payload {jsonrpc:"2.0", id, method, params}
// (params left out when nil), where id is unique within this Client. The
// answer is the mcp/response whose correlation_id[0] is the request
// envelope's id and whose from is `to`; answers from anyone else are
// ignored and logged, because the gateway does not authenticate from. A
// JSON-RPC error comes back in RPCResponse.Error, not as a Go error. ctx
// bounds the whole call; the request keeps waiting across reconnects.
func (c *Client) Request(ctx context.Context, to, method string, params any) (RPCResponse, error) {
	req := RPCRequest{JSONRPC: "2.0", ID: c.NewRPCID(), Method: method}
	if params != nil {
		raw, err := json.Marshal(params)
		if err != nil {
			return RPCResponse{}, fmt.Errorf("request %s to %s: params: %w", method, to, err)
		}
		req.Params = raw
	}
	payload, err := json.Marshal(req)
	if err != nil {
		return RPCResponse{}, fmt.Errorf("request %s to %s: %w", method, to, err)
	}
	return c.RequestEnvelope(ctx, Envelope{To: []string{to}, Kind: KindRequest, Payload: payload})
}

// NewRPCID returns a JSON-RPC id not used before by this Client, for
// callers that build request payloads themselves.
func (c *Client) NewRPCID() json.RawMessage {
	return strconv.AppendInt(nil, c.NextRPCID(), 10)
}

// NextRPCID returns a JSON-RPC id (a positive integer) not used before by
// this Client. Every request the process sends takes its id from here —
// discovery, fulfilment and elicitation alike — so no peer ever sees an id
// twice (MCP forbids reusing one in a session; DESIGN rule 11). The ids
// fit in 53 bits, so JavaScript peers read them exactly; members of a
// group (several fulfillers) can later be told apart by giving each its
// own block of the high bits here.
func (c *Client) NextRPCID() int64 {
	return c.rpcSeq.Add(1)
}

// RequestEnvelope is Request for callers that need control of the
// envelope: set env.ID beforehand to know the request's id (to cancel it
// later with notifications/cancelled), or add correlation_id or context.
// env.To must name exactly one participant, the one expected to answer;
// Kind defaults to mcp/request; a payload without a JSON-RPC id gets a
// fresh one.
func (c *Client) RequestEnvelope(ctx context.Context, env Envelope) (RPCResponse, error) {
	if env.Kind == "" {
		env.Kind = KindRequest
	}
	if env.Kind != KindRequest {
		return RPCResponse{}, fmt.Errorf("request: kind is %q, want %s", env.Kind, KindRequest)
	}
	if len(env.To) != 1 || env.To[0] == "" || env.To[0] == c.cfg.ID {
		return RPCResponse{}, fmt.Errorf("request: to must name exactly one other participant, got %q", env.To)
	}
	var req RPCRequest
	if err := json.Unmarshal(env.Payload, &req); err != nil || req.Method == "" {
		return RPCResponse{}, fmt.Errorf("request to %s: payload is not a JSON-RPC request", env.To[0])
	}
	if len(req.ID) == 0 || string(req.ID) == "null" {
		req.ID = c.NewRPCID()
		if req.JSONRPC == "" {
			req.JSONRPC = "2.0"
		}
		payload, err := json.Marshal(req)
		if err != nil {
			return RPCResponse{}, fmt.Errorf("request %s to %s: %w", req.Method, env.To[0], err)
		}
		env.Payload = payload
	}
	if env.ID == "" {
		env.ID = NewID(c.cfg.ID)
	}

	// Register before sending: the answer may arrive before our own echo,
	// even before Send returns.
	wait := c.pending.add(env.ID, env.To[0])
	defer c.pending.remove(env.ID)
	if _, err := c.Send(ctx, env); err != nil {
		return RPCResponse{}, fmt.Errorf("request %s to %s: %w", req.Method, env.To[0], err)
	}
	select {
	case r := <-wait:
		if r.err != nil {
			return RPCResponse{}, fmt.Errorf("request %s to %s: %w", req.Method, env.To[0], r.err)
		}
		return r.resp, nil
	case <-ctx.Done():
		return RPCResponse{}, fmt.Errorf("request %s %s to %s: %w", req.Method, env.ID, env.To[0], ctx.Err())
	case <-c.ctx.Done():
		return RPCResponse{}, fmt.Errorf("request %s %s to %s: %w", req.Method, env.ID, env.To[0], ErrClosed)
	}
}

// pendingCalls matches mcp/response envelopes to waiting requests. It is
// driven by envelopes only, like spaceState.
type pendingCalls struct {
	mu sync.Mutex
	m  map[string]*call // by request envelope id
}

type call struct {
	to string
	ch chan callResult // capacity 1: resolve never blocks
}

type callResult struct {
	resp RPCResponse
	err  error
}

func (p *pendingCalls) add(id, to string) <-chan callResult {
	ch := make(chan callResult, 1)
	p.mu.Lock()
	p.m[id] = &call{to: to, ch: ch}
	p.mu.Unlock()
	return ch
}

func (p *pendingCalls) remove(id string) {
	p.mu.Lock()
	delete(p.m, id)
	p.mu.Unlock()
}

func (p *pendingCalls) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// errBadResponse means the right participant answered with a payload that
// is not a JSON-RPC response.
var errBadResponse = errors.New("malformed mcp/response payload")

// resolve hands a response to the request it answers, if any. It reports
// whether env answered a pending request.
func (p *pendingCalls) resolve(env Envelope, log *slog.Logger) bool {
	id := env.CorrelationID.First()
	if id == "" {
		return false
	}
	p.mu.Lock()
	c, ok := p.m[id]
	switch {
	case !ok:
		p.mu.Unlock()
		return false
	case env.From != c.to:
		p.mu.Unlock()
		log.Warn("ignored mcp/response from a participant the request was not sent to",
			slog.String("request", id), slog.String("from", env.From), slog.String("want", c.to), slog.String("envelope", env.ID))
		return false
	}
	delete(p.m, id)
	p.mu.Unlock()
	var r callResult
	if err := json.Unmarshal(env.Payload, &r.resp); err != nil {
		r.err = fmt.Errorf("%w %s: %v", errBadResponse, env.ID, err)
	}
	c.ch <- r
	return true
}
