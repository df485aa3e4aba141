package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rpcIDKey is the _meta key under which the transport hands a
// tools/call's JSON-RPC id to the handler: the SDK does not expose it,
// and the decision log keeps it beside the proposal id. The transport
// always overwrites it, so a client cannot choose what it says, and the
// handler removes it before anything else sees the params.
const rpcIDKey = "fulfiller.internal/rpc_id"

// stampTransport stamps each tools/call read with its JSON-RPC id.
type stampTransport struct{ mcp.Transport }

// Connect connects t's transport and stamps what it reads.
func (t stampTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return stampConn{c}, nil
}

type stampConn struct{ mcp.Connection }

// Read reads a message and stamps it when it is a tools/call.
func (c stampConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && err == nil {
		stamp(r)
	}
	return m, err
}

// stamp puts r's id in its params' _meta when r is a tools/call.
func stamp(r *jsonrpc.Request) {
	if r.Method != "tools/call" || !r.IsCall() {
		return
	}
	if raw, ok := stampFast(r.Params, r.ID.Raw()); ok {
		r.Params = raw
		return
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(r.Params, &params) != nil || params == nil {
		return // malformed: the SDK answers it
	}
	var meta map[string]json.RawMessage
	if m, ok := params["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	id, err := json.Marshal(r.ID.Raw())
	if err != nil {
		return
	}
	meta[rpcIDKey] = id
	if params["_meta"], err = json.Marshal(meta); err != nil {
		return
	}
	if raw, err := json.Marshal(params); err == nil {
		r.Params = raw
	}
}

// stampFast stamps params that are an object without _meta, as nearly
// every call is, by writing the _meta in front of its members: no map of
// the params is made and written again. ok false: stamp's own way.
func stampFast(params json.RawMessage, id any) (json.RawMessage, bool) {
	var probe struct {
		Meta json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &probe) != nil || probe.Meta != nil {
		return nil, false
	}
	rest := bytes.TrimLeft(params, " \t\r\n")
	if len(rest) == 0 || rest[0] != '{' {
		return nil, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	raw, err := json.Marshal(id)
	if err != nil {
		return nil, false
	}
	out := make([]byte, 0, len(params)+len(rpcIDKey)+len(raw)+16)
	out = append(out, `{"_meta":{"`+rpcIDKey+`":`...)
	out = append(out, raw...)
	out = append(out, '}')
	if rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), true
}

// unstamp removes the stamp from params and returns the id it held
// (null when the transport stamps nothing).
func unstamp(p *mcp.CallToolParamsRaw) json.RawMessage {
	id := json.RawMessage("null")
	if p.Meta == nil {
		return id
	}
	if v, ok := p.Meta[rpcIDKey]; ok {
		if raw, err := json.Marshal(v); err == nil {
			id = raw
		}
		delete(p.Meta, rpcIDKey)
		if len(p.Meta) == 0 {
			p.Meta = nil
		}
	}
	return id
}
