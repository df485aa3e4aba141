package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The wire layer: a tools/call taken at the mcp.Connection, on both
// sides, rather than through the SDK's jsonrpc2 dispatch.
//
// The SDK hands every request it reads to a handler goroutine, and
// every call it makes waits on a goroutine the reader wakes: on a
// loaded machine each of those hand-offs wakes a parked thread, and
// together they cost more than the decision (issue 40: the bare go-sdk
// relay alone doubled a local call's round trip). So the clients'
// connections (ServeStdio) and the upstreams' (stdio and in-process
// ones) are wrapped: a client's tools/call is read and proposed on the
// goroutine that read it (frontConn), its request goes upstream on the
// engine's goroutine, its response is taken on the goroutine that read
// it (upConn), and the answer is written on the engine's. Everything
// else (initialize, lists, resources, prompts, ping, elicitation and
// its answers, notifications) goes through the SDK's sessions as
// before, which still own the connections: their framing, limits and
// errors are the SDK's, since the wrappers sit above its Connection.

// frontTransport is a client's transport whose tools/calls the Front
// takes at the connection (frontConn).
type frontTransport struct {
	mcp.Transport
	f    *Front
	u    *upstream
	conn *frontConn // set by Connect
}

// Connect connects the client's transport and wraps its connection.
func (t *frontTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	fc := &frontConn{f: t.f, u: t.u, ctx: cctx, cancel: cancel, calls: map[jsonrpc.ID]*directCall{}}
	var c mcp.Connection
	var err error
	if r, w, limit, closeStream, ok := lineStream(t.Transport); ok {
		c, err = newLineConn(ctx, r, w, limit, fc.rawFrame, closeStream)
	} else {
		c, err = t.Transport.Connect(ctx)
	}
	if err != nil {
		cancel(err)
		return nil, err
	}
	fc.Connection = c // before the session exists (ss), which divert waits for
	t.conn = fc
	return fc, nil
}

// frontConn is a client's connection. A tools/call the SDK would hand
// to the passThrough middleware unchanged (the session initialized
// through the handshake at a revision before 2026-07-28, params that
// decode, a name, arguments that are an object, no requestState) is
// proposed on the reading goroutine and answered by the Front on the
// same connection (directCall); a notifications/cancelled naming such a
// call cancels it. Every other frame, a tools/call the SDK is to refuse
// included, is returned to the SDK as it came.
type frontConn struct {
	mcp.Connection
	f  *Front
	u  *upstream
	ss atomic.Pointer[mcp.ServerSession] // set once the session exists

	// ctx is the parent of the diverted calls' contexts: it ends, with
	// the connection's read error as its cause, when the client leaves
	// or the session is closed.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	calls map[jsonrpc.ID]*directCall // diverted calls not yet answered, by the client's id
}

// directCall is a client's tools/call the Front answers on the
// connection itself.
type directCall struct {
	id     jsonrpc.ID
	ctx    context.Context
	cancel context.CancelCauseFunc
	// newProto: the request is of the sessionless revision (SEP-2575:
	// its _meta names 2026-07-28 or later), whose results name the
	// server (annotateServerInfo, the SDK's).
	newProto bool
}

// requestRevision reads a tools/call's _meta as the SDK's session does
// (validateRequestMeta): newProto when it names the sessionless
// revision. ok false leaves the call to the SDK: a revision other than
// the session's, or _meta the SDK might refuse.
func requestRevision(meta mcp.Meta, session string) (newProto, ok bool) {
	v, named := meta[metaProtocolVersion].(string)
	if !named || v < mrtrVersion {
		return false, true
	}
	if v != session {
		return false, false
	}
	if ci, present := meta[metaClientInfo]; present {
		if m, isObj := ci.(map[string]any); !isObj || !isString(m["name"]) {
			return false, false
		}
	}
	if _, isObj := meta[metaClientCapabilities].(map[string]any); !isObj {
		return false, false
	}
	return true, true
}

func isString(v any) bool { _, ok := v.(string); return ok }

// errClientGone is the cause of a diverted call's context when its
// client's connection ended: a disconnection (withdrawReason), not a
// cancellation.
var errClientGone = errors.New("the client's connection ended")

// Read reads the next frame the SDK is to see.
func (c *frontConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		m, err := c.Connection.Read(ctx)
		if err != nil {
			c.end(err)
			return nil, err
		}
		r, ok := m.(*jsonrpc.Request)
		if !ok {
			return m, nil
		}
		switch r.Method {
		case "tools/call":
			if r.IsCall() && c.divert(r) {
				continue
			}
			stamp(r)
		case "notifications/cancelled":
			if !r.IsCall() && c.cancelled(r) {
				continue
			}
		}
		return m, nil
	}
}

// Close closes the connection; the calls still diverted end with it.
func (c *frontConn) Close() error {
	c.end(errors.New("closed"))
	return c.Connection.Close()
}

// end cancels every diverted call: the client is gone.
func (c *frontConn) end(err error) {
	c.cancel(fmt.Errorf("%w: %w", errClientGone, err))
}

// callParams are a tools/call's params as the Front reads them: the
// SDK's type, so that what is read is what the SDK would have read.
type callParams = mcp.CallToolParamsRaw

// divert takes r, a tools/call, when the Front can answer it itself as
// the SDK's session would have had it answered: false leaves it to the
// SDK (which refuses it, or hands it to passThrough).
func (c *frontConn) divert(r *jsonrpc.Request) bool {
	ss := c.ss.Load()
	if ss == nil || c.f.cfg.Reattach != nil || len(r.Params) == 0 {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil {
		return false // before initialize: the SDK refuses it
	}
	// Read strictly (names matched exactly, no duplicates): a call the
	// SDK's more lenient decoding might read otherwise is left to it.
	var params callParams
	if err := readCallParams(r.Params, &params); err != nil {
		return false
	}
	if params.RequestState != "" || params.InputResponses != nil {
		return false // a 2026-07-28 client's retry: resume
	}
	newProto, ok := requestRevision(params.Meta, ip.ProtocolVersion)
	if !ok {
		return false
	}
	if checkCall(&params) != nil {
		return false // the SDK's path answers the same error
	}
	rpcID, ok := rpcIDText(r.ID)
	if !ok {
		return false
	}
	c.mu.Lock()
	if c.calls[r.ID] != nil {
		c.mu.Unlock()
		// What jsonrpc2 answers a request whose id is in use.
		c.write(r.ID, nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("JSON RPC invalid request: request ID %v already in use", r.ID.Raw())})
		return true
	}
	ctx, cancel := context.WithCancelCause(c.ctx)
	dc := &directCall{id: r.ID, ctx: ctx, cancel: cancel, newProto: newProto}
	c.calls[r.ID] = dc
	c.mu.Unlock()
	req := &mcp.CallToolRequest{Session: ss, Params: &params}
	c.f.callDirect(ctx, c.u, req, json.RawMessage(rpcID), func(raw json.RawMessage, res *mcp.CallToolResult, err error) {
		c.answer(dc, raw, res, err)
	})
	return true
}

// readCallParams reads a tools/call's params into p strictly (names
// matched exactly, no duplicates, valid UTF-8), as jsonv2.Unmarshal
// does: in one pass when they hold only _meta and arguments (objects)
// and a name (a string with no escape), the common call; otherwise by
// jsonv2.Unmarshal itself. The arguments are copied: raw may be a
// reader's buffer, and they go into the proposal.
func readCallParams(raw []byte, p *callParams) error {
	s := getScanner()
	defer putScanner(s)
	if len(raw) > 0 && raw[0] == '{' && s.scanText(raw) && !s.loose && fastCallParams(s.rec, p) {
		return nil
	}
	*p = callParams{}
	return jsonv2.Unmarshal(raw, p)
}

// fastCallParams fills p from params' members: false when one is not
// of the common shape (readCallParams).
func fastCallParams(members []member, p *callParams) bool {
	for _, m := range members {
		switch v := m.value; string(m.name) {
		case `"name"`:
			if v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
				return false
			}
			p.Name = string(v[1 : len(v)-1])
		case `"arguments"`:
			if v[0] != '{' {
				return false
			}
			p.Arguments = bytes.Clone(v)
		case `"_meta"`:
			meta, ok := decodeAny(v)
			m, isObj := meta.(map[string]any)
			if !ok || !isObj {
				return false
			}
			p.Meta = m
		default:
			return false
		}
	}
	return true
}

// metaProtocolVersion is the _meta key of a request of the sessionless
// revision (SEP-2575), which the SDK's session handles apart.
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaServerInfo         = "io.modelcontextprotocol/serverInfo"
)

// answer writes dc's response and forgets it.
func (c *frontConn) answer(dc *directCall, raw json.RawMessage, res *mcp.CallToolResult, err error) {
	c.mu.Lock()
	if c.calls[dc.id] == dc {
		delete(c.calls, dc.id)
	}
	c.mu.Unlock()
	if dc.newProto && err == nil {
		raw, err = c.u.annotate(raw, res)
	}
	c.write(dc.id, raw, res, err)
	dc.cancel(nil)
}

// write writes the response to the call id: raw (a result as JSON), else
// res, else err, as the SDK's jsonrpc2 would have written them.
func (c *frontConn) write(id jsonrpc.ID, raw json.RawMessage, res *mcp.CallToolResult, err error) {
	resp := &jsonrpc.Response{ID: id, Result: raw}
	switch {
	case raw != nil:
	case err != nil:
		resp.Error = err
	case res == nil:
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no result"}
	default:
		b, merr := json.Marshal(res)
		if merr != nil {
			resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the result cannot be written: " + merr.Error()}
		}
		resp.Result = b
	}
	if lc, ok := c.Connection.(*lineConn); ok && resp.Error == nil {
		if done, werr := lc.writeResult(id, resp.Result); done {
			if werr != nil {
				c.f.log.Debug("mcp response not written: the client is gone", "id", id.Raw(), "err", werr)
			}
			return
		}
	}
	if werr := c.Connection.Write(context.Background(), resp); werr != nil {
		c.f.log.Debug("mcp response not written: the client is gone", "id", id.Raw(), "err", werr)
	}
}

// cancelled cancels the diverted call a notifications/cancelled names;
// false: it names none (the SDK's, or none at all).
func (c *frontConn) cancelled(r *jsonrpc.Request) bool {
	var params struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(r.Params, &params) != nil {
		return false
	}
	id, err := jsonrpc.MakeID(params.RequestID)
	if err != nil {
		return false
	}
	c.mu.Lock()
	dc := c.calls[id]
	c.mu.Unlock()
	if dc == nil {
		return false
	}
	dc.cancel(nil) // the cause context.Canceled: withdrawn as cancelled
	return true
}

// stamp puts a tools/call's JSON-RPC id where the handler finds it
// (rpcIDOf): the SDK does not expose it.
func stamp(r *jsonrpc.Request) {
	if id, ok := rpcIDText(r.ID); ok {
		r.Extra = &mcp.RequestExtra{Header: map[string][]string{rpcIDHeader: {id}}}
	}
}

// directPrefix begins the ids of the tools/calls the Front sends on an
// upstream's connection itself: strings, which the SDK's client (whose
// ids are integers) never uses, so the two never collide.
const directPrefix = "fulfiller:"

// upTransport is an upstream's transport whose connection the Front
// also sends tools/calls on (upConn).
type upTransport struct {
	mcp.Transport
	f    *Front
	name string
	conn *upConn // set by Connect
}

// Connect connects the upstream's transport and wraps its connection.
func (t *upTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	uc := &upConn{f: t.f, name: t.name, pending: map[string]func(*jsonrpc.Response, error){}}
	var c mcp.Connection
	var err error
	switch tt := t.Transport.(type) {
	case *mcp.CommandTransport:
		r, w, closeStream, serr := startCommand(tt)
		if serr != nil {
			return nil, serr
		}
		if c, err = newLineConn(ctx, r, w, 0, uc.rawFrame, closeStream); err != nil {
			_ = closeStream()
		}
	case *mcp.IOTransport:
		r, w, limit, closeStream, _ := lineStream(tt)
		c, err = newLineConn(ctx, r, w, limit, uc.rawFrame, closeStream)
	default:
		c, err = t.Transport.Connect(ctx)
	}
	if err != nil {
		return nil, err
	}
	uc.Connection = c // before any call of the Front's is sent on it
	t.conn = uc
	return uc, nil
}

// upConn is an upstream's connection: the SDK's client session's, on
// which the Front also sends tools/calls of its own (call). Their
// responses are taken on the reading goroutine and handed to the
// call's done, never to the SDK; a response of that prefix that no
// call waits for (cancelled, or never sent) is dropped.
type upConn struct {
	mcp.Connection
	f    *Front
	name string
	next atomic.Uint64

	mu      sync.Mutex
	pending map[string]func(*jsonrpc.Response, error)
	ended   error // why no more responses come

	// meta is the _meta the SDK's client puts on each request of the
	// sessionless revision (SEP-2575: protocolVersion, clientInfo,
	// clientCapabilities), as it put it on its first tools/list: the
	// Front's calls carry the same. metaSeen: that request was written.
	metaSeen atomic.Bool
	meta     map[string]json.RawMessage
	metaJSON json.RawMessage // meta encoded (nil: none)
}

// Write writes m, noting the SDK's request _meta (meta) until seen.
func (c *upConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if !c.metaSeen.Load() {
		if r, ok := m.(*jsonrpc.Request); ok && r.Method == "tools/list" {
			var p struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			if json.Unmarshal(r.Params, &p) == nil {
				meta := map[string]json.RawMessage{}
				for _, k := range []string{metaProtocolVersion, metaClientInfo, metaClientCapabilities} {
					if v, ok := p.Meta[k]; ok {
						meta[k] = v
					}
				}
				var metaJSON json.RawMessage
				if len(meta) > 0 {
					metaJSON, _ = json.Marshal(meta)
				}
				c.mu.Lock()
				c.meta, c.metaJSON = meta, metaJSON
				c.mu.Unlock()
				c.metaSeen.Store(true)
			}
		}
	}
	return c.Connection.Write(ctx, m)
}

// requestMeta is the _meta of the Front's calls (see meta), and as
// JSON; ok false when the SDK's was never seen.
func (c *upConn) requestMeta() (map[string]json.RawMessage, json.RawMessage, bool) {
	if !c.metaSeen.Load() {
		return nil, nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.meta, c.metaJSON, true
}

// Read reads the next frame the SDK is to see.
func (c *upConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		m, err := c.Connection.Read(ctx)
		if err != nil {
			c.end(err)
			return nil, err
		}
		resp, ok := m.(*jsonrpc.Response)
		if !ok {
			return m, nil
		}
		if !c.response(resp) {
			return m, nil
		}
	}
}

// response hands resp to the call of the Front's it answers (true), or
// drops it when no call waits for it any more; false: it is not for
// the Front (the SDK's).
func (c *upConn) response(resp *jsonrpc.Response) bool {
	id, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(id, directPrefix) {
		return false
	}
	c.mu.Lock()
	done := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if done == nil {
		c.f.log.Debug("mcp upstream response for no call waiting; dropped", "upstream", c.name, "id", id)
		return true
	}
	done(resp, nil)
	return true
}

// Close closes the connection; the calls out on it fail.
func (c *upConn) Close() error {
	c.end(errors.New("its connection closed"))
	return c.Connection.Close()
}

// end fails every call out: no response comes for them any more.
func (c *upConn) end(err error) {
	c.mu.Lock()
	if c.ended == nil {
		c.ended = err
	}
	pending := c.pending
	c.pending = map[string]func(*jsonrpc.Response, error){}
	c.mu.Unlock()
	for _, done := range pending {
		done(nil, err)
	}
}

// call sends a tools/call with params as id (newID): done gets its response (on the
// reading goroutine) or why none comes, exactly once, unless cancel
// takes it first. An error: nothing was sent, done is never called.
func (c *upConn) call(id string, params json.RawMessage, done func(*jsonrpc.Response, error)) error {
	c.mu.Lock()
	if c.ended != nil {
		c.mu.Unlock()
		return c.ended
	}
	c.pending[id] = done
	c.mu.Unlock()
	var err error
	sent := false
	if lc, ok := c.Connection.(*lineConn); ok {
		sent, err = lc.writeCall(id, "tools/call", params)
	}
	if !sent {
		var rid jsonrpc.ID
		if rid, err = jsonrpc.MakeID(id); err == nil {
			err = c.Connection.Write(context.Background(), &jsonrpc.Request{ID: rid, Method: "tools/call", Params: params})
		}
	}
	if err != nil {
		c.mu.Lock()
		_, still := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if still {
			return err
		}
		// The read loop ended meanwhile and failed it: done was called.
	}
	return nil
}

// newID is the id of a call to send (call).
func (c *upConn) newID() string {
	return directPrefix + strconv.FormatUint(c.next.Add(1), 10)
}

// cancel takes call id back from the connection and tells the upstream
// (notifications/cancelled): it returns the call's done, which the
// caller calls, or nil when its response (or failure) came first.
func (c *upConn) cancel(id, reason string) func(*jsonrpc.Response, error) {
	c.mu.Lock()
	done := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	params, err := json.Marshal(map[string]any{"requestId": id, "reason": reason})
	if err == nil {
		err = c.Connection.Write(context.Background(), &jsonrpc.Request{Method: "notifications/cancelled", Params: params})
	}
	if err != nil {
		c.f.log.Debug("mcp cancellation not sent upstream", "upstream", c.name, "id", id, "err", err)
	}
	return done
}

// directAllowed: the Front sends tools/calls on t's connection itself.
// Not over HTTP, where a call is a request of its own that the SDK
// makes with headers of the tool's (Mcp-Param-*), which the Front does
// not.
func directAllowed(t mcp.Transport) bool {
	switch t.(type) {
	case *mcp.StreamableClientTransport, *mcp.SSEClientTransport:
		return false
	}
	return true
}
