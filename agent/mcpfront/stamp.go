package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rpcIDHeader is the header under which a tools/call's JSON-RPC id
// reaches the handler, in the request's RequestExtra: the SDK does not
// expose the id, and the decision log keeps it beside the proposal id.
// Over HTTP it is a header of the request that stampBody sets (removing
// any the client sent, so that a client cannot choose what it says);
// over stdio stampConn makes the RequestExtra, which nothing else sets.
// The params are not touched: stamping them (in _meta) cost a decoding
// and an encoding of every call, and the SDK's decoding of the _meta.
const rpcIDHeader = "Fulfiller-Internal-Rpc-Id"

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
	if r, ok := m.(*jsonrpc.Request); ok && err == nil && r.Method == "tools/call" && r.IsCall() {
		if id, ok := rpcIDText(r.ID); ok {
			r.Extra = &mcp.RequestExtra{Header: http.Header{rpcIDHeader: {id}}}
		}
	}
	return m, err
}

// rpcIDText is id as JSON.
func rpcIDText(id jsonrpc.ID) (string, bool) {
	raw, err := json.Marshal(id.Raw())
	return string(raw), err == nil
}

// toolsCallID is the JSON-RPC id (as JSON, rpcIDText) of body when body
// is one tools/call request, read as the SDK's jsonrpc.DecodeMessage
// reads it (names matched exactly, the last of duplicates, an id that
// is a string or a number made an integer) but without decoding the
// rest: DecodeMessage allocated a 32 KiB buffer and decoded the params,
// once more than the SDK's own decoding after, for every POST.
func toolsCallID(body []byte) (string, bool) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", false
	}
	var version, method string
	var id jsonrpc.ID
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		// A token is valid until the next is read.
		key := name.String()
		switch key {
		case "jsonrpc", "method":
			tok, err := dec.ReadToken()
			if err != nil || tok.Kind() != '"' {
				return "", false
			}
			if key == "jsonrpc" {
				version = tok.String()
			} else {
				method = tok.String()
			}
		case "id":
			tok, err := dec.ReadToken()
			if err != nil {
				return "", false
			}
			switch tok.Kind() {
			case '"':
				id, err = jsonrpc.MakeID(tok.String())
			case '0':
				id, err = jsonrpc.MakeID(tok.Float())
			case 'n':
				id = jsonrpc.ID{}
			default:
				return "", false
			}
			if err != nil {
				return "", false
			}
		default:
			if dec.SkipValue() != nil {
				return "", false
			}
		}
	}
	if version != "2.0" || method != "tools/call" || !id.IsValid() {
		return "", false
	}
	return rpcIDText(id)
}

// rpcIDOf is the JSON-RPC id the transport stamped on a call (null when
// it stamped nothing).
func rpcIDOf(extra *mcp.RequestExtra) json.RawMessage {
	if extra != nil {
		if id := extra.Header.Get(rpcIDHeader); id != "" && json.Valid([]byte(id)) {
			return json.RawMessage(id)
		}
	}
	return json.RawMessage("null")
}
