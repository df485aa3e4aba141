package agent

import (
	"encoding/json"
	"regexp"
	"strings"
)

// Capability is one entry of a participant's capability list, as the gateway
// sends it in welcome and presence frames. Kind is a pattern over envelope
// kinds; Payload, when present, is a pattern over the envelope's payload.
// The gateway appends {"id":"mcp-response","kind":"mcp/response"} to every
// list, so capabilities can carry an id.
type Capability struct {
	ID      string `json:"id,omitempty"`
	Kind    string `json:"kind"`
	Payload any    `json:"payload,omitempty"`
}

// String shows the capability as the kind it grants, followed by its
// payload pattern when it has one: `mcp/request{"method":"tools/list"}`.
func (c Capability) String() string {
	if c.Payload == nil {
		return c.Kind
	}
	b, err := json.Marshal(c.Payload)
	if err != nil {
		return c.Kind + "{?}"
	}
	return c.Kind + string(b)
}

// Permits reports whether any capability in caps allows sending an envelope
// of this kind and payload. The payload is decoded only when a capability
// whose kind matches also constrains the payload, so kind-only checks (the
// common case) cost no JSON work.
//
// Matching follows the reference gateway's matcher: kinds and string values
// are globs where `*` matches any run of characters (so `*` alone matches
// every kind and `mcp/*` every MCP kind); `!pat` matches strings that do not
// match pat; `/re/` is a regular expression; an array pattern matches if any
// element does; an object pattern requires every key (keys may be globs) to
// exist with a matching value, and `{}` matches any payload.
func Permits(caps []Capability, kind string, payload json.RawMessage) bool {
	var decoded any
	var decodedOK bool
	for i := range caps {
		c := &caps[i]
		if !matchString(c.Kind, kind) {
			continue
		}
		if c.Payload == nil {
			return true
		}
		if !decodedOK {
			decodedOK = true
			if len(payload) > 0 && Unmarshal(payload, &decoded) != nil {
				decoded = nil
			}
			if decoded == nil {
				decoded = map[string]any{}
			}
		}
		if matchValue(c.Payload, decoded) {
			return true
		}
	}
	return false
}

// Allows reports whether this one capability allows the kind and payload,
// payload given as decoded JSON (map[string]any, []any, string, float64,
// bool or nil).
func (c Capability) Allows(kind string, payload any) bool {
	if !matchString(c.Kind, kind) {
		return false
	}
	if c.Payload == nil {
		return true
	}
	if payload == nil {
		payload = map[string]any{}
	}
	return matchValue(c.Payload, payload)
}

// matchValue is the gateway's value matcher: exact equality, then the
// string pattern forms, then arrays as alternatives, then objects as
// sub-patterns.
func matchValue(pattern, value any) bool {
	if pattern == nil || value == nil {
		return pattern == nil && value == nil
	}
	switch p := pattern.(type) {
	case []any:
		for _, alt := range p {
			if matchValue(alt, value) {
				return true
			}
		}
		return false
	case string:
		s, ok := value.(string)
		if !ok {
			return false
		}
		return matchString(p, s)
	case map[string]any:
		v, ok := value.(map[string]any)
		if !ok {
			return false
		}
		return matchObject(p, v)
	default:
		return equalScalar(pattern, value)
	}
}

func matchObject(pattern, value map[string]any) bool {
	for key, want := range pattern {
		if key == "**" {
			if !deepMatch(want, value) {
				return false
			}
			continue
		}
		if !strings.ContainsAny(key, "*?") {
			got, ok := value[key]
			if !ok || !matchValue(want, got) {
				return false
			}
			continue
		}
		found := false
		for k, got := range value {
			if globMatch(key, k) && matchValue(want, got) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// deepMatch reports whether pattern matches value or anything nested in it.
func deepMatch(pattern, value any) bool {
	if matchValue(pattern, value) {
		return true
	}
	switch v := value.(type) {
	case map[string]any:
		for _, x := range v {
			if deepMatch(pattern, x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if deepMatch(pattern, x) {
				return true
			}
		}
	}
	return false
}

func equalScalar(a, b any) bool {
	switch x := a.(type) {
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		return ok && x == y
	}
	return false
}

// matchString matches one string against a pattern: exact, `!negated`,
// `/regex/`, or a glob.
func matchString(pattern, s string) bool {
	if pattern == s {
		return true
	}
	if len(pattern) >= 2 && pattern[0] == '/' && pattern[len(pattern)-1] == '/' {
		re, err := regexp.Compile(pattern[1 : len(pattern)-1])
		return err == nil && re.MatchString(s)
	}
	if strings.HasPrefix(pattern, "!") {
		return !globMatch(pattern[1:], s)
	}
	return globMatch(pattern, s)
}

// globMatch matches s against a pattern in which `*` stands for any run of
// characters (including `/`) and `?` for exactly one.
func globMatch(pattern, s string) bool {
	// Iterative matcher with single-star backtracking: linear in practice
	// and never exponential, so hostile patterns cannot stall a check.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		// The star is tested first: a `*` in the pattern is always a
		// wildcard, even where s happens to hold a literal `*`.
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
