package decision

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// member is one key and value of a JSON object.
type member struct {
	key   string
	value json.RawMessage
}

// readObject reads b, valid JSON, as an object whose members come in key
// order, as OPA hands a policy's objects over: the first problem reported
// is then the same whatever order the keys were written in. It returns
// nil members, and no error, when b is JSON but no object; a duplicate
// key is an error, since which value counts would be a guess.
func readObject(name string, b []byte) ([]member, error) {
	if !json.Valid(b) {
		var v any
		return nil, fmtErr(name, json.Unmarshal(b, &v))
	}
	if kindOf(b) != "object" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return nil, fmtErr(name, err)
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmtErr(name, err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, malformed(name, "key %q is given twice", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmtErr(name, err)
		}
		out = append(out, member{key, v})
	}
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// kindOf names the JSON type of the valid JSON b as policy errors do
// (OPA's value names).
func kindOf(b []byte) string {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// stringValue reads a JSON string.
func stringValue(name string, raw json.RawMessage) (string, error) {
	var s string
	if kindOf(raw) != "string" || json.Unmarshal(raw, &s) != nil {
		return "", malformed(name, "must be a string, got %s", kindOf(raw))
	}
	return s, nil
}

// stringListValue reads a JSON array of non-empty strings.
func stringListValue(name string, raw json.RawMessage) ([]string, error) {
	if kindOf(raw) != "array" {
		return nil, malformed(name, "must be a list of strings, got %s", kindOf(raw))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmtErr(name, err)
	}
	out := []string{}
	for _, e := range elems {
		var s string
		if kindOf(e) != "string" || json.Unmarshal(e, &s) != nil || s == "" {
			return nil, malformed(name, "must be a list of non-empty strings, found %s", e)
		}
		out = append(out, s)
	}
	return out, nil
}
