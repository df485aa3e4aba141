package mcpfront

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The upstream's result reaches the client as it came but for its
// resultType: every field the SDK has is carried over, so a field a
// newer SDK adds is not dropped silently.
func TestWithoutResultTypeCopiesEveryField(t *testing.T) {
	var in mcp.CallToolResult
	raw := `{"_meta":{"k":"v"},"content":[{"type":"text","text":"3"}],"structuredContent":{"sum":3},"isError":true,` +
		`"inputRequests":{"q":{"method":"elicitation/create","params":{"mode":"form","message":"?"}}},"requestState":"s","resultType":"complete"}`
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		t.Fatal(err)
	}
	out := withoutResultType(&in)
	got, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["resultType"]; ok {
		t.Errorf("resultType relayed: %s", got)
	}
	for _, k := range []string{"_meta", "content", "structuredContent", "isError", "inputRequests", "requestState"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s dropped: %s", k, got)
		}
	}
	// Every exported field of the SDK's type is copied.
	typ := reflect.TypeFor[mcp.CallToolResult]()
	vin, vout := reflect.ValueOf(in), reflect.ValueOf(*out)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		if !reflect.DeepEqual(vin.Field(i).Interface(), vout.Field(i).Interface()) {
			t.Errorf("field %s not copied: withoutResultType must copy every exported field of mcp.CallToolResult", f.Name)
		}
	}
}

// A tools/call is stamped with its JSON-RPC id whatever its params hold,
// and the handler gets the params back as the client sent them.
func TestStampKeepsTheParams(t *testing.T) {
	for _, tc := range []struct{ params, wantArgs, wantMeta string }{
		{`{"name":"add","arguments":{"a":1,"b":2}}`, `{"a":1,"b":2}`, ``},
		{` { "name" : "add" } `, ``, ``},
		{`{"name":"add","_meta":{"progressToken":"p"},"arguments":{}}`, `{}`, `{"progressToken":"p"}`},
		{`{"_meta":null,"name":"add"}`, ``, ``},
	} {
		req, err := jsonrpc.MakeID(float64(7))
		if err != nil {
			t.Fatal(err)
		}
		r := &jsonrpc.Request{ID: req, Method: "tools/call", Params: json.RawMessage(tc.params)}
		stamp(r)
		var p mcp.CallToolParamsRaw
		if err := json.Unmarshal(r.Params, &p); err != nil {
			t.Fatalf("%s stamped into %s: %v", tc.params, r.Params, err)
		}
		if id := unstamp(&p); string(id) != "7" {
			t.Errorf("%s: stamped id %s, want 7 (params %s)", tc.params, id, r.Params)
		}
		if p.Name != "add" || string(p.Arguments) != tc.wantArgs {
			t.Errorf("%s: name %q, arguments %s after the stamp", tc.params, p.Name, p.Arguments)
		}
		meta := ""
		if p.Meta != nil {
			b, _ := json.Marshal(p.Meta)
			meta = string(b)
		}
		if meta != tc.wantMeta {
			t.Errorf("%s: _meta %s after the stamp, want %q", tc.params, meta, tc.wantMeta)
		}
	}
}
