package fulfill

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestParsePayload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload, method, params, tool, err string
	}{
		{payload: `{"method":"tools/call","params":{"name":"add","arguments":{"a":1}}}`, method: "tools/call", params: `{"name":"add","arguments":{"a":1}}`, tool: "add"},
		{payload: `{ "params" : {"name":"add"} , "method":"tools/call"}`, method: "tools/call", params: `{"name":"add"}`, tool: "add"},
		{payload: `{"method":"resources/list"}`, method: "resources/list"},
		{payload: `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":[{"a":1},{"a":2}]}}`, method: "ping", params: `{"x":[{"a":1},{"a":2}]}`},
		// Rule 1: name and arguments of a tools/call.
		{payload: `{"method":"tools/call","params":{"name":42}}`, err: "tools/call params.name is not a non-empty string"},
		{payload: `{"method":"tools/call","params":{"name":""}}`, err: "tools/call params.name is not a non-empty string"},
		{payload: `{"method":"tools/call","params":{"name":null}}`, err: "tools/call params.name is not a non-empty string"},
		{payload: `{"method":"tools/call","params":{}}`, err: "tools/call has no params.name"},
		{payload: `{"method":"tools/call"}`, err: "tools/call has no params.name"},
		{payload: `{"method":"tools/call","params":{"name":"add","arguments":[1]}}`, err: "tools/call params.arguments is not an object"},
		{payload: `{"method":"tools/call","params":{"name":"add","arguments":null}}`, err: "tools/call params.arguments is not an object"},
		// Keys match exactly: "Name" is not "name" (encoding/json's
		// struct decoding would take it for one).
		{payload: `{"method":"tools/call","params":{"name":"delete_all","Name":"add"}}`, method: "tools/call", params: `{"name":"delete_all","Name":"add"}`, tool: "delete_all"},
		// Duplicate keys, at any depth, escaped or not.
		{payload: `{"method":"tools/call","params":{"name":"delete_all","name":"add"}}`, err: `proposal payload has a duplicate key "name"`},
		{payload: `{"method":"tools/call","params":{"name":"delete_all","n\u0061me":"add"}}`, err: `proposal payload has a duplicate key "name"`},
		{payload: `{"method":"tools/call","method":"ping","params":{"name":"x"}}`, err: `proposal payload has a duplicate key "method"`},
		{payload: `{"method":"tools/call","params":{"name":"w","arguments":{"p":[{"a":1,"b":{"c":1,"c":2}}]}}}`, err: `proposal payload has a duplicate key "c"`},
		{payload: `{"method":"m","params":{"a":1},"params":{"b":2}}`, err: `proposal payload has a duplicate key "params"`},
		{payload: manyKeys(100, true), err: `proposal payload has a duplicate key "k0"`},
		{payload: manyKeys(100, false), method: "m", params: manyKeys(100, false)[len(`{"method":"m","params":`) : len(manyKeys(100, false))-1]},
		// The checks that were there before.
		{payload: `"just a string"`, err: "proposal payload is not a JSON object"},
		{payload: `[]`, err: "proposal payload is not a JSON object"},
		{payload: ``, err: "proposal has no payload"},
		{payload: `{"params":{}}`, err: "proposal payload has no method"},
		{payload: `{"method":7}`, err: "proposal payload's method is not a string"},
		{payload: `{"method":{"a":1}}`, err: "proposal payload's method is not a string"},
		{payload: `{"method":""}`, err: "proposal payload's method is empty"},
		{payload: `{"method":"m","params":[1]}`, err: "proposal payload's params is not an object"},
		{payload: `{"method":"m","params":null}`, err: "proposal payload's params is not an object"},
	} {
		c, err := parsePayload(json.RawMessage(tc.payload))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: err %v, want %q", tc.payload, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.payload, err)
			continue
		}
		if c.method != tc.method || string(c.params) != tc.params || c.tool != tc.tool {
			t.Errorf("%s: got method %q params %s tool %q, want %q %s %q", tc.payload, c.method, c.params, c.tool, tc.method, tc.params, tc.tool)
		}
	}
}

// manyKeys is a payload whose params have n keys, the last a repeat of
// the first when dup is set: past the linear search for small objects.
func manyKeys(n int, dup bool) string {
	var b strings.Builder
	b.WriteString(`{"method":"m","params":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		k := i
		if dup && i == n-1 {
			k = 0
		}
		b.WriteString(`"k` + strconv.Itoa(k) + `":1`)
	}
	b.WriteString(`}}`)
	return b.String()
}

// BenchmarkParsePayload measures validation of one proposal payload (a
// small call and a 900 KiB file write), against the json.Unmarshal into a
// map that validation did before it checked duplicate keys ("unmarshal").
func BenchmarkParsePayload(b *testing.B) {
	for _, bc := range []struct{ name, payload string }{
		{"small", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/app/config.yaml","mode":"0644"}}}`},
		{"900KiB", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/app/blob","content":"` + strings.Repeat("abcdefgh", 900<<10/8) + `"}}}`},
	} {
		payload := json.RawMessage(bc.payload)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parsePayload(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/unmarshal", func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(payload, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
