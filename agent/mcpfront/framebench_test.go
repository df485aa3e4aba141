package mcpfront

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The frames of one allowed call as the bench's 2026-07-28 client and
// upstream write them.
const (
	benchCallFrame = `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}},"name":"add","arguments":{"a":1,"b":2}}}` + "\n"
	benchRespFrame = `{"jsonrpc":"2.0","id":"fulfiller:42","result":{"content":[{"type":"text","text":"3"}],"resultType":"complete"}}` + "\n"
)

// repeatReader yields frame n times, then EOF.
type repeatReader struct {
	frame  []byte
	n, off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := copy(p, r.frame[r.off:])
	if r.off += k; r.off == len(r.frame) {
		r.off, r.n = 0, r.n-1
	}
	return k, nil
}

// BenchmarkFrameWork is the front end's JSON work on one allowed call,
// both directions, on the old path: the client's frame read, its head
// and params read; the upstream's request written; its response read,
// relayed, annotated and written to the client.
func BenchmarkFrameWork(b *testing.B) {
	b.ReportAllocs()
	serverInfo := json.RawMessage(`{"name":"calc","version":"1.0.0"}`)
	u := &upstream{serverInfo: serverInfo}
	n := b.N
	callHook := func(f *inFrame) bool {
		id, ok := f.head()
		if !ok || string(f.method) != `"tools/call"` {
			b.Fatal("not read")
		}
		var params callParams
		if err := readCallParams(f.params, &params); err != nil {
			b.Fatal(err)
		}
		if np, ok := requestRevision(params.Meta, "2026-07-28"); !np || !ok {
			b.Fatal("revision")
		}
		args := params.Arguments
		p, err := callParamsJSON(json.RawMessage(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`), params.Name, args)
		if err != nil {
			b.Fatal(err)
		}
		bp := framePool.Get().(*[]byte)
		out, ok := appendCall((*bp)[:0], "fulfiller:42", "tools/call", p)
		if !ok {
			b.Fatal("not written")
		}
		_, _ = io.Discard.Write(out)
		*bp = out
		putFrame(bp)
		_ = id
		return true
	}
	clientID, _ := jsonrpc.MakeID(float64(42))
	respHook := func(f *inFrame) bool {
		_, ok := f.head()
		if !ok || f.method != nil {
			b.Fatal("not read")
		}
		res, ok := relayable(json.RawMessage(f.result))
		if !ok {
			b.Fatal("not relayable")
		}
		res, err := u.annotate(res, nil)
		if err != nil {
			b.Fatal(err)
		}
		bp := framePool.Get().(*[]byte)
		out, ok := appendResult((*bp)[:0], clientID, res)
		if !ok {
			b.Fatal("not written")
		}
		_, _ = io.Discard.Write(out)
		*bp = out
		putFrame(bp)
		return true
	}
	b.ResetTimer()
	for _, c := range []struct {
		frame string
		hook  frameHook
	}{{benchCallFrame, callHook}, {benchRespFrame, respHook}} {
		_, pw := io.Pipe()
		readFrames(&repeatReader{frame: []byte(c.frame), n: n}, 0, pw, c.hook)
	}
}
