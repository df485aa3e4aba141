package mcpfront

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
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

// fakeConn reads one message.
type fakeConn struct {
	mcp.Connection
	msg jsonrpc.Message
}

func (c fakeConn) Read(context.Context) (jsonrpc.Message, error) { return c.msg, nil }

// A tools/call read over stdio reaches the handler with its JSON-RPC id,
// its params untouched; other messages are not stamped.
func TestStampConnKeepsTheParams(t *testing.T) {
	for _, tc := range []struct {
		id     any
		method string
		want   string
	}{
		{float64(7), "tools/call", "7"},
		{"req-é\n", "tools/call", `"req-é\n"`},
		{float64(8), "tools/list", "null"},
	} {
		id, err := jsonrpc.MakeID(tc.id)
		if err != nil {
			t.Fatal(err)
		}
		params := `{"name":"add","arguments":{"a":1,"b":2}}`
		in := &jsonrpc.Request{ID: id, Method: tc.method, Params: json.RawMessage(params)}
		m, err := stampConn{fakeConn{msg: in}}.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		r := m.(*jsonrpc.Request)
		extra, _ := r.Extra.(*mcp.RequestExtra)
		if got := string(rpcIDOf(extra)); got != tc.want {
			t.Errorf("%s %v: rpc id %s, want %s", tc.method, tc.id, got, tc.want)
		}
		if string(r.Params) != params {
			t.Errorf("params %s after the stamp, want %s", r.Params, params)
		}
	}
}

// Over HTTP the id is the body's, never a header the client sent.
func TestStampBodyTakesTheIDFromTheBody(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"add"}}`, "41"},
		{`{"jsonrpc":"2.0","id":42,"method":"tools/list"}`, "null"},
		{`not json`, "null"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/mcp/calc", strings.NewReader(tc.body))
		req.Header.Set(rpcIDHeader, "666")
		if !stampBody(httptest.NewRecorder(), req, 1<<20) {
			t.Fatalf("%s: refused", tc.body)
		}
		if got := string(rpcIDOf(&mcp.RequestExtra{Header: req.Header})); got != tc.want {
			t.Errorf("%s: rpc id %s, want %s", tc.body, got, tc.want)
		}
		if body, _ := io.ReadAll(req.Body); string(body) != tc.body {
			t.Errorf("body %s after the stamp, want it as sent", body)
		}
	}
}
