package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// ErrWrongRPCID means an answer names its request (correlation and
// sender match) but its payload carries a JSON-RPC id that is not the
// request's: it is not taken (docs/design.md rule 12).
var ErrWrongRPCID = errors.New("answer carries another JSON-RPC id")

// DecodeAnswer reads the payload of an mcp/response already matched to a
// request by envelope correlation (correlation_id[0] is the request's
// envelope id) and sender (the participant the request went to), checking
// the one thing the payload itself may add: its JSON-RPC id.
//
// MEW matches answers by envelope correlation. Participants built on the
// reference SDK (`mew bridge`, the template agents) answer with
// {"result": …} or {"error": …} and no jsonrpc or id at all, and such an
// answer is as valid as one that echoes the id. An id that is present
// (null aside: JSON-RPC's "id unknown") must equal want, or the answer
// is refused with ErrWrongRPCID: it answers some other request.
func DecodeAnswer(payload, want json.RawMessage) (RPCResponse, error) {
	var resp RPCResponse
	if err := Unmarshal(payload, &resp); err != nil {
		return RPCResponse{}, fmt.Errorf("%w: %v", errBadResponse, err)
	}
	if len(resp.ID) == 0 || string(resp.ID) == "null" || SameRPCID(resp.ID, want) {
		return resp, nil
	}
	return resp, fmt.Errorf("%w: %s, not %s", ErrWrongRPCID, resp.ID, want)
}

// SameRPCID reports whether two JSON-RPC ids are the same id: equal
// strings, or equal numbers. Numbers are compared as integers when both
// are (7 and 7.0 are one id; an exponent is never expanded, so a hostile
// 1e999999999 costs nothing), else by their text.
func SameRPCID(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) && plainInteger(a) {
		// The id echoed as it was sent, the answer nearly every time:
		// decoding both (two decoders, a few kilobytes) says the same.
		return true
	}
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	switch x := x.(type) {
	case string:
		y, ok := y.(string)
		return ok && x == y
	case json.Number:
		y, ok := y.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		ix, okx := integral(x)
		iy, oky := integral(y)
		return okx && oky && ix == iy
	}
	return false // objects, arrays, booleans and null are no ids
}

// plainInteger reports whether b is a JSON integer written plainly: an
// optional minus, then 0 or digits not led by 0, nothing else.
func plainInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// integral reads n as an int64 when it is one, written plainly or with a
// zero fraction (7, 7.0); exponents are not read.
func integral(n json.Number) (int64, bool) {
	s := n.String()
	if i := strings.IndexByte(s, '.'); i >= 0 {
		if strings.Trim(s[i+1:], "0") != "" {
			return 0, false
		}
		s = s[:i]
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}
