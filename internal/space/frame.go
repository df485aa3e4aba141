package space

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"time"
)

// field is one top-level member of a client frame. Keys and values point
// into the compacted frame, so splitting a frame allocates nothing beyond
// the slice that holds the fields.
type field struct {
	rawKey []byte // the key as written, quotes included
	key    []byte // the key unquoted (unescaped when it held escapes)
	val    []byte // the value, compact JSON
}

// fields is a frame's top level in the sender's order, the order the
// delivered envelope must keep.
type fields []field

// get returns the raw value of key, or nil when the key is absent.
func (fs fields) get(key string) []byte {
	for i := range fs {
		if string(fs[i].key) == key {
			return fs[i].val
		}
	}
	return nil
}

// compactFrame checks that b is JSON and strips insignificant whitespace, so
// that the values copied into the delivered envelope are compact like the
// reference gateway's JSON.stringify output. Frames without whitespace,
// the common case for machine senders, are returned as they are.
func compactFrame(b []byte) ([]byte, error) {
	if json.Valid(b) {
		if bytes.IndexAny(b, " \t\r\n") < 0 {
			return b, nil
		}
	}
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// splitObject splits compact, valid JSON into its top-level members,
// appending to dst. It reports false when b is not an object. A repeated key
// keeps its first position and takes the last value, as JSON.parse does.
func splitObject(b []byte, dst fields) (fields, bool) {
	if len(b) < 2 || b[0] != '{' {
		return dst, false
	}
	i := 1
	for i < len(b) && b[i] != '}' {
		if b[i] == ',' {
			i++
		}
		end := skipString(b, i)
		raw := b[i:end]
		key := raw[1 : len(raw)-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				key = []byte(s)
			}
		}
		i = end + 1 // the colon
		end = skipValue(b, i)
		f := field{rawKey: raw, key: key, val: b[i:end]}
		i = end
		if j := dst.index(key); j >= 0 {
			dst[j].val = f.val
			continue
		}
		dst = append(dst, f)
	}
	return dst, true
}

func (fs fields) index(key []byte) int {
	for i := range fs {
		if bytes.Equal(fs[i].key, key) {
			return i
		}
	}
	return -1
}

// skipString returns the index just past the string starting at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the compact JSON value at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
			i++
		}
		return i
	}
}

// objectField returns the raw value of key in the JSON object v, or nil when
// v is not an object or lacks the key: JavaScript's v?.key.
func objectField(v []byte, key string) []byte {
	var buf [16]field
	fs, ok := splitObject(v, buf[:0])
	if !ok {
		return nil
	}
	return fs.get(key)
}

// truthy reports whether a raw JSON value is truthy in JavaScript, which is
// what the reference gateway's `x || default` and `!x` checks test. An
// absent value (nil) is undefined, so falsy.
func truthy(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case 'n', 'f':
		return false
	case '"':
		return len(v) > 2
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		f, err := strconv.ParseFloat(string(v), 64)
		return err != nil || f != 0
	}
	return true
}

// stringValue decodes a raw JSON string; ok is false for anything else.
func stringValue(v []byte) (s string, ok bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// nonEmptyString returns v as a string when it is a non-empty JSON string,
// the only join field values this space honours.
func nonEmptyString(v []byte) string {
	s, _ := stringValue(v)
	return s
}

// jsText renders a value the way a JavaScript template literal would, for
// the one error message that quotes a client value.
func jsText(v []byte) string {
	if s, ok := stringValue(v); ok {
		return s
	}
	if len(v) > 0 && v[0] == '{' {
		return "[object Object]"
	}
	return string(v)
}

// normalise builds the envelope the space delivers for a client frame:
// protocol, id, ts and from first, each taken from the client when present
// and made up when missing, then the client's other members in its order,
// with a bare correlation_id wrapped in an array.
func normalise(fs fields, from string, now time.Time) []byte {
	return stamp(fs, from, now, "msg-", 9, true)
}

// stamp is the reference gateway's {protocol, id, ts, from, ...message}:
// the defaults' keys first, values from the message when it has them. Made
// up ids are idPrefix, epoch milliseconds, "-" and randLen random
// characters. Only the WebSocket path wraps a bare correlation_id.
func stamp(fs fields, from string, now time.Time, idPrefix string, randLen int, wrapCorrelation bool) []byte {
	n := 96 + len(from)
	for i := range fs {
		n += len(fs[i].rawKey) + len(fs[i].val) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, `{"protocol":`...)
	if v := fs.get("protocol"); v != nil {
		b = append(b, v...)
	} else {
		b = append(b, `"mew/v0.4"`...)
	}
	b = append(b, `,"id":`...)
	if v := fs.get("id"); v != nil {
		b = append(b, v...)
	} else {
		b = append(b, '"')
		b = append(b, idPrefix...)
		b = strconv.AppendInt(b, now.UnixMilli(), 10)
		b = append(b, '-')
		b = appendRandom(b, randLen)
		b = append(b, '"')
	}
	b = append(b, `,"ts":`...)
	if v := fs.get("ts"); v != nil {
		b = append(b, v...)
	} else {
		b = append(b, '"')
		b = appendTS(b, now)
		b = append(b, '"')
	}
	b = append(b, `,"from":`...)
	if v := fs.get("from"); v != nil {
		b = append(b, v...)
	} else {
		b = appendString(b, from)
	}
	for i := range fs {
		f := &fs[i]
		switch string(f.key) {
		case "protocol", "id", "ts", "from":
			continue
		}
		b = append(b, ',')
		b = append(b, f.rawKey...)
		b = append(b, ':')
		if wrapCorrelation && string(f.key) == "correlation_id" && truthy(f.val) && f.val[0] != '[' {
			b = append(b, '[')
			b = append(b, f.val...)
			b = append(b, ']')
			continue
		}
		b = append(b, f.val...)
	}
	return append(b, '}')
}

// tsLayout is JavaScript's Date.prototype.toISOString: UTC, milliseconds.
const tsLayout = "2006-01-02T15:04:05.000Z"

func appendTS(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, tsLayout)
}

func timestamp(t time.Time) string {
	return t.UTC().Format(tsLayout)
}

// appendRandom appends n base-36 characters, like the reference gateway's
// Math.random().toString(36) suffixes. They only make ids unlikely to
// collide; they are not secrets.
func appendRandom(b []byte, n int) []byte {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	for range n {
		b = append(b, digits[rand.IntN(len(digits))])
	}
	return b
}

// appendString appends s as a JSON string escaped like JSON.stringify does
// (no HTML escaping, unlike encoding/json).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// marshal encodes v without HTML escaping, so that frames the space makes
// itself read like the reference gateway's.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// mustMarshal is marshal for the space's own frames, whose types always
// encode.
func mustMarshal(v any) []byte {
	b, err := marshal(v)
	if err != nil {
		panic("space: frame does not marshal: " + err.Error())
	}
	return b
}
