package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
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
	id, err := c.RPCID(ctx)
	if err != nil {
		return RPCResponse{}, fmt.Errorf("request %s to %s: %w", method, to, err)
	}
	req := RPCRequest{JSONRPC: "2.0", ID: strconv.AppendInt(nil, id, 10), Method: method}
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

// NewRPCID returns a JSON-RPC id not used before, for callers that build
// request payloads themselves; see NextRPCID for what "0" means.
func (c *Client) NewRPCID() json.RawMessage {
	return strconv.AppendInt(nil, c.NextRPCID(), 10)
}

// maxRPCID keeps ids exact for JavaScript peers (2^53 - 1).
const maxRPCID = 1<<53 - 1

// RPCID returns a JSON-RPC id (a positive integer below 2^53) not used
// before, from Config.RPCIDs. Every request the process sends takes its id
// from there — discovery, fulfilment and elicitation alike — so no peer
// ever sees an id twice (MCP forbids reusing one in a session; docs/design.md rule
// 11). When none can be had the error wraps ErrNoRPCID.
func (c *Client) RPCID(ctx context.Context) (int64, error) {
	id, err := c.cfg.RPCIDs(ctx)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: %w", ErrNoRPCID, err)
	case id < 1 || id > maxRPCID:
		return 0, fmt.Errorf("%w: the id source gave %d", ErrNoRPCID, id)
	}
	return id, nil
}

// rpcIDTimeout bounds NextRPCID's wait for Config.RPCIDs.
const rpcIDTimeout = 5 * time.Second

// NextRPCID is RPCID for callers that cannot take an error (fulfill.Space,
// elicit.Conn): it waits at most rpcIDTimeout and returns 0 when no id can
// be had. 0 is never a valid id here: Send and SendOrQueue refuse an
// mcp/request whose JSON-RPC id is 0 (ErrNoRPCID), so the request is not
// sent rather than sent with a reused id.
func (c *Client) NextRPCID() int64 {
	ctx, cancel := context.WithTimeout(c.ctx, rpcIDTimeout)
	defer cancel()
	id, err := c.RPCID(ctx)
	if err != nil {
		c.log.Error("no JSON-RPC id for a request; it will not be sent", slog.Any("error", err))
		return 0
	}
	return id
}

// checkRPCID refuses an mcp/request whose JSON-RPC id is 0: the id
// NextRPCID returns when it has none.
func checkRPCID(env Envelope) error {
	if env.Kind != KindRequest {
		return nil
	}
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if Unmarshal(env.Payload, &p) == nil && string(p.ID) == "0" {
		return fmt.Errorf("send %s %s: %w", env.Kind, env.ID, ErrNoRPCID)
	}
	return nil
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
	if err := Unmarshal(env.Payload, &req); err != nil || req.Method == "" {
		return RPCResponse{}, fmt.Errorf("request to %s: payload is not a JSON-RPC request", env.To[0])
	}
	if len(req.ID) == 0 || string(req.ID) == "null" {
		id, err := c.RPCID(ctx)
		if err != nil {
			return RPCResponse{}, fmt.Errorf("request %s to %s: %w", req.Method, env.To[0], err)
		}
		req.ID = strconv.AppendInt(nil, id, 10)
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
	wait := c.pending.add(env.ID, env.To[0], req.ID)
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
	to    string
	rpcID json.RawMessage // the request's JSON-RPC id, which an answer may echo
	ch    chan callResult // capacity 1: resolve never blocks
}

type callResult struct {
	resp RPCResponse
	err  error
}

func (p *pendingCalls) add(id, to string, rpcID json.RawMessage) <-chan callResult {
	ch := make(chan callResult, 1)
	p.mu.Lock()
	p.m[id] = &call{to: to, rpcID: rpcID, ch: ch}
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
// whether env answered a pending request. An answer names its request by
// correlation_id[0] and must come from the participant the request went
// to; a JSON-RPC id in its payload is optional (reference-SDK peers send
// none) but must be the request's when present (docs/design.md rule 12).
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
	var r callResult
	resp, err := DecodeAnswer(env.Payload, c.rpcID)
	if errors.Is(err, ErrWrongRPCID) {
		// Not this request's answer: the real one may still come.
		p.mu.Unlock()
		log.Warn("ignored mcp/response with another JSON-RPC id (spoof attempt?)",
			slog.String("request", id), slog.String("from", env.From), slog.String("envelope", env.ID), slog.Any("error", err))
		return false
	}
	delete(p.m, id)
	p.mu.Unlock()
	r.resp = resp
	if err != nil {
		r.err = fmt.Errorf("%s: %w", env.ID, err)
	}
	c.ch <- r
	return true
}
