package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/poll"
)

const waitLimit = 5 * time.Second

// logBuffer is a log sink safe to read while it is written.
type logBuffer = logbuf.Buffer

// harness wires a test gateway and clients; everything is closed and
// checked for leaked goroutines when the test ends.
type harness struct {
	t    *testing.T
	gw   *testGateway
	logs *logBuffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	// Registered first, so it runs after every other cleanup.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	h := &harness{t: t, logs: &logBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("client logs:\n%s", h.logs)
		}
	})
	h.gw = newTestGateway(t)
	return h
}

// config is a fast configuration for tests; mutate adjusts it.
func (h *harness) config(id string, mutate func(*Config)) Config {
	cfg := Config{
		URL:          h.gw.URL(),
		ID:           id,
		Token:        id + "-token",
		JoinTimeout:  2 * time.Second,
		PingInterval: time.Second,
		PongTimeout:  time.Second,
		BackoffMin:   5 * time.Millisecond,
		BackoffMax:   20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

func (h *harness) dial(id string, mutate func(*Config)) *Client {
	h.t.Helper()
	c, err := Dial(context.Background(), h.config(id, mutate))
	if err != nil {
		h.t.Fatalf("Dial %s: %v", id, err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, s *Subscription) Envelope {
	t.Helper()
	select {
	case env, ok := <-s.C():
		if !ok {
			t.Fatal("subscription closed")
		}
		return env
	case <-time.After(waitLimit):
		t.Fatal("no envelope within", waitLimit)
	}
	return Envelope{}
}

// recvIDs receives n envelopes and returns their ids.
func recvIDs(t *testing.T, s *Subscription, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = recv(t, s).ID
	}
	return ids
}

// quiet asserts that nothing arrives for a short while. It can only miss a
// bug, never fail a correct client.
func quiet(t *testing.T, s *Subscription) {
	t.Helper()
	select {
	case env := <-s.C():
		t.Fatalf("unexpected envelope %s (%s)", env.ID, env.Raw)
	case <-time.After(50 * time.Millisecond):
	}
}

// statsEventually waits for counters that are updated just after the
// event a test observes.
func statsEventually(t *testing.T, c *Client, ok func(Stats) bool) {
	t.Helper()
	var st Stats
	if !poll.Within(poll.Limit, func() bool { st = c.Stats(); return ok(st) }) {
		t.Fatalf("stats = %+v", st)
	}
}

func chat(id, from string, to ...string) string {
	toJSON, _ := json.Marshal(to)
	if len(to) == 0 {
		return fmt.Sprintf(`{"protocol":"mew/v0.4","id":%q,"ts":"2026-11-22T10:00:00Z","from":%q,"kind":"chat","payload":{"text":"hi"}}`, id, from)
	}
	return fmt.Sprintf(`{"protocol":"mew/v0.4","id":%q,"ts":"2026-11-22T10:00:00Z","from":%q,"to":%s,"kind":"chat","payload":{"text":"hi"}}`, id, from, toJSON)
}

func ids(ps []Participant) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %#v\nwant %#v", what, got, want)
	}
}

func TestDialSendsJoinFrameAndBearer(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.caps["s3cret-token"] = []Capability{{Kind: "mcp/*"}, {Kind: "chat"}} })
	c := h.dial("fulfiller", func(c *Config) { c.Space = "lab"; c.Token = "s3cret-token" })
	h.dial("observer", func(c *Config) { c.Token = "" })

	equal(t, "joins", h.gw.Joins(), []gwJoin{
		{Authorization: "Bearer s3cret-token", Frame: `{"type":"join","participantId":"fulfiller","space":"lab","token":"s3cret-token"}`},
		{Authorization: "", Frame: `{"type":"join","participantId":"observer","token":""}`},
	})
	equal(t, "capabilities", c.Capabilities(), []Capability{{Kind: "mcp/*"}, {Kind: "chat"}, {ID: "mcp-response", Kind: "mcp/response"}})
	if !c.Connected() || c.ID() != "fulfiller" {
		t.Fatalf("Connected=%v ID=%q", c.Connected(), c.ID())
	}
	if !strings.Contains(h.logs.String(), "joined space") {
		t.Fatalf("no join logged:\n%s", h.logs)
	}
	c.Close()
	if strings.Contains(h.logs.String(), "s3cret") {
		t.Fatalf("token in logs:\n%s", h.logs)
	}
	if c.Connected() {
		t.Fatal("Connected after Close")
	}
	cfg := h.config("x", func(c *Config) { c.Token = "s3cret" })
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v %#v", cfg, cfg)} {
		if strings.Contains(s, "s3cret") {
			t.Fatalf("token in fmt output: %s", s)
		}
	}
}

func TestDialWelcomeTimeout(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.noWelcome = true })
	start := time.Now()
	_, err := Dial(context.Background(), h.config("fulfiller", func(c *Config) { c.JoinTimeout = 100 * time.Millisecond }))
	if !errors.Is(err, ErrNoWelcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNoWelcome and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), h.gw.URL()) || !strings.Contains(err.Error(), `"fulfiller"`) {
		t.Fatalf("error does not name gateway and id: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Dial took %v with a 100ms join timeout", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dial(ctx, h.config("fulfiller", nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial with cancelled ctx: %v", err)
	}
}

func TestDialErrors(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.refuse = true })
	_, err := Dial(context.Background(), h.config("fulfiller", nil))
	if err == nil || !strings.HasPrefix(err.Error(), "dial "+h.gw.URL()+": ") || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("refused upgrade: %v", err)
	}
	for _, cfg := range []Config{{URL: h.gw.URL()}, {URL: "ftp://x", ID: "a"}, {URL: "ws://", ID: "a"}} {
		if _, err := Dial(context.Background(), cfg); err == nil {
			t.Fatalf("Dial(%v) succeeded", cfg)
		}
	}
}

func TestRosterFollowsPresence(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.extras = []Participant{{ID: "ghost"}} })
	c := h.dial("fulfiller", nil)
	equal(t, "initial roster", ids(c.Roster()), []string{"ghost"})
	pres := c.Subscribe(SubscribeOptions{Kinds: []string{KindPresence}})

	calc := h.dial("calculator", nil)
	env := recv(t, pres)
	// Subscribers see presence after the roster took it in.
	p, ok := c.Participant("calculator")
	want := Participant{ID: "calculator", Capabilities: []Capability{{Kind: "chat"}, {ID: "mcp-response", Kind: "mcp/response"}}}
	if !ok || !reflect.DeepEqual(p, want) {
		t.Fatalf("after %s: Participant(calculator) = %#v, %v", env.Raw, p, ok)
	}
	equal(t, "roster", ids(c.Roster()), []string{"calculator", "ghost"})
	equal(t, "calculator's roster", ids(calc.Roster()), []string{"fulfiller", "ghost"})

	// Copies: changing what Roster returned changes nothing inside.
	r := c.Roster()
	r[0].Capabilities[0].Kind = "*"
	equal(t, "roster after caller mutation", c.Roster()[0], want)

	calc.Close()
	env = recv(t, pres)
	equal(t, "leave payload", string(env.Payload), `{"event":"leave","participant":{"id":"calculator"}}`)
	equal(t, "roster after leave", ids(c.Roster()), []string{"ghost"})
	if _, ok := c.Participant("calculator"); ok {
		t.Fatal("calculator still known after leave")
	}
}

func TestSubscriptionFilters(t *testing.T) {
	h := newHarness(t)
	c := h.dial("fulfiller", nil)
	mine := c.Subscribe(SubscribeOptions{})
	all := c.Subscribe(SubscribeOptions{All: true})
	mcp := c.Subscribe(SubscribeOptions{All: true, Kinds: []string{"mcp/*"}})
	chats := c.Subscribe(SubscribeOptions{Kinds: []string{KindChat}})
	imp := c.Subscribe(SubscribeOptions{Impersonations: true, Kinds: []string{KindChat}})

	for _, f := range []string{
		chat("to-me", "x", "fulfiller"),
		chat("to-other", "x", "calculator"),
		chat("no-to", "x"),
		`{"protocol":"mew/v0.4","id":"empty-to","from":"x","to":[],"kind":"chat","payload":{"text":"hi"}}`,
		`{"protocol":"mew/v0.4","id":"req-both","from":"x","to":["calculator","fulfiller"],"kind":"mcp/request","payload":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}`,
		`{"protocol":"mew/v0.4","id":"req-other","from":"x","to":["calculator"],"kind":"mcp/request","payload":{"jsonrpc":"2.0","id":2,"method":"tools/list"}}`,
		chat("echo", "fulfiller"),
		`{"protocol":"mew/v0.3","id":"v03","from":"x","kind":"chat","payload":{"text":"old"}}`,
		chat("end", "x"),
	} {
		h.gw.SendTo("fulfiller", websocket.TextMessage, f)
	}
	equal(t, "default", recvIDs(t, mine, 6), []string{"to-me", "no-to", "empty-to", "req-both", "v03", "end"})
	equal(t, "All", recvIDs(t, all, 8), []string{"to-me", "to-other", "no-to", "empty-to", "req-both", "req-other", "v03", "end"})
	equal(t, "mcp/*", recvIDs(t, mcp, 2), []string{"req-both", "req-other"})
	equal(t, "chat", recvIDs(t, chats, 5), []string{"to-me", "no-to", "empty-to", "v03", "end"})
	// "echo" is in our name, but we never wrote it: an impersonation,
	// delivered only to the subscription that asked for them.
	equal(t, "Impersonations", recvIDs(t, imp, 6), []string{"to-me", "no-to", "empty-to", "echo", "v03", "end"})
	quiet(t, mine)
	statsEventually(t, c, func(st Stats) bool {
		return st.Echoes == 0 && st.Impersonations == 1 && st.Envelopes == 9 && st.Delivered == 6+8+2+5+6
	})
}

func TestSendStampsAndDropsOwnEcho(t *testing.T) {
	h := newHarness(t)
	seen := make(chan Envelope, 10)
	h.gw.set(func(g *testGateway) { g.onEnvelope = func(_ string, env Envelope) { seen <- env } })
	c := h.dial("fulfiller", nil)
	sub := c.Subscribe(SubscribeOptions{All: true})

	sent, err := c.Send(context.Background(), Envelope{Kind: KindChat, To: []string{"observer"}, Payload: json.RawMessage(`{"text":"hello"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if sent.Protocol != ProtocolV04 || !strings.HasPrefix(sent.ID, "fulfiller-") || sent.From != "fulfiller" {
		t.Fatalf("sent = %+v", sent)
	}
	if _, err := time.Parse(time.RFC3339Nano, sent.TS); err != nil {
		t.Fatalf("ts %q: %v", sent.TS, err)
	}
	got := <-seen
	equal(t, "gateway got", string(got.Raw), fmt.Sprintf(
		`{"protocol":"mew/v0.4","id":%q,"ts":%q,"from":"fulfiller","to":["observer"],"kind":"chat","payload":{"text":"hello"}}`, sent.ID, sent.TS))

	if _, err := c.Send(context.Background(), Envelope{Kind: KindChat, From: "human", Payload: json.RawMessage(`{"text":"x"}`)}); err == nil {
		t.Fatal("sent with a forged from")
	}
	second, err := c.Send(context.Background(), Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"again"}`)})
	if err != nil || second.ID == sent.ID {
		t.Fatalf("second send: id %q (first %q), err %v", second.ID, sent.ID, err)
	}
	<-seen
	// The gateway echoed both to us before this marker; neither is delivered.
	h.gw.SendTo("fulfiller", websocket.TextMessage, chat("marker", "x"))
	equal(t, "first delivered", recv(t, sub).ID, "marker")
	if st := c.Stats(); st.Echoes != 2 || st.Sends != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestSkipsMalformedAndBinaryFrames(t *testing.T) {
	h := newHarness(t)
	c := h.dial("fulfiller", nil)
	sub := c.Subscribe(SubscribeOptions{})
	for _, f := range []string{
		`{"kind": "chat", oops`,
		`42`,
		`null`,
		`"just a string"`,
		`[]`,
		`{}`,
		`{"protocol":"mew/v0.2","id":"old","kind":"chat","payload":{"text":"x"}}`,
		`{"protocol":"mew/v0.4","id":"nokind","payload":{}}`,
		`{"protocol":"mew/v0.4","id":"badcorr","kind":"chat","correlation_id":{"a":1}}`,
	} {
		h.gw.SendTo("fulfiller", websocket.TextMessage, f)
	}
	h.gw.SendTo("fulfiller", websocket.BinaryMessage, "#stream-1#hello stream")
	h.gw.SendTo("fulfiller", websocket.TextMessage, chat("after", "x"))

	equal(t, "delivered", recv(t, sub).ID, "after")
	st := c.Stats()
	if st.Malformed != 9 || st.Binary != 1 || st.SessionsLost != 0 || !c.Connected() {
		t.Fatalf("stats = %+v connected=%v", st, c.Connected())
	}
	equal(t, "gateway events", h.gw.Events(), []string{"join fulfiller #1"})
}

func TestOversizedFrameIsDrainedNotFatal(t *testing.T) {
	h := newHarness(t)
	c := h.dial("fulfiller", func(c *Config) { c.MaxFrame = 1024 })
	sub := c.Subscribe(SubscribeOptions{})

	frame := func(id string, size int) string {
		base := fmt.Sprintf(`{"protocol":"mew/v0.4","id":%q,"from":"x","kind":"chat","payload":{"text":""}}`, id)
		return strings.Replace(base, `"text":""`, `"text":"`+strings.Repeat("a", size-len(base))+`"`, 1)
	}
	big, exact := frame("big", 300_000), frame("exact", 1024)
	if len(big) != 300_000 || len(exact) != 1024 {
		t.Fatalf("frame sizes %d %d", len(big), len(exact))
	}
	h.gw.SendTo("fulfiller", websocket.TextMessage, big)
	h.gw.SendTo("fulfiller", websocket.TextMessage, frame("just-over", 1025))
	h.gw.SendTo("fulfiller", websocket.TextMessage, exact)
	h.gw.SendTo("fulfiller", websocket.TextMessage, chat("next", "x"))

	equal(t, "delivered", recvIDs(t, sub, 2), []string{"exact", "next"})
	st := c.Stats()
	if st.Oversized != 2 || st.FramesIn != 5 || st.SessionsLost != 0 {
		t.Fatalf("stats = %+v", st)
	}
	equal(t, "gateway events", h.gw.Events(), []string{"join fulfiller #1"})
	if !strings.Contains(h.logs.String(), "bytes=300000") {
		t.Fatalf("oversized frame size not logged:\n%s", h.logs)
	}
}

// answerRequests makes c answer every mcp/request addressed to it with
// reply(request) as the response payload.
func answerRequests(t *testing.T, c *Client, reply func(RPCRequest) string) (requests <-chan Envelope) {
	sub := c.Subscribe(SubscribeOptions{Kinds: []string{KindRequest}})
	got := make(chan Envelope, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for env := range sub.C() {
			got <- env
			var req RPCRequest
			if err := json.Unmarshal(env.Payload, &req); err != nil {
				t.Errorf("request payload: %v", err)
				continue
			}
			_, err := c.Send(context.Background(), Envelope{Kind: KindResponse, To: []string{env.From},
				CorrelationID: CorrelationIDs{env.ID}, Payload: json.RawMessage(reply(req))})
			if err != nil {
				t.Errorf("answer: %v", err)
			}
		}
	}()
	t.Cleanup(func() { sub.Close(); wg.Wait() })
	return got
}

func TestRequestRoundTrip(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.caps["fulfiller-token"] = []Capability{{Kind: "mcp/*"}} })
	calc := h.dial("calculator", nil)
	ful := h.dial("fulfiller", nil)
	requests := answerRequests(t, calc, func(req RPCRequest) string {
		if strings.Contains(string(req.Params), "divide") {
			return `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32602,"message":"Unknown tool: divide"}}`
		}
		return `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"content":[{"type":"text","text":"15"}]}}`
	})

	resp, err := ful.Request(context.Background(), "calculator", MethodToolsCall, map[string]any{"name": "add", "arguments": map[string]int{"a": 10, "b": 5}})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "response", resp, RPCResponse{JSONRPC: "2.0", ID: json.RawMessage(`1`), Result: json.RawMessage(`{"content":[{"type":"text","text":"15"}]}`)})
	req := <-requests
	equal(t, "request envelope", []any{req.From, req.To, req.Kind, string(req.Payload)},
		[]any{"fulfiller", Recipients{"calculator"}, KindRequest, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":10,"b":5},"name":"add"}}`})

	resp, err = ful.Request(context.Background(), "calculator", MethodToolsCall, map[string]any{"name": "divide"})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "rpc error", resp.Error, &RPCError{Code: -32602, Message: "Unknown tool: divide"})
	equal(t, "second rpc id", string(resp.ID), "2")
	<-requests

	// RequestEnvelope: the caller picks the id and correlation, and a
	// payload without a JSON-RPC id gets one.
	resp, err = ful.RequestEnvelope(context.Background(), Envelope{ID: "fulfiller-req-9", To: []string{"calculator"},
		CorrelationID: CorrelationIDs{"proposal-1"}, Payload: json.RawMessage(`{"method":"tools/list"}`)})
	if err != nil || string(resp.ID) != "3" {
		t.Fatalf("RequestEnvelope: %+v, %v", resp, err)
	}
	req = <-requests
	equal(t, "caller's envelope", []any{req.ID, req.CorrelationID, string(req.Payload)},
		[]any{"fulfiller-req-9", CorrelationIDs{"proposal-1"}, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`})
	if n := ful.pending.len(); n != 0 {
		t.Fatalf("%d pending entries left", n)
	}
}

func TestRequestIgnoresAnswersFromOthers(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) {
		g.caps["fulfiller-token"] = []Capability{{Kind: "mcp/*"}}
		g.onEnvelope = func(_ string, env Envelope) {
			if env.Kind != KindRequest {
				return
			}
			answer := func(from, text string) string {
				return fmt.Sprintf(`{"protocol":"mew/v0.4","id":"%s-1","from":%q,"to":["fulfiller"],"kind":"mcp/response","correlation_id":[%q],"payload":{"jsonrpc":"2.0","id":1,"result":{"text":%q}}}`, from, from, env.ID, text)
			}
			g.Broadcast(answer("mallory", "forged"))
			g.Broadcast(answer("calculator", "real"))
		}
	})
	c := h.dial("fulfiller", nil)
	resp, err := c.Request(context.Background(), "calculator", MethodToolsList, nil)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "result", string(resp.Result), `{"text":"real"}`)
	if !strings.Contains(h.logs.String(), "ignored mcp/response") || !strings.Contains(h.logs.String(), "from=mallory") {
		t.Fatalf("forged answer not logged:\n%s", h.logs)
	}
}

func TestRequestContextCancel(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.caps["fulfiller-token"] = []Capability{{Kind: "mcp/*"}} })
	c := h.dial("fulfiller", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := c.Request(ctx, "calculator", MethodToolsList, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if n := c.pending.len(); n != 0 {
		t.Fatalf("%d pending entries left after cancel", n)
	}
	if _, err := c.RequestEnvelope(context.Background(), Envelope{To: []string{"a", "b"}, Payload: json.RawMessage(`{"method":"x"}`)}); err == nil {
		t.Fatal("request to two participants accepted")
	}
}

func TestSendNotPermitted(t *testing.T) {
	h := newHarness(t)
	kinds := make(chan string, 10)
	h.gw.set(func(g *testGateway) {
		g.caps["fulfiller-token"] = []Capability{{Kind: "chat"}, {Kind: "mcp/request", Payload: map[string]any{"method": "tools/list"}}}
		g.onEnvelope = func(_ string, env Envelope) { kinds <- env.Kind + " " + string(env.Payload) }
	})
	c := h.dial("fulfiller", nil)

	_, err := c.Send(context.Background(), Envelope{Kind: KindProposal, Payload: json.RawMessage(`{"method":"tools/call"}`)})
	if !errors.Is(err, ErrNotPermitted) || !strings.Contains(err.Error(), KindProposal) {
		t.Fatalf("err = %v", err)
	}
	_, err = c.Request(context.Background(), "calculator", MethodToolsCall, nil)
	if !errors.Is(err, ErrNotPermitted) || !strings.Contains(err.Error(), KindRequest) {
		t.Fatalf("tools/call request: %v", err)
	}
	if !c.Can(KindRequest, json.RawMessage(`{"method":"tools/list"}`)) || c.Can(KindRequest, json.RawMessage(`{"method":"tools/call"}`)) {
		t.Fatal("Can does not follow payload patterns")
	}
	if _, err := c.Send(context.Background(), Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"ok"}`)}); err != nil {
		t.Fatal(err)
	}
	equal(t, "what reached the gateway", <-kinds, `chat {"text":"ok"}`)
	if st := c.Stats(); st.Sends != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWelcomeUpdateReplacesCapabilities(t *testing.T) {
	h := newHarness(t)
	c := h.dial("proposer", nil)
	welcomes := c.Subscribe(SubscribeOptions{Kinds: []string{KindWelcome}})
	h.gw.SendTo("proposer", websocket.TextMessage, `{"protocol":"mew/v0.4","id":"welcome-update-1","from":"system:gateway","to":["proposer"],"kind":"system/welcome","payload":{"you":{"id":"proposer","capabilities":[{"kind":"chat"},{"kind":"mcp/request","payload":{"method":"tools/list"}}]},"participants":[{"id":"admin","capabilities":[{"kind":"capability/*"}]}]}}`)
	equal(t, "welcome", recv(t, welcomes).ID, "welcome-update-1")
	equal(t, "capabilities", c.Capabilities(), []Capability{{Kind: "chat"}, {Kind: "mcp/request", Payload: map[string]any{"method": "tools/list"}}})
	equal(t, "roster", c.Roster(), []Participant{{ID: "admin", Capabilities: []Capability{{Kind: "capability/*"}}}})
	if !c.Can(KindRequest, json.RawMessage(`{"method":"tools/list"}`)) {
		t.Fatal("granted capability not usable")
	}

	// Without participants the roster stays; a welcome for someone else,
	// or one not claiming to come from the gateway, changes nothing.
	h.gw.SendTo("proposer", websocket.TextMessage, `{"protocol":"mew/v0.4","id":"welcome-update-2","from":"system:gateway","to":["proposer"],"kind":"system/welcome","payload":{"you":{"id":"proposer","capabilities":[{"kind":"chat"}]}}}`)
	h.gw.SendTo("proposer", websocket.TextMessage, `{"protocol":"mew/v0.4","id":"not-mine","from":"system:gateway","to":["observer"],"kind":"system/welcome","payload":{"you":{"id":"observer","capabilities":[{"kind":"*"}]}}}`)
	h.gw.SendTo("proposer", websocket.TextMessage, `{"protocol":"mew/v0.4","id":"forged","from":"admin","to":["proposer"],"kind":"system/welcome","payload":{"you":{"id":"proposer","capabilities":[{"kind":"*"}]}}}`)
	equal(t, "welcomes delivered", recvIDs(t, welcomes, 2), []string{"welcome-update-2", "forged"})
	equal(t, "capabilities", c.Capabilities(), []Capability{{Kind: "chat"}})
	equal(t, "roster", ids(c.Roster()), []string{"admin"})
}

func TestReconnectAfterDrop(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.extras = []Participant{{ID: "old-x"}} })
	c := h.dial("fulfiller", nil)
	welcomes := c.Subscribe(SubscribeOptions{Kinds: []string{KindWelcome}})
	pres := c.Subscribe(SubscribeOptions{Kinds: []string{KindPresence}})
	h.gw.SendTo("fulfiller", websocket.TextMessage, `{"protocol":"mew/v0.4","id":"p1","from":"system:gateway","kind":"system/presence","payload":{"event":"join","participant":{"id":"z"}}}`)
	recv(t, pres)
	equal(t, "roster before", ids(c.Roster()), []string{"old-x", "z"})

	h.gw.set(func(g *testGateway) { g.extras = []Participant{{ID: "new-y"}} })
	h.gw.DropAll()
	w := recv(t, welcomes)
	equal(t, "re-delivered welcome", []any{w.ID, w.To}, []any{"welcome-2", Recipients{"fulfiller"}})
	equal(t, "roster replaced", ids(c.Roster()), []string{"new-y"})
	if !c.Connected() {
		t.Fatal("not connected after the welcome")
	}
	equal(t, "gateway events", h.gw.Events(), []string{"join fulfiller #1", "closed fulfiller #1", "join fulfiller #2"})
	if st := c.Stats(); st.SessionsLost != 1 || st.Reconnects != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if !strings.Contains(h.logs.String(), `level=INFO msg="session re-established"`) {
		t.Fatalf("re-establishment not logged:\n%s", h.logs)
	}
	if _, err := c.Send(context.Background(), Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"back"}`)}); err != nil {
		t.Fatal(err)
	}
}

func TestReconnectWhenPongsStop(t *testing.T) {
	h := newHarness(t)
	c := h.dial("fulfiller", func(c *Config) { c.PingInterval = 20 * time.Millisecond; c.PongTimeout = 50 * time.Millisecond })
	welcomes := c.Subscribe(SubscribeOptions{Kinds: []string{KindWelcome}})
	h.gw.Stall()
	equal(t, "re-delivered welcome", recv(t, welcomes).ID, "welcome-2")
	if st := c.Stats(); st.SessionsLost != 1 || st.Reconnects != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if !strings.Contains(h.logs.String(), "i/o timeout") {
		t.Fatalf("loss reason not logged:\n%s", h.logs)
	}
}

func TestReconnectWhenSessionGone(t *testing.T) {
	h := newHarness(t)
	c := h.dial("fulfiller", nil)
	errs := c.Subscribe(SubscribeOptions{Kinds: []string{KindError}})
	welcomes := c.Subscribe(SubscribeOptions{Kinds: []string{KindWelcome}})

	// An ordinary violation lists our capabilities: the session is fine.
	h.gw.SendTo("fulfiller", websocket.TextMessage, `{"protocol":"mew/v0.4","id":"error-1","from":"system:gateway","to":["fulfiller"],"kind":"system/error","correlation_id":["x"],"payload":{"error":"capability_violation","attempted_kind":"mcp/proposal","your_capabilities":[{"kind":"chat"}]}}`)
	h.gw.SendTo("fulfiller", websocket.TextMessage, `{"protocol":"mew/v0.4","id":"error-2","from":"system:gateway","to":["fulfiller"],"kind":"system/error","correlation_id":["y"],"payload":{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}}`)
	equal(t, "errors delivered", recvIDs(t, errs, 2), []string{"error-1", "error-2"})
	equal(t, "re-delivered welcome", recv(t, welcomes).ID, "welcome-2")
	// We closed the old socket (and the gateway saw it) before joining again.
	equal(t, "gateway events", h.gw.Events(), []string{"join fulfiller #1", "closed fulfiller #1", "join fulfiller #2"})
	if st := c.Stats(); st.SessionsLost != 1 || st.Reconnects != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestSendAndRequestWaitForReconnect(t *testing.T) {
	h := newHarness(t)
	requests := make(chan Envelope, 4)
	h.gw.set(func(g *testGateway) {
		g.caps["fulfiller-token"] = []Capability{{Kind: "mcp/*"}, {Kind: "chat"}}
		g.onEnvelope = func(_ string, env Envelope) { requests <- env }
	})
	c := h.dial("fulfiller", nil)
	welcomes := c.Subscribe(SubscribeOptions{Kinds: []string{KindWelcome}})

	type result struct {
		resp RPCResponse
		err  error
	}
	answered := make(chan result, 1)
	go func() {
		resp, err := c.Request(context.Background(), "calculator", MethodToolsList, nil)
		answered <- result{resp, err}
	}()
	req := <-requests

	h.gw.set(func(g *testGateway) { g.refuse = true })
	h.gw.DropAll()
	poll.Until(t, "the session is lost", func() bool { return !c.Connected() })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Send(ctx, Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"x"}`)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send while disconnected: %v", err)
	}

	sent := make(chan Envelope, 1)
	go func() {
		env, err := c.Send(context.Background(), Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"queued"}`)})
		if err != nil {
			t.Errorf("send across reconnect: %v", err)
		}
		sent <- env
	}()
	h.gw.set(func(g *testGateway) { g.refuse = false })
	equal(t, "re-delivered welcome", recv(t, welcomes).ID, "welcome-2")
	got := <-requests
	equal(t, "written on the new session", got.ID, (<-sent).ID)

	// The request sent before the drop is answered on the new session.
	h.gw.SendTo("fulfiller", websocket.TextMessage, fmt.Sprintf(`{"protocol":"mew/v0.4","id":"r1","from":"calculator","to":["fulfiller"],"kind":"mcp/response","correlation_id":[%q],"payload":{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}}`, req.ID))
	r := <-answered
	if r.err != nil || string(r.resp.Result) != `{"tools":[]}` {
		t.Fatalf("request across reconnect: %+v", r)
	}
}

func TestBlockedConsumerIsNotADeadLink(t *testing.T) {
	h := newHarness(t)
	c := h.dial("fulfiller", func(c *Config) { c.PingInterval = 20 * time.Millisecond; c.PongTimeout = 80 * time.Millisecond })
	sub := c.Subscribe(SubscribeOptions{Buffer: 1})
	h.gw.SendTo("fulfiller", websocket.TextMessage, chat("m0", "x"))
	h.gw.SendTo("fulfiller", websocket.TextMessage, chat("m1", "x"))
	poll.Until(t, "the buffer is full", func() bool { return len(sub.C()) == 1 })
	// Far longer than PingInterval+PongTimeout with the read loop waiting
	// on m1. The next frames arrive only now, so reading them needs the
	// socket again.
	time.Sleep(300 * time.Millisecond)
	for _, id := range []string{"m2", "m3", "m4"} {
		h.gw.SendTo("fulfiller", websocket.TextMessage, chat(id, "x"))
	}
	equal(t, "all delivered in order", recvIDs(t, sub, 5), []string{"m0", "m1", "m2", "m3", "m4"})
	statsEventually(t, c, func(st Stats) bool { return st.SessionsLost == 0 && st.Delivered == 5 })
}

func TestSubscriptionCloseUnblocksDelivery(t *testing.T) {
	h := newHarness(t)
	c := h.dial("fulfiller", nil)
	stuck := c.Subscribe(SubscribeOptions{Buffer: 1})
	other := c.Subscribe(SubscribeOptions{})
	for _, id := range []string{"m1", "m2", "m3"} {
		h.gw.SendTo("fulfiller", websocket.TextMessage, chat(id, "x"))
	}
	equal(t, "first", recv(t, other).ID, "m1")
	quiet(t, other) // m2 waits for the stuck subscription
	stuck.Close()
	equal(t, "rest", recvIDs(t, other, 2), []string{"m2", "m3"})
	equal(t, "stuck kept its buffer", recv(t, stuck).ID, "m1")
	if _, ok := <-stuck.C(); ok {
		t.Fatal("C not closed after Close")
	}
	stuck.Close() // idempotent
}

func TestCloseReleasesWaiters(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.caps["fulfiller-token"] = []Capability{{Kind: "mcp/*"}, {Kind: "chat"}} })
	c := h.dial("fulfiller", nil)
	sub := c.Subscribe(SubscribeOptions{})
	reqErr := make(chan error, 1)
	go func() {
		_, err := c.Request(context.Background(), "calculator", MethodToolsList, nil)
		reqErr <- err
	}()
	poll.Until(t, "the request is pending", func() bool { return c.pending.len() == 1 })

	h.gw.set(func(g *testGateway) { g.refuse = true })
	h.gw.DropAll()
	poll.Until(t, "the session is lost", func() bool { return !c.Connected() })
	sendErr := make(chan error, 1)
	go func() {
		_, err := c.Send(context.Background(), Envelope{Kind: KindChat, Payload: json.RawMessage(`{"text":"x"}`)})
		sendErr <- err
	}()

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-sendErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Send: %v", err)
	}
	if err := <-reqErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Request: %v", err)
	}
	if _, ok := <-sub.C(); ok {
		t.Fatal("subscription open after Close")
	}
	if _, ok := <-c.Subscribe(SubscribeOptions{}).C(); ok {
		t.Fatal("subscription after Close is open")
	}
	if _, err := c.Send(context.Background(), Envelope{Kind: KindChat}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// An envelope sent the moment we joined (the fulfiller re-sending an open
// prompt to an approver who appears) reaches subscriptions made by
// DialSubscribed: they exist before anything after the welcome is read.
func TestDialSubscribedMissesNothingAfterTheWelcome(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.greeting = chat("first", "fulfiller", "alice") })
	c, subs, err := DialSubscribed(context.Background(), h.config("alice", nil), SubscribeOptions{Kinds: []string{KindChat}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	equal(t, "first envelope", recv(t, subs[0]).ID, "first")
}
