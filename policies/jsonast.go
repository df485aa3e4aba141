package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"

	"github.com/open-policy-agent/opa/v1/ast"
)

// maxJSONDepth bounds nesting like encoding/json does, so that anything the
// agent accepted off the wire is accepted here too, and a hostile document
// cannot exhaust the stack.
const maxJSONDepth = 10000

// errJSONDepth is returned for documents nested deeper than maxJSONDepth.
var errJSONDepth = errors.New("exceeded max depth")

// jsonToValue parses one JSON text straight into an ast.Value.
//
// The usual route, json.Unmarshal into any and then ast.InterfaceToValue,
// builds every map and slice twice; on the decision path the input is parsed
// for every proposal, so it is worth going directly. Terms come from a slab
// to keep allocations per document low. Semantics follow encoding/json:
// duplicate keys keep the last value, invalid UTF-8 becomes U+FFFD.
func jsonToValue(data []byte) (ast.Value, error) {
	p := newJSONParser(data)
	return p.document()
}

// newJSONParser returns a parser for data. The parser works on its own copy
// of data, so that strings can point into it instead of each being copied
// out: one allocation instead of one per string. The copy is never
// modified, and the caller may reuse data afterwards.
func newJSONParser(data []byte) *jsonParser {
	return &jsonParser{data: bytes.Clone(data)}
}

// jsonSpan is the byte range of a value inside the parsed text.
type jsonSpan struct{ start, end int }

// jsonParser is a small recursive-descent JSON parser producing ast values.
// When track is set it records where payload.params and
// payload.params.arguments of an envelope lie, so that the same bytes
// handed in again as Input.Params or Tool.Arguments need not be parsed twice.
type jsonParser struct {
	data  []byte
	pos   int
	depth int

	slab  []ast.Term     // terms are carved out of this
	slabs int            // blocks of terms allocated so far
	pairs [][2]*ast.Term // scratch stack of object members
	elems []*ast.Term    // scratch stack of array elements

	track  bool
	path   [3]string // keys on the way down, up to depth 3
	params struct {
		span  jsonSpan
		value ast.Value
	}
	args struct {
		span  jsonSpan
		value ast.Value
	}
}

func (p *jsonParser) document() (ast.Value, error) {
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.errorf("invalid character %q after top-level value", p.data[p.pos])
	}
	return v, nil
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return &JSONError{Offset: p.pos, Line: lineAt(p.data, p.pos), Msg: fmt.Sprintf(format, args...)}
}

// JSONError is a JSON syntax error with its position, so that messages can
// name the line of an input file.
type JSONError struct {
	Offset int // byte offset of the error
	Line   int // 1-based line of the error
	Msg    string
}

// Error reports the line and what is wrong.
func (e *JSONError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// lineAt returns the 1-based line number of byte offset off.
func lineAt(data []byte, off int) int {
	line := 1
	for _, c := range data[:min(off, len(data))] {
		if c == '\n' {
			line++
		}
	}
	return line
}

func (p *jsonParser) term(v ast.Value) *ast.Term {
	if len(p.slab) == 0 {
		// The first block is sized to the text, which cannot hold more
		// terms than a third of its bytes plus one ("1,2" is two): small
		// documents such as most tool arguments take a few terms, not 32.
		n := 32
		if p.slabs == 0 {
			n = min(n, len(p.data)/3+1)
		}
		p.slabs++
		p.slab = make([]ast.Term, n)
	}
	t := &p.slab[0]
	p.slab = p.slab[1:]
	t.Value = v
	return t
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value() (ast.Value, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of JSON input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", ast.InternedTerm(true).Value)
	case c == 'f':
		return p.literal("false", ast.InternedTerm(false).Value)
	case c == 'n':
		return p.literal("null", ast.NullValue)
	default:
		return nil, p.errorf("invalid character %q looking for beginning of value", c)
	}
}

func (p *jsonParser) literal(word string, v ast.Value) (ast.Value, error) {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return nil, p.errorf("invalid literal, expected %s", word)
	}
	p.pos += len(word)
	return v, nil
}

func (p *jsonParser) number() (ast.Value, error) {
	start := p.pos
	d := p.data
	if p.pos < len(d) && d[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(d) && d[p.pos] == '0':
		p.pos++
	case p.pos < len(d) && d[p.pos] >= '1' && d[p.pos] <= '9':
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
		}
	default:
		return nil, p.errorf("invalid number")
	}
	if p.pos < len(d) && d[p.pos] == '.' {
		p.pos++
		if !p.digits() {
			return nil, p.errorf("invalid number: no digits after decimal point")
		}
	}
	if p.pos < len(d) && (d[p.pos] == 'e' || d[p.pos] == 'E') {
		p.pos++
		if p.pos < len(d) && (d[p.pos] == '+' || d[p.pos] == '-') {
			p.pos++
		}
		if !p.digits() {
			return nil, p.errorf("invalid number: no digits in exponent")
		}
	}
	lit := unsafe.String(&d[start], p.pos-start) // points into the parser's copy
	if t := ast.InternedIntNumberTermFromString(lit); t != nil {
		return t.Value, nil
	}
	return ast.Number(lit), nil
}

func (p *jsonParser) digits() bool {
	start := p.pos
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
	}
	return p.pos > start
}

// str reads a string. Plain strings without escapes, the common case,
// point into the parser's copy of the text; anything else goes through
// encoding/json so escapes and invalid UTF-8 are handled exactly as the
// rest of the program does.
func (p *jsonParser) str() (ast.Value, error) {
	p.pos++ // opening quote
	start := p.pos
	simple, ascii := true, true
	for {
		// Skip the bytes that need no attention in one tight loop.
		for p.pos < len(p.data) && strClass[p.data[p.pos]] == 0 {
			p.pos++
		}
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of JSON input in string")
		}
		switch strClass[p.data[p.pos]] {
		case classQuote:
			raw := p.data[start:p.pos]
			p.pos++
			if simple && (ascii || utf8.Valid(raw)) {
				if v, ok := commonStrings[string(raw)]; ok {
					return v, nil
				}
				if len(raw) == 0 {
					return ast.String(""), nil
				}
				return ast.String(unsafe.String(&raw[0], len(raw))), nil
			}
			var s string
			if err := json.Unmarshal(p.data[start-1:p.pos], &s); err != nil {
				p.pos = start
				return nil, p.errorf("invalid string: %v", err)
			}
			return ast.String(s), nil
		case classEscape:
			simple = false
			p.pos += 2 // the escaped byte can never end the string
		case classControl:
			return nil, p.errorf("invalid control character in string")
		default: // classHigh
			ascii = false
			p.pos++
		}
	}
}

// Byte classes inside a JSON string.
const (
	classPlain = iota
	classQuote
	classEscape
	classControl
	classHigh // part of a multi-byte UTF-8 sequence
)

var strClass = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = classControl
	}
	t['"'] = classQuote
	t['\\'] = classEscape
	for c := 0x80; c < 0x100; c++ {
		t[c] = classHigh
	}
	return t
}()

// commonStrings are keys and values that appear in nearly every envelope;
// reusing one boxed value for them saves two allocations each (the map
// lookup with a []byte conversion does not allocate).
var commonStrings = func() map[string]ast.Value {
	m := map[string]ast.Value{}
	for _, s := range []string{
		"protocol", "mew/v0.4", "mew/v0.3", "id", "ts", "from", "to", "kind",
		"mcp/proposal", "correlation_id", "context", "payload", "jsonrpc", "2.0",
		"method", "tools/call", "params", "name", "arguments", "_meta",
		"path", "content", "type", "text", "url", "uri", "query", "command",
		"args", "env", "database", "table", "file", "mode", "recursive", "force",
	} {
		m[s] = ast.String(s)
	}
	return m
}()

func (p *jsonParser) object() (ast.Value, error) {
	p.pos++ // {
	if p.depth++; p.depth > maxJSONDepth {
		return nil, p.errorf("%v", errJSONDepth)
	}
	base := len(p.pairs)
	v, err := p.members(base)
	p.pairs = p.pairs[:base]
	p.depth--
	return v, err
}

func (p *jsonParser) members(base int) (ast.Value, error) {
	var index map[string]int // for large objects; see findKey
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return ast.NewObject(), nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.errorf("expected object key string")
		}
		kv, err := p.str()
		if err != nil {
			return nil, err
		}
		key := string(kv.(ast.String))
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf("expected ':' after object key")
		}
		p.pos++
		p.skipSpace()

		tracked := p.track && p.depth <= len(p.path)
		if tracked {
			p.path[p.depth-1] = key
		}
		vstart := p.pos
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if tracked {
			p.noteSpan(jsonSpan{vstart, p.pos}, v)
			p.path[p.depth-1] = ""
		}

		if i := p.findKey(base, key, &index); i >= 0 {
			p.pairs[i][1] = p.term(v) // last one wins, as in encoding/json
		} else {
			if index != nil {
				index[key] = len(p.pairs)
			}
			p.pairs = append(p.pairs, [2]*ast.Term{p.term(kv), p.term(v)})
		}

		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of JSON input in object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return ast.NewObject(p.pairs[base:]...), nil
		default:
			return nil, p.errorf("invalid character %q after object key:value pair", p.data[p.pos])
		}
	}
}

// findKey returns the index of key among the members of the object being
// built, or -1. Objects on the decision path are small, and for them a
// linear scan beats a map; past smallObject members the object gets an
// index, so that a hostile proposal with a hundred thousand keys costs
// linear time, not quadratic.
func (p *jsonParser) findKey(base int, key string, index *map[string]int) int {
	if *index != nil {
		if i, ok := (*index)[key]; ok {
			return i
		}
		return -1
	}
	n := len(p.pairs) - base
	for i := base; i < len(p.pairs); i++ {
		if string(p.pairs[i][0].Value.(ast.String)) == key {
			return i
		}
	}
	if n >= smallObject {
		*index = make(map[string]int, 2*n)
		for i := base; i < len(p.pairs); i++ {
			(*index)[string(p.pairs[i][0].Value.(ast.String))] = i
		}
	}
	return -1
}

// smallObject is the size up to which findKey scans instead of indexing.
const smallObject = 16

// noteSpan records the values at payload.params and
// payload.params.arguments of the top-level object.
func (p *jsonParser) noteSpan(s jsonSpan, v ast.Value) {
	switch {
	case p.depth == 2 && p.path[0] == "payload" && p.path[1] == "params":
		p.params.span, p.params.value = s, v
	case p.depth == 3 && p.path[0] == "payload" && p.path[1] == "params" && p.path[2] == "arguments":
		p.args.span, p.args.value = s, v
	}
}

func (p *jsonParser) array() (ast.Value, error) {
	p.pos++ // [
	if p.depth++; p.depth > maxJSONDepth {
		return nil, p.errorf("%v", errJSONDepth)
	}
	base := len(p.elems)
	// Arrays are not tracked: the paths of interest only go through objects.
	track := p.track
	p.track = false
	v, err := p.elements(base)
	p.track = track
	p.elems = p.elems[:base]
	p.depth--
	return v, err
}

func (p *jsonParser) elements(base int) (ast.Value, error) {
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return ast.NewArray(), nil
	}
	for {
		p.skipSpace()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		p.elems = append(p.elems, p.term(v))
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of JSON input in array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			// NewArray keeps the slice it is given, so hand it its own.
			return ast.NewArray(append([]*ast.Term(nil), p.elems[base:]...)...), nil
		default:
			return nil, p.errorf("invalid character %q after array element", p.data[p.pos])
		}
	}
}
