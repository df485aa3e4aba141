package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// testGateway is a minimal stand-in for the reference gateway, just enough
// to drive the client: join frame, welcome, presence, broadcast to everyone
// (sender included) with missing fields stamped, and hooks for tests to
// inject frames, drop sockets, stall, and refuse upgrades. It lives in the
// test files so agent tests depend on no other package.
type testGateway struct {
	t   *testing.T
	srv *httptest.Server

	mu         sync.Mutex
	caps       map[string][]Capability // by token; others get defaultCaps
	extras     []Participant           // listed in every welcome besides the connected
	conns      map[*gwConn]bool
	events     []string // "join <id> #n", "closed <id> #n", in the order they happened
	joins      []gwJoin
	refuse     bool
	noWelcome  bool
	greeting   string                          // a frame written right after each welcome
	onEnvelope func(from string, env Envelope) // called for each envelope a client sent
	seq        int

	wg     sync.WaitGroup
	closed chan struct{}
}

type gwJoin struct {
	Authorization string
	Frame         string
}

type gwConn struct {
	g       *testGateway
	n       int
	ws      *websocket.Conn
	id      string
	wmu     sync.Mutex
	stalled atomic.Bool // no pongs, no more envelopes handled
	gone    sync.Once
}

var defaultCaps = []Capability{{Kind: "chat"}}

const baselineCap = `{"id":"mcp-response","kind":"mcp/response"}`

func newTestGateway(t *testing.T) *testGateway {
	t.Helper()
	g := &testGateway{
		t:      t,
		caps:   map[string][]Capability{},
		conns:  map[*gwConn]bool{},
		closed: make(chan struct{}),
	}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
	return g
}

// URL has a path and query on purpose: the reference gateway ignores both.
func (g *testGateway) URL() string {
	return "ws" + strings.TrimPrefix(g.srv.URL, "http") + "/some/path?space=ignored"
}

func (g *testGateway) Close() {
	select {
	case <-g.closed:
		return
	default:
	}
	close(g.closed)
	g.mu.Lock()
	for c := range g.conns {
		c.ws.Close()
	}
	g.mu.Unlock()
	g.srv.Close()
	g.wg.Wait()
}

func (g *testGateway) set(f func(g *testGateway)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *testGateway) event(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.events = append(g.events, fmt.Sprintf(format, args...))
}

func (g *testGateway) Events() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.events...)
}

func (g *testGateway) Joins() []gwJoin {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gwJoin(nil), g.joins...)
}

// connsOf returns the open sockets joined as id.
func (g *testGateway) connsOf(id string) []*gwConn {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*gwConn
	for c := range g.conns {
		if c.id == id {
			out = append(out, c)
		}
	}
	return out
}

// DropAll closes every socket abruptly, without a close frame.
func (g *testGateway) DropAll() {
	g.mu.Lock()
	conns := make([]*gwConn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		c.markClosed()
		c.ws.Close()
	}
}

// Stall makes every open socket stop reading, so pings go unanswered.
// Sockets opened later are not stalled.
func (g *testGateway) Stall() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.conns {
		c.stalled.Store(true)
	}
}

// SendTo writes a raw frame to every socket joined as id.
func (g *testGateway) SendTo(id string, typ int, data string) {
	g.t.Helper()
	conns := g.connsOf(id)
	if len(conns) == 0 {
		g.t.Errorf("gateway: nobody joined as %q", id)
	}
	for _, c := range conns {
		c.write(typ, []byte(data))
	}
}

// Broadcast writes a raw text frame to every joined socket.
func (g *testGateway) Broadcast(data string) { g.broadcast(nil, data) }

func (g *testGateway) broadcast(except *gwConn, data string) {
	g.mu.Lock()
	conns := make([]*gwConn, 0, len(g.conns))
	for c := range g.conns {
		if c.id != "" && c != except {
			conns = append(conns, c)
		}
	}
	g.mu.Unlock()
	for _, c := range conns {
		c.write(websocket.TextMessage, []byte(data))
	}
}

func (c *gwConn) write(typ int, data []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.ws.WriteMessage(typ, data) // a closed socket is the test's business
}

func (c *gwConn) markClosed() {
	c.gone.Do(func() { c.g.event("closed %s #%d", c.id, c.n) })
}

func (g *testGateway) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	refuse := g.refuse
	g.mu.Unlock()
	if refuse {
		http.Error(w, "refused by test", http.StatusServiceUnavailable)
		return
	}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	g.mu.Lock()
	select {
	case <-g.closed:
		g.mu.Unlock()
		ws.Close()
		return
	default:
	}
	g.seq++
	c := &gwConn{g: g, n: g.seq, ws: ws}
	g.conns[c] = true
	g.wg.Add(1)
	g.mu.Unlock()
	defer g.wg.Done()
	ws.SetPingHandler(func(data string) error {
		if c.stalled.Load() {
			return nil
		}
		ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		return nil
	})
	// Record the close as soon as the client's close frame arrives, before
	// the answer goes back, so event order follows the wire.
	ws.SetCloseHandler(func(code int, _ string) error {
		c.markClosed()
		c.wmu.Lock()
		defer c.wmu.Unlock()
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
		return nil
	})
	defer func() {
		c.markClosed()
		ws.Close()
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		if c.id != "" {
			g.Broadcast(fmt.Sprintf(`{"protocol":"mew/v0.4","id":"presence-leave-%d","ts":"2026-11-22T10:00:00Z","from":"system:gateway","kind":"system/presence","payload":{"event":"leave","participant":{"id":%q}}}`, c.n, c.id))
		}
	}()
	c.serve(r.Header.Get("Authorization"))
}

func (c *gwConn) serve(authorization string) {
	g := c.g
	_, first, err := c.ws.ReadMessage()
	if err != nil {
		return
	}
	var jf JoinFrame
	if json.Unmarshal(first, &jf) != nil || jf.Type != "join" || jf.ParticipantID == "" {
		return
	}
	g.mu.Lock()
	g.joins = append(g.joins, gwJoin{Authorization: authorization, Frame: string(first)})
	g.events = append(g.events, fmt.Sprintf("join %s #%d", jf.ParticipantID, c.n))
	caps, ok := g.caps[jf.Token]
	if !ok {
		caps = defaultCaps
	}
	others := append([]Participant(nil), g.extras...)
	for o := range g.conns {
		if o.id != "" && o != c {
			others = append(others, Participant{ID: o.id, Capabilities: defaultCaps})
		}
	}
	noWelcome, greeting := g.noWelcome, g.greeting
	c.id = jf.ParticipantID
	g.mu.Unlock()

	capsJSON, _ := json.Marshal(caps)
	you := strings.TrimSuffix(string(capsJSON), "]") + "," + baselineCap + "]"
	othersJSON, _ := json.Marshal(others)
	if !noWelcome {
		c.write(websocket.TextMessage, fmt.Appendf(nil,
			`{"protocol":"mew/v0.4","id":"welcome-%d","ts":"2026-11-22T10:00:00Z","from":"system:gateway","to":[%q],"kind":"system/welcome","payload":{"you":{"id":%q,"capabilities":%s},"participants":%s,"active_streams":[]}}`,
			c.n, jf.ParticipantID, jf.ParticipantID, you, othersJSON))
	}
	if greeting != "" {
		c.write(websocket.TextMessage, []byte(greeting))
	}
	g.broadcast(c, fmt.Sprintf(`{"protocol":"mew/v0.4","id":"presence-join-%d","ts":"2026-11-22T10:00:00Z","from":"system:gateway","kind":"system/presence","payload":{"event":"join","participant":{"id":%q,"capabilities":%s}}}`,
		c.n, jf.ParticipantID, you))

	for {
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		if c.stalled.Load() {
			<-g.closed
			return
		}
		if typ == websocket.BinaryMessage {
			continue
		}
		env, err := Decode(data)
		if err != nil {
			continue
		}
		if env.From == "" {
			env.From = c.id
		}
		out, _ := Encode(env)
		g.Broadcast(string(out))
		g.mu.Lock()
		hook := g.onEnvelope
		g.mu.Unlock()
		if hook != nil {
			hook(c.id, env)
		}
	}
}
