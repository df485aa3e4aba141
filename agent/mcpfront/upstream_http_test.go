package mcpfront

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestURLUpstream: an upstream over Streamable HTTP is proxied like one
// over stdio, and while it is unreachable a call gets an error result
// naming it, at once; once it is back, calls run again.
func TestURLUpstream(t *testing.T) {
	up := toolserver.NewMCP(&mcp.Implementation{Name: "calc", Version: "1"}, toolserver.Calculator()...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	serve := func(l net.Listener) *httptest.Server {
		s := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
		s.Listener.Close()
		s.Listener = l
		s.Start()
		return s
	}
	srv := serve(l)
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, ctx: ctx}
	r.eng = newFakeEngine(map[string]string{"add": "fulfil"})
	u, err := ParseUpstream("calc=http://"+addr+"/", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{Engine: r.eng, BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond}, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
		srv.Close()
		for ss := range up.Sessions() { // the upstream's sessions outlive its requests
			_ = ss.Close()
		}
	})
	r.start(f, "calc", 10*time.Second)
	cs := r.stdioClient("calc", nil)
	if g := text(call(t, cs, "add", map[string]any{"a": 1, "b": 2})); g != "3" {
		t.Fatalf("add: %s", g)
	}
	srv.CloseClientConnections()
	srv.Close()
	res := call(t, cs, "add", map[string]any{"a": 1, "b": 2})
	if !res.IsError || !strings.HasPrefix(text(res), "upstream calc ") || jsonOf(t, res.Meta) != `{"fulfiller/upstream":"calc"}` {
		t.Fatalf("while unreachable: %s", jsonOf(t, res))
	}
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port could not be taken again: %v", err)
	}
	srv = serve(l2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := call(t, cs, "add", map[string]any{"a": 1, "b": 2})
		if !res.IsError && text(res) == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after it came back: %s", jsonOf(t, res))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMalformedClient: a client that sends a malformed call gets a
// JSON-RPC error and nothing is proposed; one that sends garbage is cut
// off, and ServeStdio returns.
func TestMalformedClient(t *testing.T) {
	r := newRig(t, Config{})
	cr, fw := io.Pipe() // client reads what the front writes
	fr, cw := io.Pipe() // front reads what the client writes
	served := make(chan error, 1)
	go func() { served <- r.front.ServeStdio(r.ctx, "files", &mcp.IOTransport{Reader: fr, Writer: fw}) }()
	lines := make(chan string, 16)
	go func() {
		b := make([]byte, 1<<16)
		var buf string
		for {
			n, err := cr.Read(b)
			buf += string(b[:n])
			for {
				i := strings.IndexByte(buf, '\n')
				if i < 0 {
					break
				}
				lines <- buf[:i]
				buf = buf[i+1:]
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	send := func(s string) {
		if _, err := io.WriteString(cw, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no answer")
			return ""
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if l := next(); !strings.Contains(l, `"id":1,"result"`) {
		t.Fatalf("initialize: %s", l)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":[1,2]}`)
	if l := next(); !strings.Contains(l, `"id":2,"error"`) {
		t.Errorf("a malformed call: %s, want a JSON-RPC error", l)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file","arguments":"not an object"}}`)
	if l := next(); !strings.Contains(l, `"id":3,"error"`) {
		t.Errorf("arguments that are not an object: %s, want a JSON-RPC error", l)
	}
	send(`this is not JSON {{{`)
	select {
	case err := <-served:
		if err == nil {
			t.Error("ServeStdio returned no error for garbage")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio still runs after garbage")
	}
	cw.Close()
	fw.Close()
	if n := len(r.eng.seen()); n != 0 {
		t.Errorf("%d proposals, want none", n)
	}
}
