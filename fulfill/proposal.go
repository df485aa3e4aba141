package fulfill

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

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
//
// It is one streaming pass over the payload that also finds method,
// params and the tool name, so validation costs about what the single
// json.Unmarshal it replaces did. Keys are matched exactly (JSON is
// case-sensitive; encoding/json's struct decoding is not).
func parsePayload(payload json.RawMessage) (call, error) {
	var c call
	if len(payload) == 0 {
		return c, fmt.Errorf("proposal has no payload")
	}
	if !isJSONObject(payload) {
		return c, fmt.Errorf("proposal payload is not a JSON object")
	}
	if !utf8.Valid(payload) || loneSurrogate(payload) {
		// Rule 13: decoders mend such text (Go and OPA with U+FFFD),
		// tools may not, so the policy would decide other text than the
		// tool owner gets.
		return c, fmt.Errorf("proposal payload is not valid UTF-8")
	}
	s := scanner{dec: json.NewDecoder(bytes.NewReader(payload)), data: payload}
	s.dec.UseNumber()
	var (
		hasMethod, methodString, hasParams, paramsObject bool
		name                                             json.Token
		hasName, argsObject                              bool
		hasArgs                                          bool
	)
	err := s.object(func(key string) error {
		switch key {
		case "method":
			hasMethod = true
			tok, err := s.token()
			if err != nil {
				return err
			}
			c.method, methodString = tok.(string)
			return s.rest(tok)
		case "params":
			hasParams = true
			start := s.dec.InputOffset()
			tok, err := s.token()
			if err != nil {
				return err
			}
			if d, ok := tok.(json.Delim); ok && d == '{' {
				paramsObject = true
				err = s.fields(func(key string) error {
					switch key {
					case "name":
						hasName = true
						tok, err := s.token()
						if err != nil {
							return err
						}
						name = tok
						return s.rest(tok)
					case "arguments":
						hasArgs = true
						tok, err := s.token()
						if err != nil {
							return err
						}
						if d, ok := tok.(json.Delim); ok && d == '{' {
							argsObject = true
						}
						return s.rest(tok)
					}
					return s.value()
				})
			} else {
				err = s.rest(tok)
			}
			if err != nil {
				return err
			}
			c.params = s.span(start)
			return nil
		}
		return s.value()
	})
	if err != nil {
		if errors.Is(err, errDuplicateKey) {
			return call{}, fmt.Errorf("proposal payload %w", err)
		}
		return call{}, fmt.Errorf("proposal payload is not a JSON object")
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
	if c.method == agent.MethodToolsCall {
		// MCP requires both; a policy must never see a call whose tool it
		// cannot name.
		tool, _ := name.(string)
		switch {
		case !hasName:
			return call{}, fmt.Errorf("tools/call has no params.name")
		case tool == "":
			return call{}, fmt.Errorf("tools/call params.name is not a non-empty string")
		case hasArgs && !argsObject:
			return call{}, fmt.Errorf("tools/call params.arguments is not an object")
		}
		c.tool = tool
	}
	return c, nil
}

// loneSurrogate reports whether a JSON text escapes half of a UTF-16
// surrogate pair ("\ud800" alone): text no UTF-8 can hold, which Go's
// decoder turns into U+FFFD and a JavaScript tool keeps. In valid JSON a
// backslash occurs only inside strings, so no string tracking is needed.
func loneSurrogate(data []byte) bool {
	escaped := func(i int) (rune, bool) { // the \uXXXX at data[i:]
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range data[i+2 : i+6] {
			switch {
			case '0' <= c && c <= '9':
				r = r<<4 | rune(c-'0')
			case 'a' <= c && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case 'A' <= c && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := escaped(i)
		if !ok {
			i++ // another escape: skip the escaped byte (an escaped backslash too)
			continue
		}
		switch {
		case 0xD800 <= r && r < 0xDC00:
			lo, ok := escaped(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		case 0xDC00 <= r && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

// errDuplicateKey marks a payload with a key twice in one object.
var errDuplicateKey = errors.New("has a duplicate key")

// scanner walks a JSON document token by token, refusing duplicate keys.
type scanner struct {
	dec  *json.Decoder
	data []byte
}

func (s *scanner) token() (json.Token, error) { return s.dec.Token() }

// value consumes the next value.
func (s *scanner) value() error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	return s.rest(tok)
}

// rest consumes what follows tok when tok opens an object or array.
func (s *scanner) rest(tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if d == '[' {
		for s.dec.More() {
			if err := s.value(); err != nil {
				return err
			}
		}
		_, err := s.dec.Token() // ']'
		return err
	}
	return s.fields(nil)
}

// object consumes a whole object, calling visit for each key to consume its
// value (nil: skip the values).
func (s *scanner) object(visit func(key string) error) error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not an object")
	}
	return s.fields(visit)
}

// smallObject is how many keys are checked for duplicates by a linear
// search before a map is cheaper; an attacker's object with 100 000 keys
// must not cost a quadratic scan.
const smallObject = 16

// fields consumes the members of an object whose '{' was read.
func (s *scanner) fields(visit func(key string) error) error {
	var (
		few  [smallObject]string
		keys = few[:0]
		many map[string]struct{}
	)
	for s.dec.More() {
		tok, err := s.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch {
		case many != nil:
			if _, dup := many[key]; dup {
				return fmt.Errorf("%w %q", errDuplicateKey, key)
			}
			many[key] = struct{}{}
		case slices.Contains(keys, key):
			return fmt.Errorf("%w %q", errDuplicateKey, key)
		case len(keys) < smallObject:
			keys = append(keys, key)
		default:
			many = make(map[string]struct{}, 2*smallObject)
			for _, k := range keys {
				many[k] = struct{}{}
			}
			many[key] = struct{}{}
		}
		if visit != nil {
			err = visit(key)
		} else {
			err = s.value()
		}
		if err != nil {
			return err
		}
	}
	_, err := s.dec.Token() // '}'
	return err
}

// span returns the bytes of the value read since offset start (which was
// taken right after its key), without the colon and blanks before it.
func (s *scanner) span(start int64) json.RawMessage {
	return bytes.TrimLeft(s.data[start:s.dec.InputOffset()], " \t\r\n:")
}

// toolCall extracts the tool name and arguments of a tools/call. Keys match
// exactly, as for the tool owner: encoding/json's struct decoding would
// also take "Name" for "name".
func toolCall(params json.RawMessage) (name string, args json.RawMessage) {
	if params == nil {
		return "", nil
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil {
		return "", nil
	}
	if raw := p["name"]; isJSONString(raw) {
		_ = json.Unmarshal(raw, &name)
	}
	return name, p["arguments"]
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
