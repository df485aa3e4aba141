package agent

import (
	"encoding/json"
	"strconv"
)

// MCP methods fulfiller uses.
const (
	MethodToolsCall         = "tools/call"
	MethodToolsList         = "tools/list"
	MethodElicitationCreate = "elicitation/create"
	MethodCancelled         = "notifications/cancelled"
	MethodToolsListChanged  = "notifications/tools/list_changed"
)

// RPCRequest is the JSON-RPC payload of an mcp/request or mcp/proposal.
// Proposals may leave out jsonrpc and id; requests fulfiller sends always
// carry both (notifications carry no id).
type RPCRequest struct {
	JSONRPC string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// RPCResponse is the JSON-RPC payload of an mcp/response: exactly one of
// Result and Error is set by a well-behaved peer.
type RPCResponse struct {
	JSONRPC string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error makes a JSON-RPC error usable as a Go error.
func (e *RPCError) Error() string {
	return "json-rpc error " + strconv.Itoa(e.Code) + ": " + e.Message
}
