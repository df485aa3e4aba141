package decisionlog

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/mewkit/fulfiller/policies"
)

// maskPath is one input path to erase, split at dots.
type maskPath []string

// compileMasks expands each --mask path to every place the same value sits
// in the input: a tool call's arguments are input.params.arguments,
// input.tool.arguments and input.proposal.payload.params.arguments, and a
// mask that erased only one of them would leak the value through another.
func compileMasks(paths []string) []maskPath {
	var out []maskPath
	seen := map[string]bool{}
	add := func(p []string) {
		k := strings.Join(p, ".")
		if !seen[k] {
			seen[k] = true
			out = append(out, slices.Clone(p))
		}
	}
	for _, s := range paths {
		s = strings.TrimPrefix(strings.TrimSpace(s), "input.")
		if s == "" {
			continue
		}
		p := strings.Split(s, ".")
		// Canonical form: relative to params.
		var rest []string
		switch {
		case len(p) >= 1 && p[0] == "params":
			rest = p[1:]
		case len(p) >= 2 && p[0] == "tool" && p[1] == "arguments":
			rest = append([]string{"arguments"}, p[2:]...)
		case len(p) >= 3 && p[0] == "proposal" && p[1] == "payload" && p[2] == "params":
			rest = p[3:]
		default:
			add(p)
			continue
		}
		add(append([]string{"params"}, rest...))
		add(append([]string{"proposal", "payload", "params"}, rest...))
		if len(rest) >= 1 && rest[0] == "arguments" {
			add(append([]string{"tool", "arguments"}, rest[1:]...))
		}
	}
	return out
}

// maskedInput encodes the policy input with the masked paths removed, and
// lists the removed ones as OPA does ("/input/params/arguments/password").
func (l *Logger) maskedInput(in *policies.Input) (json.RawMessage, []string) {
	raw, err := in.MarshalJSON()
	if err != nil {
		l.log.Error("decision log: input not encodable", "err", err)
		return nil, nil
	}
	if len(l.masks) == 0 {
		return raw, nil
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers exactly as the policy saw them
	if err := dec.Decode(&doc); err != nil {
		// Fail closed: without a parsed document nothing can be masked.
		l.log.Error("decision log: input not masked; left out", "err", err)
		return nil, []string{"/input"}
	}
	var erased []string
	for _, m := range l.masks {
		if erase(doc, m) {
			erased = append(erased, "/input/"+strings.Join(m, "/"))
		}
	}
	if len(erased) == 0 {
		return raw, nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, []string{"/input"}
	}
	return out, erased
}

// erase removes the value at path from doc and reports whether there was one.
func erase(doc map[string]any, path maskPath) bool {
	cur := doc
	for i, k := range path {
		if i == len(path)-1 {
			if _, ok := cur[k]; !ok {
				return false
			}
			delete(cur, k)
			return true
		}
		next, ok := cur[k].(map[string]any)
		if !ok {
			return false
		}
		cur = next
	}
	return false
}
