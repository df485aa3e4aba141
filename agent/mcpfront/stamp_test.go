package mcpfront

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// toolsCallID reads a POST's body as the SDK's DecodeMessage does, for
// the one thing stampBody needs: a tools/call's id, as JSON.
func TestToolsCallIDAgreesWithTheSDK(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}`, `7`},
		{`{"params":{"name":"add"},"method":"tools/call","id":"c-01","jsonrpc":"2.0"}`, `"c-01"`},
		{`{"jsonrpc":"2.0","id":"a\u0041\"b","method":"tools/call"}`, `"aA\"b"`},
		{`{"jsonrpc":"2.0","id":3.0,"method":"tools/call"}`, `3`},
		{`{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call"}`, `2`},
		{` {"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1,{"x":[null,true]}]} `, `1`},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, ``},
		{`{"jsonrpc":"2.0","method":"tools/call"}`, ``},
		{`{"jsonrpc":"2.0","id":null,"method":"tools/call"}`, ``},
		{`{"jsonrpc":"1.0","id":1,"method":"tools/call"}`, ``},
		{`{"jsonrpc":"2.0","ID":1,"method":"tools/call"}`, ``},
		{`{"jsonrpc":"2.0","id":1,"Method":"tools/call"}`, ``},
		{`{"jsonrpc":"2.0","id":[1],"method":"tools/call"}`, ``},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, ``},
		{`[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]`, ``},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call"`, ``},
		{`not json`, ``},
	} {
		got, ok := toolsCallID([]byte(tc.body))
		if !ok {
			got = ""
		}
		if got != tc.want {
			t.Errorf("toolsCallID(%s) = %q, want %q", tc.body, got, tc.want)
		}
		// What the SDK makes of the same body.
		var sdk string
		if msg, err := jsonrpc.DecodeMessage([]byte(tc.body)); err == nil {
			if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" && req.IsCall() {
				sdk, _ = rpcIDText(req.ID)
			}
		}
		if got != sdk {
			t.Errorf("toolsCallID(%s) = %q, the SDK's DecodeMessage reads %q", tc.body, got, sdk)
		}
	}
}

// benchCallBody is a tools/call POST body of a usual size.
var benchCallBody = []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/app/config.yaml","content":"` + strings.Repeat("key: value\\n", 40) + `"},"_meta":{"progressToken":"p-42"}}}`)

// stampBody's read of the id, against the SDK's DecodeMessage it
// replaced (go test -bench 'CallID' -benchmem ./agent/mcpfront/).
func BenchmarkToolsCallID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := toolsCallID(benchCallBody); !ok {
			b.Fatal("no id")
		}
	}
}

func BenchmarkDecodeMessageCallID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		msg, err := jsonrpc.DecodeMessage(benchCallBody)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := rpcIDText(msg.(*jsonrpc.Request).ID); !ok {
			b.Fatal("no id")
		}
	}
}
