package mcpfront

import (
	"bytes"
	"strconv"
	"sync"
	"unicode/utf8"
)

// One pass over a frame: the scanner below checks a JSON text's syntax
// (RFC 8259, as encoding/json's scanner does), tells whether a strict
// reader would read it as a lenient one does, and notes the members of
// the objects it is asked for, in the same pass. It replaced, for the
// frames the Front takes, a decoding into json.RawMessage to find the
// frame, a byte scan for its depth, a strict decoding of its envelope
// and one of its params, and a token scan and re-encoding of a result:
// on a call that costs, cold, more than the decision itself (issue 40).
//
// It decodes nothing. What it does not know for certain it calls loose
// (a strict reader might refuse it, or read it otherwise), and a loose
// frame is left to the SDK as before; a frame it cannot read at all is
// left to encoding/json's decoder, whose error ends the connection as
// the SDK's would.

// member is one member of an object: the text of its name (quotes
// included) and of its value.
type member struct {
	name, value []byte
}

// scanner is one pass over b. Its zero value but b is ready to use;
// the slices it keeps are reused from pass to pass (reset).
type scanner struct {
	b []byte
	i int
	// depth is how deep the value at i nests: past sdkMaxDepth the
	// pass stops (deep), as the SDK refuses such a text.
	depth int
	deep  bool
	// loose: valid JSON a strict reader would refuse or might read
	// otherwise than the SDK's lenient one: a name twice in an object,
	// invalid UTF-8, an escaped name (whose duplicate this pass would
	// not see), an escaped lone surrogate.
	loose bool
	// ws counts the whitespace outside strings: none, and the text is
	// written as encoding/json would compact it.
	ws int
	// names are the names of the objects open at i, for the duplicate
	// check; rec the members of the objects scanned with record set.
	names [][]byte
	rec   []member
}

// scanners holds scanners between passes, so that their slices' memory
// is kept: a pass then allocates nothing.
var scanners = sync.Pool{New: func() any { return new(scanner) }}

// maxPooledMembers bounds the slices of a scanner put back in the pool.
const maxPooledMembers = 1024

// getScanner is a scanner from the pool; putScanner gives it back, its
// slices cleared (they point into the text it scanned).
func getScanner() *scanner { return scanners.Get().(*scanner) }

func putScanner(s *scanner) {
	if cap(s.rec) > maxPooledMembers || cap(s.names) > maxPooledMembers {
		return // grown for a wide object: let go
	}
	clear(s.names[:cap(s.names)])
	clear(s.rec[:cap(s.rec)])
	s.reset(nil)
	scanners.Put(s)
}

// reset makes s a new pass over b, keeping its slices' memory.
func (s *scanner) reset(b []byte) {
	*s = scanner{b: b, names: s.names[:0], rec: s.rec[:0]}
}

// maxLinearNames is how many names of one object the duplicate check
// compares one by one; past it the object's names go into a map.
const maxLinearNames = 32

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) skipSpace() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
		s.ws++
	}
}

// value scans the value at i (no whitespace before it): false when it
// is not JSON, ends early, or nests too deep (deep).
func (s *scanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(false)
	case c == '[':
		return s.array()
	case c == '"':
		_, ok := s.str()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i++; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
	}
	s.i = i
	return true
}

// str scans the string at i: escaped, it holds an escape.
func (s *scanner) str() (escaped, ok bool) {
	b := s.b
	start := s.i
	high := false
	for i := start + 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			if high && !utf8.Valid(b[start+1:i]) {
				s.loose = true
			}
			return escaped, true
		case c == '\\':
			escaped = true
			i++
			if i >= len(b) {
				return escaped, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 {
					return escaped, false
				}
				var r rune
				for _, h := range b[i+1 : i+5] {
					var d byte
					switch {
					case h >= '0' && h <= '9':
						d = h - '0'
					case h >= 'a' && h <= 'f':
						d = h - 'a' + 10
					case h >= 'A' && h <= 'F':
						d = h - 'A' + 10
					default:
						return escaped, false
					}
					r = r<<4 | rune(d)
				}
				if r >= 0xD800 && r <= 0xDFFF {
					// A surrogate: a strict reader refuses a lone one,
					// which this pass does not pair up.
					s.loose = true
				}
				i += 4
			default:
				return escaped, false
			}
		case c < 0x20:
			return escaped, false
		case c >= 0x80:
			high = true
		}
	}
	return escaped, false
}

// object scans the object at i; record: its members are appended to
// rec.
func (s *scanner) object(record bool) bool {
	if s.depth++; s.depth > sdkMaxDepth {
		s.deep = true
		return false
	}
	s.i++ // {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	mark := len(s.names)
	var seen map[string]struct{}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		start := s.i
		escaped, ok := s.str()
		if !ok {
			return false
		}
		name := s.b[start:s.i]
		if escaped {
			s.loose = true
		} else if !s.loose {
			s.loose = s.duplicate(name, mark, &seen)
		}
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.skipSpace()
		vstart := s.i
		if !s.value() {
			return false
		}
		if record {
			s.rec = append(s.rec, member{name: name, value: s.b[vstart:s.i]})
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.skipSpace()
			continue
		case '}':
			s.i++
			s.names = s.names[:mark]
			s.depth--
			return true
		}
		return false
	}
}

// duplicate notes name as a name of the object whose names begin at
// mark: true when the object had it already.
func (s *scanner) duplicate(name []byte, mark int, seen *map[string]struct{}) bool {
	if *seen != nil {
		if _, dup := (*seen)[string(name)]; dup {
			return true
		}
		(*seen)[string(name)] = struct{}{}
		return false
	}
	for _, n := range s.names[mark:] {
		if bytes.Equal(n, name) {
			return true
		}
	}
	if len(s.names)-mark < maxLinearNames {
		s.names = append(s.names, name)
		return false
	}
	m := make(map[string]struct{}, 2*maxLinearNames)
	for _, n := range s.names[mark:] {
		m[string(n)] = struct{}{}
	}
	m[string(name)] = struct{}{}
	*seen = m
	return false
}

func (s *scanner) array() bool {
	if s.depth++; s.depth > sdkMaxDepth {
		s.deep = true
		return false
	}
	s.i++ // [
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !s.value() {
			return false
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.skipSpace()
			continue
		case ']':
			s.i++
			s.depth--
			return true
		}
		return false
	}
}

// scanText scans b, one JSON value with whitespace around it at most:
// ok false when it is not that (or nests deeper than the SDK reads). A
// top-level object's members are in s.rec.
func (s *scanner) scanText(b []byte) bool {
	s.reset(b)
	s.skipSpace()
	var ok bool
	if s.i < len(b) && b[s.i] == '{' {
		ok = s.object(true)
	} else {
		ok = s.value()
	}
	if !ok {
		return false
	}
	s.skipSpace()
	return s.i == len(b)
}

// inFrame is a JSON-RPC frame as one pass read it: its members' texts
// (nil: absent), not decoded.
type inFrame struct {
	raw []byte // the frame, without the whitespace around it
	// strict: an object a strict reader reads as the SDK's does (not
	// loose, see scanner), whose envelope members appear once.
	strict bool
	// The envelope's members.
	version, id, method, params, result, err []byte
}

// read fills f from s's pass over raw (scanText true).
func (f *inFrame) read(s *scanner, raw []byte) {
	*f = inFrame{raw: raw}
	if len(raw) == 0 || raw[0] != '{' || s.loose {
		return
	}
	f.strict = true
	for _, m := range s.rec {
		switch string(m.name) {
		case `"jsonrpc"`:
			f.version = m.value
		case `"id"`:
			f.id = m.value
		case `"method"`:
			f.method = m.value
		case `"params"`:
			f.params = m.value
		case `"result"`:
			f.result = m.value
		case `"error"`:
			f.err = m.value
		}
	}
}

// isNull: v is absent or the JSON null.
func isNull(v []byte) bool { return v == nil || string(v) == "null" }

// decodeAny decodes v, a value of a text the scanner found strict, as
// jsonv2.Unmarshal decodes it into an any (objects as map[string]any,
// arrays as []any, numbers as float64), without its reflection: cold,
// that decoding of a call's _meta cost more than the rest of the
// frame's reading. ok false: v holds what it leaves to jsonv2 (an
// escape, a number out of float64's range).
func decodeAny(v []byte) (any, bool) {
	switch c := v[0]; {
	case c == '{':
		s := getScanner()
		defer putScanner(s)
		s.reset(v)
		if !s.object(true) {
			return nil, false
		}
		m := make(map[string]any, len(s.rec))
		for _, mb := range s.rec {
			if bytes.IndexByte(mb.name, '\\') >= 0 {
				return nil, false
			}
			x, ok := decodeAny(mb.value)
			if !ok {
				return nil, false
			}
			m[intern(mb.name[1:len(mb.name)-1])] = x
		}
		return m, true
	case c == '[':
		s := getScanner()
		defer putScanner(s)
		s.reset(v)
		s.i = 1
		s.skipSpace()
		a := []any{}
		if s.i < len(v) && v[s.i] == ']' {
			return a, true
		}
		for {
			start := s.i
			if !s.value() {
				return nil, false
			}
			x, ok := decodeAny(v[start:s.i])
			if !ok {
				return nil, false
			}
			a = append(a, x)
			s.skipSpace()
			if s.i >= len(v) {
				return nil, false
			}
			switch v[s.i] {
			case ',':
				s.i++
				s.skipSpace()
			case ']':
				return a, true
			default:
				return nil, false
			}
		}
	case c == '"':
		if bytes.IndexByte(v, '\\') >= 0 {
			return nil, false
		}
		return intern(v[1 : len(v)-1]), true
	case c == 't':
		return true, true
	case c == 'f':
		return false, true
	case c == 'n':
		return nil, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// intern is b as a string, the names a call's _meta holds without an
// allocation.
func intern(b []byte) string {
	switch string(b) {
	case metaProtocolVersion:
		return metaProtocolVersion
	case metaClientInfo:
		return metaClientInfo
	case metaClientCapabilities:
		return metaClientCapabilities
	case "progressToken":
		return "progressToken"
	case "name":
		return "name"
	case "version":
		return "version"
	case mrtrVersion:
		return mrtrVersion
	}
	return string(b)
}
