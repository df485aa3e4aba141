package fulfill

import (
	"encoding/json"
	"testing"
)

// FuzzParsePayload: validation never panics, and what it accepts is what
// a decoder that keeps either value of a duplicate would read too: an
// object whose method and params are the ones returned.
func FuzzParsePayload(f *testing.F) {
	for _, s := range []string{
		`{"method":"tools/call","params":{"name":"add","arguments":{"a":1}}}`,
		`{"method":"tools/call","params":{"name":"a","name":"b"}}`,
		`{"method":"m","params":{"x":[{"a":1,"a":2}]}}`,
		`{"method":"tools/call","params":{"name":42}}`,
		`[]`, `"s"`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !json.Valid(payload) {
			return // the agent never hands over invalid JSON
		}
		c, err := parsePayload(payload)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatalf("accepted a payload that is not an object: %s", payload)
		}
		var method string
		if json.Unmarshal(m["method"], &method) != nil || method != c.method || method == "" {
			t.Fatalf("method %q, decoder reads %s", c.method, m["method"])
		}
		if c.params != nil && !jsonEqual(c.params, string(m["params"])) {
			t.Fatalf("params %s, decoder reads %s", c.params, m["params"])
		}
		if c.method == "tools/call" {
			if name, _ := toolCall(c.params); name == "" || name != c.tool {
				t.Fatalf("tool %q, toolCall reads %q", c.tool, name)
			}
		}
	})
}
