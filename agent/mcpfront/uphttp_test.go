package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// upCall is a tools/call POST the HTTP upstream got.
type upCall struct {
	id                json.RawMessage
	session, protocol string
}

// httpUpRig is a Front in front of a go-sdk server over Streamable HTTP
// (SSE answers, or JSON with jsonResponse), reached as --upstream
// NAME=URL is (URLUpstream's own client), whose tools/call POSTs it
// records.
type httpUpRig struct {
	*rig
	server   *mcp.Server
	srv      *httptest.Server
	started  chan struct{} // "block" runs
	unblock  chan error    // what "block" saw end its call
	arrive   chan struct{} // a "wave" call runs
	release  chan struct{} // a "wave" call may answer
	conns    atomic.Int64  // TCP connections the upstream accepted
	mu       sync.Mutex
	calls    []upCall
	sessions []string // the Mcp-Session-Id of each initialize answered
	// forgotten are sessions the upstream answers 404 for.
	forgotten map[string]bool
}

func newHTTPUpRig(t *testing.T, jsonResponse bool) *httpUpRig {
	t.Helper()
	r := &httpUpRig{started: make(chan struct{}, 1), unblock: make(chan error, 1), forgotten: map[string]bool{},
		arrive: make(chan struct{}), release: make(chan struct{})}
	s := mcp.NewServer(&mcp.Implementation{Name: "calc", Version: "1"}, nil)
	obj := map[string]any{"type": "object"}
	s.AddTool(&mcp.Tool{Name: "add", InputSchema: obj}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a struct{ A, B int }
		if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: jsonOf(t, a.A+a.B)}}}, nil
	})
	// chatty sends progress on the call's stream and pings the caller
	// there before it answers.
	s.AddTool(&mcp.Tool{Name: "chatty", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "half"}); err != nil {
				return nil, err
			}
		}
		if err := req.Session.Ping(ctx, nil); err != nil {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ping: " + err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pinged"}}}, nil
	})
	// wave is answered once the test releases it (arrive, release).
	s.AddTool(&mcp.Tool{Name: "wave", InputSchema: obj}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r.arrive <- struct{}{}
		select {
		case <-r.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "block", InputSchema: obj}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r.started <- struct{}{}
		select {
		case <-ctx.Done():
			r.unblock <- ctx.Err()
		case <-time.After(10 * time.Second):
			r.unblock <- errors.New("never cancelled")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "unblocked"}}}, nil
	})
	r.server = s
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			_ = json.Unmarshal(body, &m)
			if m.Method == "tools/call" {
				r.mu.Lock()
				r.calls = append(r.calls, upCall{m.ID, req.Header.Get("Mcp-Session-Id"), req.Header.Get("Mcp-Protocol-Version")})
				r.mu.Unlock()
			}
		}
		r.mu.Lock()
		gone := r.forgotten[req.Header.Get("Mcp-Session-Id")]
		r.mu.Unlock()
		if gone {
			http.Error(w, "session not found", http.StatusNotFound) // as a server that restarted
			return
		}
		h.ServeHTTP(w, req)
		if id := w.Header().Get("Mcp-Session-Id"); id != "" && req.Header.Get("Mcp-Session-Id") == "" {
			r.mu.Lock()
			r.sessions = append(r.sessions, id)
			r.mu.Unlock()
		}
	}))
	r.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.srv.Start()

	ctx, cancel := context.WithCancel(context.Background())
	r.rig = &rig{t: t, ctx: ctx}
	r.eng = newFakeEngine(map[string]string{"add": "fulfil", "chatty": "fulfil", "block": "fulfil", "wave": "fulfil"})
	u, err := ParseUpstream("calc="+r.srv.URL, io.Discard)
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
		r.srv.CloseClientConnections()
		r.srv.Close()
		for ss := range s.Sessions() { // the upstream's sessions outlive its requests
			_ = ss.Close()
		}
	})
	r.start(f, "calc", 10*time.Second)
	return r
}

func (r *httpUpRig) upCalls() []upCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]upCall(nil), r.calls...)
}

// TestHTTPUpstreamCallPostedByTheFront: over Streamable HTTP the Front
// posts an allowed call itself on the session the SDK opened (its
// Mcp-Session-Id and revision, an id of the Front's own), and the
// client gets the upstream's result as it came, whether the upstream
// answers with an SSE stream or with JSON.
func TestHTTPUpstreamCallPostedByTheFront(t *testing.T) {
	for _, tc := range []struct {
		name string
		json bool
	}{{"sse", false}, {"json", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newHTTPUpRig(t, tc.json)
			cs := r.stdioClient("calc", nil)
			for i := range 3 {
				res := call(t, cs, "add", map[string]any{"a": 1, "b": i})
				if got, want := jsonOf(t, res), `{"content":[{"type":"text","text":"`+jsonOf(t, 1+i)+`"}]}`; got != want {
					t.Fatalf("call %d: %s, want %s", i, got, want)
				}
			}
			calls := r.upCalls()
			r.mu.Lock()
			sessions := append([]string(nil), r.sessions...)
			r.mu.Unlock()
			if len(calls) != 3 || len(sessions) != 1 {
				t.Fatalf("upstream got %d calls on %d sessions, want 3 on 1: %+v", len(calls), len(sessions), calls)
			}
			for i, c := range calls {
				if want := `"fulfiller:` + jsonOf(t, i+1) + `"`; string(c.id) != want {
					t.Errorf("call %d: id %s, want %s (the Front's own)", i, c.id, want)
				}
				if c.session != sessions[0] || c.protocol != v20251125 {
					t.Errorf("call %d: Mcp-Session-Id %q, Mcp-Protocol-Version %q; want %q, %q", i, c.session, c.protocol, sessions[0], v20251125)
				}
			}
		})
	}
}

// TestHTTPUpstreamStreamMessages: what the upstream sends on a call's
// stream before its answer reaches who it is for: its progress the
// client, under the client's own token; its ping is answered.
func TestHTTPUpstreamStreamMessages(t *testing.T) {
	r := newHTTPUpRig(t, false)
	progress := make(chan *mcp.ProgressNotificationParams, 4)
	cs := r.stdioClient("calc", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		progress <- req.Params
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	params := &mcp.CallToolParams{Name: "chatty", Arguments: map[string]any{}}
	params.SetProgressToken("client-token")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if text(res) != "pinged" {
		t.Fatalf("chatty: %s", jsonOf(t, res))
	}
	select {
	case p := <-progress:
		if p.ProgressToken != "client-token" || p.Message != "half" {
			t.Fatalf("progress: %s", jsonOf(t, p))
		}
	case <-ctx.Done():
		t.Fatal("the upstream's progress never reached the client")
	}
}

// TestHTTPUpstreamCancel: a client that cancels its call cancels the
// call the Front posted upstream (notifications/cancelled naming it).
func TestHTTPUpstreamCancel(t *testing.T) {
	r := newHTTPUpRig(t, false)
	cs := r.stdioClient("calc", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "block", Arguments: map[string]any{}})
		done <- err
	}()
	select {
	case <-r.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached the upstream")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call answered")
	}
	select {
	case err := <-r.unblock:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the upstream's call ended with %v, want it cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's call was never cancelled")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(r.eng.withdrawn()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w := r.eng.withdrawn(); len(w) != 1 || w[0].Reason != WithdrawCancelled {
		t.Fatalf("withdrawals: %+v", w)
	}
}

// TestHTTPUpstreamSessionGone: when the upstream no longer knows the
// session (404, as after its restart), the call gets an error result naming the upstream, the session
// is opened again, and the next calls run on the new one.
func TestHTTPUpstreamSessionGone(t *testing.T) {
	r := newHTTPUpRig(t, false)
	cs := r.stdioClient("calc", nil)
	if g := text(call(t, cs, "add", map[string]any{"a": 1, "b": 2})); g != "3" {
		t.Fatalf("add: %s", g)
	}
	r.mu.Lock()
	r.forgotten[r.sessions[0]] = true
	r.mu.Unlock()
	res := call(t, cs, "add", map[string]any{"a": 1, "b": 2})
	if !res.IsError || !strings.HasPrefix(text(res), "upstream calc failed during the call: ") || jsonOf(t, res.Meta) != `{"fulfiller/upstream":"calc"}` {
		t.Fatalf("on a session gone: %s", jsonOf(t, res))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := call(t, cs, "add", map[string]any{"a": 1, "b": 2})
		if !res.IsError {
			if text(res) != "3" {
				t.Fatalf("after the new session: %s", jsonOf(t, res))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new session: %s", jsonOf(t, res))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sessions) != 2 {
		t.Fatalf("sessions opened: %v, want 2", r.sessions)
	}
}

// TestHTTPUpstreamKeepsItsConnections: calls out to an upstream at once
// (one session for every client) each keep their connection from one
// wave to the next, as --upstream NAME=URL's own client pools them: Go's
// default client keeps 2 per host, and dialled again for the others.
func TestHTTPUpstreamKeepsItsConnections(t *testing.T) {
	r := newHTTPUpRig(t, false)
	const clients, waves = 6, 4
	css := make([]*mcp.ClientSession, clients)
	for i := range css {
		css[i] = r.stdioClient("calc", nil)
	}
	before := r.conns.Load() // the session's own (initialize, its stream)
	for w := range waves {
		var wg sync.WaitGroup
		for _, cs := range css {
			wg.Go(func() {
				if g := text(call(t, cs, "wave", map[string]any{})); g != "released" {
					t.Errorf("wave %d: %s", w, g)
				}
			})
		}
		for range clients { // all out at once
			select {
			case <-r.arrive:
			case <-time.After(10 * time.Second):
				t.Fatalf("wave %d: the calls never all reached the upstream", w)
			}
		}
		for range clients {
			r.release <- struct{}{}
		}
		wg.Wait()
	}
	// One connection per call out at once, and perhaps one more for the
	// session's stream being re-established: not one per call.
	if n := r.conns.Load() - before; n > clients+1 {
		t.Fatalf("%d connections dialled for %d waves of %d calls at once, want at most %d", n, waves, clients, clients+1)
	}
}
