package mcpfront

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The wire layer's tests speak JSON-RPC frames on both sides: a raw
// client on pipes to ServeStdio, and a scripted upstream on pipes.

// rawFrame is a JSON-RPC frame as the tests read it.
type rawFrame struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// rawUpstream is an upstream that answers initialize and tools/list
// itself and hands each tools/call and notification to the test.
type rawUpstream struct {
	t     *testing.T
	calls chan rawFrame // tools/call requests
	notes chan rawFrame // notifications
	mu    sync.Mutex
	out   io.Writer
}

func (u *rawUpstream) send(s string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, err := io.WriteString(u.out, s+"\n"); err != nil {
		u.t.Logf("upstream write: %v", err)
	}
}

// answer answers the call with the text.
func (u *rawUpstream) answer(call rawFrame, text string) {
	u.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, call.ID, text))
}

func (u *rawUpstream) serve(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m rawFrame
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			u.t.Errorf("the upstream read %q: %v", sc.Text(), err)
			continue
		}
		switch {
		case m.Method == "initialize":
			u.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}}`, m.ID))
		case m.Method == "tools/list":
			u.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"hang","inputSchema":{"type":"object"}}]}}`, m.ID))
		case m.Method == "tools/call":
			u.calls <- m
		case len(m.ID) == 0:
			u.notes <- m
		default:
			u.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, m.ID))
		}
	}
}

// wireRig is a Front in front of a rawUpstream, with a raw client.
type wireRig struct {
	*rig
	up     *rawUpstream
	lines  chan string // the client reads
	cw     io.WriteCloser
	served chan error
}

func newWireRig(t *testing.T, maxLine int) *wireRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &wireRig{rig: &rig{t: t, ctx: ctx}, up: &rawUpstream{t: t, calls: make(chan rawFrame, 64), notes: make(chan rawFrame, 64)}}
	var pipes []io.Closer
	up := Upstream{Name: "raw", What: "a scripted upstream", Transport: func() (mcp.Transport, error) {
		ur, fw := io.Pipe() // the upstream reads what the front writes
		fr, uw := io.Pipe()
		pipes = append(pipes, ur, fw, fr, uw)
		r.up.mu.Lock()
		r.up.out = uw
		r.up.mu.Unlock()
		go r.up.serve(ur)
		return &mcp.IOTransport{Reader: fr, Writer: fw}, nil
	}}
	r.eng = newFakeEngine(map[string]string{"echo": "fulfil", "hang": "fulfil", "nope": "reject:policy:not this one"})
	f, err := New(Config{Engine: r.eng}, up)
	if err != nil {
		t.Fatal(err)
	}
	r.start(f, "raw", 10*time.Second)
	cr, fw := io.Pipe() // the client reads what the front writes
	fr, cw := io.Pipe()
	r.cw = cw
	r.served = make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.served <- f.ServeStdio(ctx, "raw", &mcp.IOTransport{Reader: fr, Writer: fw, MaxLineLength: maxLine})
	}()
	r.lines = lineChan(cr, 1<<20)
	t.Cleanup(func() {
		cancel()
		cw.Close()
		fw.Close()
		r.wg.Wait()
		for _, p := range pipes {
			p.Close()
		}
	})
	return r
}

func (r *wireRig) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.cw, s+"\n"); err != nil {
		r.t.Fatal(err)
	}
}

func (r *wireRig) next() rawFrame {
	r.t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			r.t.Fatal("the client's connection ended")
		}
		var f rawFrame
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			r.t.Fatalf("the client read %q: %v", l, err)
		}
		return f
	case <-time.After(10 * time.Second):
		r.t.Fatal("nothing came to the client")
	}
	return rawFrame{}
}

func (r *wireRig) upCall() rawFrame {
	r.t.Helper()
	select {
	case c := <-r.up.calls:
		return c
	case <-time.After(10 * time.Second):
		r.t.Fatal("no call reached the upstream")
	}
	return rawFrame{}
}

// upNote is the next notification of method the upstream gets.
func (r *wireRig) upNote(method string) rawFrame {
	r.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n := <-r.up.notes:
			if n.Method == method {
				return n
			}
		case <-timeout:
			r.t.Fatalf("the upstream got no %s", method)
		}
	}
}

func (r *wireRig) initialize() {
	r.t.Helper()
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw-client","version":"1"}}}`)
	if f := r.next(); string(f.ID) != "0" || f.Result == nil {
		r.t.Fatalf("initialize: %+v", f)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

func textOf(t *testing.T, result json.RawMessage) string {
	t.Helper()
	var res mcp.CallToolResult
	if err := json.Unmarshal(result, &res); err != nil {
		t.Fatalf("result %s: %v", result, err)
	}
	return text(&res)
}

// Calls made back to back, answered upstream in the reverse order, with
// pings between them: each frame the client reads is whole, and each
// call gets its own result once. The upstream sees the Front's own ids.
func TestWireInterleavedCalls(t *testing.T) {
	r := newWireRig(t, 0)
	r.initialize()
	const n = 40
	for i := 1; i <= n; i++ {
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"i":%d}}}`, i, i))
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"ping-%d","method":"ping"}`, i))
	}
	var calls []rawFrame
	for range n {
		calls = append(calls, r.upCall())
	}
	var wg sync.WaitGroup
	for i := len(calls) - 1; i >= 0; i-- {
		c := calls[i]
		var p struct {
			Arguments struct{ I int } `json:"arguments"`
		}
		if err := json.Unmarshal(c.Params, &p); err != nil {
			t.Fatal(err)
		}
		var id string
		if err := json.Unmarshal(c.ID, &id); err != nil || !strings.HasPrefix(id, directPrefix) {
			t.Errorf("the upstream's call id %s: want a string %q…: the Front's own", c.ID, directPrefix)
		}
		wg.Add(1)
		go func() { defer wg.Done(); r.up.answer(c, fmt.Sprintf("echo %d", p.Arguments.I)) }()
	}
	wg.Wait()
	got := map[string]string{}
	for range 2 * n {
		f := r.next()
		if f.Error != nil {
			t.Errorf("id %s: error %+v", f.ID, f.Error)
			continue
		}
		if _, dup := got[string(f.ID)]; dup {
			t.Errorf("id %s answered twice", f.ID)
		}
		if strings.HasPrefix(string(f.ID), `"ping-`) {
			got[string(f.ID)] = string(f.Result)
			continue
		}
		got[string(f.ID)] = textOf(t, f.Result)
	}
	for i := 1; i <= n; i++ {
		if g, want := got[fmt.Sprint(i)], fmt.Sprintf("echo %d", i); g != want {
			t.Errorf("call %d: %q, want %q", i, g, want)
		}
		if g := got[fmt.Sprintf(`"ping-%d"`, i)]; g != "{}" {
			t.Errorf("ping %d: %q, want {}", i, g)
		}
	}
	if len(r.eng.seen()) != n {
		t.Errorf("%d proposals, want %d", len(r.eng.seen()), n)
	}
}

// A refused call is answered by the Front on the connection: isError,
// the reason in _meta, the upstream never sees it.
func TestWireRejectedCall(t *testing.T) {
	r := newWireRig(t, 0)
	r.initialize()
	r.send(`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	f := r.next()
	want := `{"_meta":{"fulfiller/reason":"policy"},"content":[{"type":"text","text":"fulfiller refused this call (policy): not this one"}],"isError":true}`
	if string(f.ID) != `"x"` || string(f.Result) != want {
		t.Errorf("got id %s result %s; want %s", f.ID, f.Result, want)
	}
	select {
	case c := <-r.up.calls:
		t.Errorf("the upstream got %+v", c)
	default:
	}
}

// A client's notifications/cancelled for a call out upstream withdraws
// it as cancelled, and the upstream gets notifications/cancelled naming
// the id it was sent under; its late answer (an id no call waits for
// any more), and a response of an id the SDK never used, are dropped,
// and the next call goes through.
func TestWireCancelledCall(t *testing.T) {
	r := newWireRig(t, 0)
	r.initialize()
	r.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"hang","arguments":{}}}`)
	c := r.upCall()
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user pressed stop"}}`)
	n := r.upNote("notifications/cancelled")
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(n.Params, &p) != nil || string(p.RequestID) != string(c.ID) {
		t.Errorf("the upstream got %s %s; want notifications/cancelled of %s", n.Method, n.Params, c.ID)
	}
	if w := r.eng.withdrawn(); len(w) != 1 || w[0].Reason != WithdrawCancelled {
		t.Errorf("withdrawals %+v, want one, cancelled", w)
	}
	r.up.answer(c, "too late")
	r.up.send(`{"jsonrpc":"2.0","id":"fulfiller:999999","result":{"content":[]}}`)
	r.up.send(`{"jsonrpc":"2.0","id":424242,"result":{"content":[]}}`)
	r.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	r.up.answer(r.upCall(), "after")
	for {
		f := r.next()
		if string(f.ID) == "7" {
			continue // the cancelled call's own answer, as the SDK's handler gives one
		}
		if string(f.ID) != "8" || textOf(t, f.Result) != "after" {
			t.Errorf("got %+v, want call 8's result", f)
		}
		break
	}
}

// A tools/call before initialize is refused as the SDK refuses it, and
// nothing is proposed.
func TestWireCallBeforeInitialize(t *testing.T) {
	r := newWireRig(t, 0)
	r.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	f := r.next()
	if string(f.ID) != "1" || f.Error == nil || !strings.Contains(f.Error.Message, `method "tools/call" is invalid during session initialization`) {
		t.Errorf("got %+v, want the SDK's error", f)
	}
	if n := len(r.eng.seen()); n != 0 {
		t.Errorf("%d proposals, want none", n)
	}
}

// An oversized frame, and one that is no JSON, end the client's session
// as the SDK's transport ends it: ServeStdio returns an error, the call
// in flight is withdrawn as disconnected, and nothing of the frames is
// proposed.
func TestWireOversizedAndMalformedFrames(t *testing.T) {
	for name, frame := range map[string]string{
		"oversized": `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"x":"` + strings.Repeat("a", 8192) + `"}}}`,
		"malformed": `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := newWireRig(t, 4096)
			r.initialize()
			r.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang","arguments":{}}}`)
			r.upCall()
			// The session may close the pipe before the frame is all
			// written.
			_, _ = io.WriteString(r.cw, frame+"\n")
			select {
			case err := <-r.served:
				if err == nil {
					t.Error("ServeStdio returned no error")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ServeStdio still runs")
			}
			if n := len(r.eng.seen()); n != 1 {
				t.Errorf("%d proposals, want the first call's only", n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(r.eng.withdrawn()) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if w := r.eng.withdrawn(); len(w) != 1 || w[0].Reason != WithdrawDisconnected {
				t.Errorf("withdrawals %+v, want one, disconnected", w)
			}
		})
	}
}

// A call whose params the SDK would read otherwise than a strict reader
// (a duplicated name) is left to the SDK's session, and still decided.
func TestWireLeavesOddCallsToTheSDK(t *testing.T) {
	r := newWireRig(t, 0)
	r.initialize()
	r.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hang","name":"echo","arguments":{}}}`)
	c := r.upCall()
	r.up.answer(c, "echoed")
	f := r.next()
	if string(f.ID) != "3" || textOf(t, f.Result) != "echoed" {
		t.Errorf("got %+v", f)
	}
	if p := r.eng.seen(); len(p) != 1 || p[0].Tool.Name != "echo" {
		t.Errorf("proposals %+v, want one of echo (the last name, as the SDK reads it)", p)
	}
}

// The params of a call the Front sends itself: the SDK's _meta as it
// put it on its own requests, the name encoded, the arguments as
// proposed; arguments that are not JSON are refused, not sent.
func TestCallParamsJSON(t *testing.T) {
	for _, c := range []struct {
		meta, args, want string
		name             string
	}{
		{`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`, `{"a":1}`, `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"add \"x\"","arguments":{"a":1}}`, `add "x"`},
		{``, `{}`, `{"name":"add","arguments":{}}`, "add"},
	} {
		got, err := callParamsJSON(json.RawMessage(c.meta), c.name, json.RawMessage(c.args))
		if err != nil || string(got) != c.want {
			t.Errorf("callParamsJSON(%s, %q, %s) = %s, %v; want %s", c.meta, c.name, c.args, got, err, c.want)
		}
	}
	if got, err := callParamsJSON(nil, "add", json.RawMessage(`{"a":`)); err == nil {
		t.Errorf("arguments that are not JSON: %s, want an error", got)
	}
}

// An upstream's result is relayed as it came but for its resultType;
// one the SDK's client is to judge (not an object, a member twice, an
// unknown content type, input requested) is left to its reading.
func TestRelayable(t *testing.T) {
	for in, want := range map[string]string{
		`{"_meta":{"k":"v"},"content":[{"type":"text","text":"3"}],"resultType":"complete","isError":false,"extra":1}`: `{"_meta":{"k":"v"},"content":[{"type":"text","text":"3"}],"isError":false,"extra":1}`,
		`{"content":[]}`: `{"content":[]}`,
		`{"structuredContent":{"sum":3},"content":null}`: `{"structuredContent":{"sum":3},"content":null}`,
	} {
		got, ok := relayable(json.RawMessage(in))
		if !ok || string(got) != want {
			t.Errorf("relayable(%s) = %s, %v; want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{
		`[1]`,
		`{"content":[{"type":"video"}]}`,
		`{"content":[{"type":"text","text":"a"}],"content":[]}`,
		`{"inputRequests":{"q":{}},"resultType":"input_required"}`,
		`{"content":[],"resultType":"input_required"}`,
		`{"content":[]} {}`,
	} {
		if got, ok := relayable(json.RawMessage(in)); ok {
			t.Errorf("relayable(%s) = %s; want it left to the SDK's reading", in, got)
		}
	}
}

// The calculator's result as a 2026-07-28 upstream sends it: relayed
// as it came (relayable) against read into the SDK's types and written
// again (what received did for every call before).
func BenchmarkRelayResult(b *testing.B) {
	raw := json.RawMessage(`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"calc","version":"1.0.0"}},"content":[{"type":"text","text":"3"}],"resultType":"complete"}`)
	b.Run("relayable", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := relayable(raw); !ok {
				b.Fatal("not relayable")
			}
		}
	})
	b.Run("sdk-types", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var res mcp.CallToolResult
			if err := json.Unmarshal(raw, &res); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(withoutResultType(&res)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A frame nested deeper than the SDK's JSON decoding accepts (1 000) is
// not read by the Front, whichever side it comes from: it is left to
// the SDK, which refuses it, so the Front takes nothing the SDK would
// not. Brackets inside strings do not count.
func TestWireLeavesTooDeepFramesToTheSDK(t *testing.T) {
	nest := func(n int) string {
		return strings.Repeat(`[`, n) + strings.Repeat(`]`, n)
	}
	call := func(args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"x":` + args + `}}}`)
	}
	// The envelope and params add two levels of their own.
	if _, _, ok := readHead(call(nest(sdkMaxDepth - 3))); !ok {
		t.Errorf("a call nested %d deep was not read", sdkMaxDepth)
	}
	if _, _, ok := readHead(call(nest(sdkMaxDepth - 2))); ok {
		t.Errorf("a call nested %d deep was read; the SDK refuses it", sdkMaxDepth+1)
	}
	if _, _, ok := readHead(call(`"` + strings.Repeat(`[{`, 2*sdkMaxDepth) + `"`)); !ok {
		t.Error("brackets inside a string counted as nesting")
	}
	if _, _, ok := readHead(call(`"\"` + strings.Repeat(`[`, 2*sdkMaxDepth) + `"`)); !ok {
		t.Error("an escaped quote ended the string")
	}
	resp := []byte(`{"jsonrpc":"2.0","id":"fulfiller:1","result":{"content":[],"x":` + nest(sdkMaxDepth) + `}}`)
	if _, _, ok := readHead(resp); ok {
		t.Error("an upstream's response nested too deep was read")
	}
}

// lineChan hands the lines read from r (each at most max bytes) on a
// channel, closed when r ends: what a rig's client reads of the Front.
func lineChan(r io.Reader, max int) chan string {
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, max)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// readHead reads raw as the frame hooks do: ok false leaves it to the
// SDK.
func readHead(raw []byte) (inFrame, jsonrpc.ID, bool) {
	var s scanner
	var f inFrame
	if !s.scanText(raw) {
		return f, jsonrpc.ID{}, false
	}
	f.read(&s, raw)
	id, ok := f.head()
	return f, id, ok
}

// A tools/call whose method is escaped, and a result spaced out, are
// still read as the SDK reads them: the call is left to the SDK's
// session (which still proposes it), and the result reaches the client
// compacted, as the SDK's encoding wrote it.
func TestWireEscapedMethodAndSpacedResult(t *testing.T) {
	r := newWireRig(t, 0)
	r.initialize()
	r.send(`{"jsonrpc":"2.0","id":5,"method":"tools\/call","params":{"name":"echo","arguments":{}}}`)
	c := r.upCall()
	r.up.send(fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"content": [{"type": "text", "text": "a b"}]}}`, c.ID))
	f := r.next()
	if string(f.ID) != "5" || textOf(t, f.Result) != "a b" {
		t.Errorf("got %+v", f)
	}
	r.send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	c = r.upCall()
	r.up.send(fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"content": [{"type": "text", "text": "a b"}]}}`, c.ID))
	f = r.next()
	if want := `{"content":[{"type":"text","text":"a b"}]}`; string(f.ID) != "6" || string(f.Result) != want {
		t.Errorf("got id %s result %s, want %s", f.ID, f.Result, want)
	}
	if p := r.eng.seen(); len(p) != 2 {
		t.Errorf("%d proposals, want 2", len(p))
	}
}
