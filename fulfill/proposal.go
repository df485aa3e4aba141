package fulfill

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/mewkit/fulfiller/agent"
)

// Snapshot is a read-only view of a pending proposal, for the operator API
// and tests.
type Snapshot struct {
	ID       string    `json:"id"`
	From     string    `json:"from"`
	Method   string    `json:"method"`
	Tool     string    `json:"tool,omitempty"`
	Target   string    `json:"target,omitempty"`
	State    string    `json:"state"`
	Received time.Time `json:"received"`
	Deadline time.Time `json:"deadline,omitzero"`
	Revision string    `json:"revision,omitempty"`
	// Task is the MCP task the fulfilment became, while it runs.
	Task *TaskInfo `json:"task,omitempty"`
	// Owner is the member of the group holding the proposal (this
	// fulfiller's id for its own work).
	Owner string `json:"owner"`
}

// call is what validation learnt of a proposal's payload.
type call struct {
	method string
	params json.RawMessage // nil when the proposal had none
	tool   string          // params.name of a tools/call
}

// parsePayload applies docs/design.md's envelope validation (rule 1): the
// payload must be an object with a non-empty string method, and params,
// when present, an object; a tools/call also needs a non-empty string
// params.name and, when present, an object params.arguments. An object with
// a duplicate key anywhere in the payload is invalid too: decoders differ
// on which of the two values counts (Go takes the last, others the first),
// so the policy could decide one call while the tool owner runs the other.
// So is text that is not UTF-8 or escapes half a surrogate pair ("\ud800"
// alone: Go and OPA mend it to U+FFFD, a JavaScript tool keeps it; rule 13).
//
// It is one pass of encoding/json/v2's tokenizer, which refuses duplicate
// names, invalid UTF-8 and lone surrogates by default and reads keys
// unescaped and exactly, as the tool owner reads them; params is the
// payload's own bytes, never a copy (a large write is held once).
func parsePayload(payload json.RawMessage) (call, error) {
	var c call
	if len(payload) == 0 {
		return c, fmt.Errorf("proposal has no payload")
	}
	if !isJSONObject(payload) {
		return c, fmt.Errorf("proposal payload is not a JSON object")
	}
	var (
		hasMethod, methodString, hasParams, paramsObject bool
		hasName, nameString, hasArgs, argsObject         bool
	)
	dec := jsontext.NewDecoder(bytes.NewBuffer(payload)) // parsed in place: a Buffer is not copied
	err := agent.EachMember(dec, func(key string) error {
		switch key {
		case "method":
			hasMethod = true
			if dec.PeekKind() != '"' {
				return dec.SkipValue()
			}
			tok, err := dec.ReadToken()
			methodString, c.method = true, tok.String()
			return err
		case "params":
			hasParams = true
			start := dec.InputOffset()
			var err error
			if dec.PeekKind() == '{' {
				paramsObject = true
				err = agent.EachMember(dec, func(key string) error {
					switch key {
					case "name":
						hasName = true
						if dec.PeekKind() != '"' {
							return dec.SkipValue()
						}
						tok, err := dec.ReadToken()
						nameString, c.tool = true, tok.String()
						return err
					case "arguments":
						hasArgs, argsObject = true, dec.PeekKind() == '{'
					}
					return dec.SkipValue()
				})
			} else {
				err = dec.SkipValue()
			}
			c.params = span(payload, start, dec)
			return err
		}
		return dec.SkipValue()
	})
	if err == nil {
		if _, err = dec.ReadToken(); err == io.EOF {
			err = nil
		} else if err == nil {
			err = errors.New("more than one value")
		}
	}
	if err != nil {
		return call{}, payloadError(payload, err)
	}
	switch {
	case !hasMethod:
		return call{}, fmt.Errorf("proposal payload has no method")
	case !methodString:
		return call{}, fmt.Errorf("proposal payload's method is not a string")
	case c.method == "":
		return call{}, fmt.Errorf("proposal payload's method is empty")
	case hasParams && !paramsObject:
		return call{}, fmt.Errorf("proposal payload's params is not an object")
	}
	if !paramsObject {
		c.params = nil
	}
	if c.method != agent.MethodToolsCall {
		c.tool = ""
		return c, nil
	}
	// MCP requires both; a policy must never see a call whose tool it
	// cannot name.
	switch {
	case !hasName:
		return call{}, fmt.Errorf("tools/call has no params.name")
	case !nameString || c.tool == "":
		return call{}, fmt.Errorf("tools/call params.name is not a non-empty string")
	case hasArgs && !argsObject:
		return call{}, fmt.Errorf("tools/call params.arguments is not an object")
	}
	return c, nil
}

var errNotUTF8 = errors.New("proposal payload is not valid UTF-8")

// payloadError says why the tokenizer refused a payload, UTF-8 first (the
// message a payload with a duplicate key too has always had): text that
// is not UTF-8, a duplicate key, an escaped half of a surrogate pair, or
// (from no envelope the agent hands over) JSON that is no object. The
// tokenizer checks UTF-8 itself, so a payload that passes pays no second
// pass for it.
func payloadError(payload []byte, err error) error {
	if !utf8.Valid(payload) {
		return errNotUTF8
	}
	var serr *jsontext.SyntacticError
	if errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &serr) {
		return fmt.Errorf("proposal payload has a duplicate key %q", serr.JSONPointer.LastToken())
	}
	if jsontext.Value(payload).IsValid(jsontext.AllowInvalidUTF8(true)) {
		return errNotUTF8
	}
	return fmt.Errorf("proposal payload is not a JSON object")
}

// span is data from offset start, taken right after a key, to where dec
// is now, without the colon and blanks before the value.
func span(data []byte, start int64, dec *jsontext.Decoder) json.RawMessage {
	return bytes.TrimLeft(data[start:dec.InputOffset()], " \t\r\n:")
}

// toolCall extracts the tool name and arguments of a tools/call, keys
// matched exactly as for the tool owner; the arguments are params' own
// bytes. Of a key written twice the last counts, as for JSON.parse.
func toolCall(params json.RawMessage) (name string, args json.RawMessage) {
	if params == nil {
		return "", nil
	}
	ms, err := agent.Members(params)
	if err != nil {
		return "", nil
	}
	for _, m := range ms {
		switch m.Key {
		case "name":
			name = ""
			if isJSONString(m.Value) {
				_ = agent.Unmarshal(m.Value, &name)
			}
		case "arguments":
			args = m.Value
		}
	}
	return name, args
}

func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

func isJSONString(b []byte) bool { return firstByte(b) == '"' }
func isJSONObject(b []byte) bool { return firstByte(b) == '{' }

// FrontEndMEW is the MEW participant's name as a front end: the policy
// input's front_end for a space's mcp/proposal ("mcp" is fulfiller mcp's).
const FrontEndMEW = "mew"
