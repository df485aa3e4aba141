package space

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/poll"
)

// Most wire behaviour is checked frame by frame against the reference
// gateway in TestReplayReferenceTranscript. The tests here spell out the
// behaviours clients rely on most, and cover what the recording cannot:
// faults, stalls, the tap, shutdown.

const (
	observerCaps  = `[{"kind":"chat"},{"id":"mcp-response","kind":"mcp/response"}]`
	proposerCaps  = `[{"kind":"mcp/proposal"},{"kind":"mcp/withdraw"},{"kind":"chat"},{"id":"mcp-response","kind":"mcp/response"}]`
	fulfillerCaps = `[{"kind":"mcp/*"},{"kind":"chat"},{"kind":"system/*"},{"id":"mcp-response","kind":"mcp/response"}]`
)

func TestJoinWelcomeAndPresence(t *testing.T) {
	s := newLab(t)
	observer := dial(t, s, "observer", nil)
	wantFrame(t, "observer", observer.join("observer", "no-such-token"),
		`{"protocol":"mew/v0.4","id":"welcome-1795342292223","ts":"x","from":"system:gateway","to":["observer"],"kind":"system/welcome","payload":{"you":{"id":"observer","capabilities":`+observerCaps+`},"participants":[],"active_streams":[]}}`)

	// The system/join form with its fields under payload; the Authorization
	// header means nothing.
	fulfiller := dial(t, s, "fulfiller", http.Header{"Authorization": {"Bearer proposer-token"}})
	fulfiller.send(`{"kind":"system/join","payload":{"participantId":"fulfiller","token":"fulfiller-token"}}`)
	wantFrame(t, "fulfiller", fulfiller.read(),
		`{"protocol":"mew/v0.4","id":"welcome-1795342292226","ts":"x","from":"system:gateway","to":["fulfiller"],"kind":"system/welcome","payload":{"you":{"id":"fulfiller","capabilities":`+fulfillerCaps+`},"participants":[{"id":"observer","capabilities":`+observerCaps+`}],"active_streams":[]}}`)
	wantFrame(t, "observer", observer.read(),
		`{"protocol":"mew/v0.4","id":"presence-1795342292226","ts":"x","from":"system:gateway","kind":"system/presence","payload":{"event":"join","participant":{"id":"fulfiller","capabilities":`+fulfillerCaps+`}}}`)
	fulfiller.quiet(50 * time.Millisecond) // no presence about yourself, no echo of the join

	// No participantId: the gateway makes one up.
	anon := dial(t, s, "anon", nil)
	anon.send(`{"type":"join"}`)
	w := anon.readEnvelope()
	if !regexp.MustCompile(`^participant-\d{13}$`).MatchString(w.To[0]) {
		t.Fatalf("made-up id %q", w.To[0])
	}
	if p := observer.readEnvelope(); !bytes.Contains(p.Payload, []byte(w.To[0])) {
		t.Fatalf("observer got %s, want presence of %s", p.Raw, w.To[0])
	}
	if got := s.Participants(); len(got) != 3 || got[0] != "fulfiller" || got[1] != "observer" {
		t.Fatalf("Participants() = %v", got)
	}

	fulfiller.close()
	for _, c := range []*testClient{observer, anon} {
		wantFrame(t, c.name, c.read(), `{"protocol":"mew/v0.4","id":"presence-1795342292498","ts":"x","from":"system:gateway","kind":"system/presence","payload":{"event":"leave","participant":{"id":"fulfiller"}}}`)
	}
}

func TestBroadcastReachesEveryoneIncludingSender(t *testing.T) {
	s := newLab(t)
	proposer, calculator, observer := dial(t, s, "proposer", nil), dial(t, s, "calculator", nil), dial(t, s, "observer", nil)
	proposer.join("proposer", "proposer-token")
	calculator.join("calculator", "calculator-token")
	proposer.read() // presence of calculator
	observer.join("observer", "observer-token")
	proposer.read()
	calculator.read()

	sent := `{"protocol":"mew/v0.4","id":"p-1","ts":"2026-11-22T10:11:33.000Z","from":"proposer","to":["calculator"],"kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}}`
	proposer.send(sent)
	for _, c := range []*testClient{proposer, calculator, observer} {
		if got := c.read(); string(got) != sent {
			t.Fatalf("%s got %s, want the envelope unchanged", c.name, got)
		}
	}
}

func TestNormalisation(t *testing.T) {
	s := newLab(t)
	alice := dial(t, s, "alice", nil)
	alice.join("alice", "")

	// Missing fields are added in front; the rest keeps the sender's order
	// and whitespace is gone.
	alice.send("{ \"payload\": {\"text\": \"hi there\"},\n \"x_custom\": [1, 2],\n \"kind\": \"chat\", \"correlation_id\": \"p-1\", \"to\": [] }")
	got := alice.read()
	want := regexp.MustCompile(`^\{"protocol":"mew/v0\.4","id":"msg-\d{13}-[a-z0-9]{9}","ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z","from":"alice","payload":\{"text":"hi there"\},"x_custom":\[1,2\],"kind":"chat","correlation_id":\["p-1"\],"to":\[\]\}$`)
	if !want.Match(got) {
		t.Fatalf("got %s", got)
	}

	// What the client wrote wins, even from; v0.3 passes; the four stamped
	// fields go first wherever the client put them.
	alice.send(`{"kind":"chat","from":"mallory","ts":"then","id":"own-1","protocol":"mew/v0.3","payload":{"text":"x"},"correlation_id":["a","b"]}`)
	if got, want := string(alice.read()), `{"protocol":"mew/v0.3","id":"own-1","ts":"then","from":"mallory","kind":"chat","payload":{"text":"x"},"correlation_id":["a","b"]}`; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestCapabilityViolations(t *testing.T) {
	s, err := New(Config{Tokens: map[string][]agent.Capability{
		"proposer-token": labTokens()["proposer-token"],
		"lister-token":   {{Kind: "mcp/request", Payload: map[string]any{"method": "tools/list"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	proposer, lister, observer := dial(t, s, "proposer", nil), dial(t, s, "lister", nil), dial(t, s, "observer", nil)
	proposer.join("proposer", "proposer-token")
	lister.join("lister", "lister-token")
	proposer.read()
	observer.join("observer", "")
	proposer.read()
	lister.read()

	const prefix = `{"protocol":"mew/v0.4","id":"error-1795342295767","ts":"x","from":"system:gateway",`
	for _, tc := range []struct{ send, want string }{
		{`{"id":"v-1","kind":"mcp/request","payload":{"method":"tools/list"}}`,
			prefix + `"to":["proposer"],"kind":"system/error","correlation_id":["v-1"],"payload":{"error":"capability_violation","attempted_kind":"mcp/request","your_capabilities":` + proposerCaps + `}}`},
		{`{"kind":"mcp/reject","payload":{}}`,
			prefix + `"to":["proposer"],"kind":"system/error","payload":{"error":"capability_violation","attempted_kind":"mcp/reject","your_capabilities":` + proposerCaps + `}}`},
		{`{}`,
			prefix + `"to":["proposer"],"kind":"system/error","payload":{"error":"capability_violation","your_capabilities":` + proposerCaps + `}}`},
		{`[]`,
			prefix + `"to":["proposer"],"kind":"system/error","payload":{"error":"capability_violation","your_capabilities":` + proposerCaps + `}}`},
		{`{"id":"r-1","kind":"system/register","payload":{}}`,
			prefix + `"to":["proposer"],"kind":"system/error","correlation_id":["r-1"],"payload":{"error":"invalid_request","message":"system/register is reserved for the gateway. Use capability/grant instead."}}`},
	} {
		proposer.send(tc.send)
		wantFrame(t, "proposer after "+tc.send, proposer.read(), tc.want)
	}

	// Payload patterns count.
	lister.send(`{"id":"l-1","kind":"mcp/request","payload":{"method":"tools/list"}}`)
	if env := lister.readEnvelope(); env.ID != "l-1" {
		t.Fatalf("allowed request not broadcast: %+v", env)
	}
	lister.send(`{"id":"l-2","kind":"mcp/request","payload":{"method":"tools/call"}}`)
	if env := lister.readEnvelope(); env.Kind != agent.KindError || env.CorrelationID.First() != "l-2" {
		t.Fatalf("refused request: %+v", env)
	}

	// Before the join: to [null], no capabilities.
	stranger := dial(t, s, "stranger", nil)
	stranger.send(`{"id":"b-1","kind":"chat","payload":{"text":"hi"}}`)
	wantFrame(t, "stranger", stranger.read(),
		prefix+`"to":[null],"kind":"system/error","correlation_id":["b-1"],"payload":{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}}`)

	// Errors go to the offender only, and the connection stays open.
	observer.read() // l-1
	observer.quiet(50 * time.Millisecond)
	proposer.send(`{"id":"still-here","kind":"chat","payload":{"text":"ok"}}`)
	if env := observer.readEnvelope(); env.ID != "still-here" {
		t.Fatalf("observer got %+v", env)
	}
}

func TestValidationErrors(t *testing.T) {
	s := newLab(t)
	c := dial(t, s, "proposer", nil)
	c.join("proposer", "proposer-token")
	bare := func(text, code string) string {
		return `{"protocol":"mew/v0.4","kind":"system/error","payload":{"error":"` + text + `","code":"` + code + `"}}`
	}
	for _, tc := range []struct{ send, want string }{
		{`{"kind": "chat", oops`, bare("*", "PROCESSING_ERROR")},
		{`null`, bare("Message must be an object", "VALIDATION_ERROR")},
		{`42`, bare("Message must be an object", "VALIDATION_ERROR")},
		{`"a string"`, bare("Message must be an object", "VALIDATION_ERROR")},
		{`{"kind":"chat","payload":{"format":"plain"}}`, bare("Chat message requires payload.text", "VALIDATION_ERROR")},
		{`{"kind":"chat","payload":"text"}`, bare("Chat message requires payload.text", "VALIDATION_ERROR")},
		{`{"kind":"mcp/request","payload":{"jsonrpc":"2.0","id":1}}`, bare("MCP request requires payload.method", "VALIDATION_ERROR")},
		{`{"protocol":"mew/v0.2","kind":"chat","payload":{"text":"old"}}`, bare("Invalid protocol version: mew/v0.2", "VALIDATION_ERROR")},
	} {
		c.send(tc.send)
		wantFrame(t, "after "+tc.send, c.read(), tc.want)
	}
	// No other shape checks: the receiving client has to validate these.
	c.send(`{"id":"p-x","kind":"mcp/proposal","payload":"not an object"}`)
	if env := c.readEnvelope(); env.ID != "p-x" {
		t.Fatalf("got %+v", env)
	}
}

func TestDuplicateSessionTakeover(t *testing.T) {
	s := newLab(t)
	observer := dial(t, s, "observer", nil)
	observer.join("observer", "observer-token")
	first, second := dial(t, s, "dup-1", nil), dial(t, s, "dup-2", nil)
	first.join("dup", "human-token")
	second.join("dup", "human-token")
	observer.read()
	observer.read() // two presence joins

	observer.send(`{"id":"probe-1","kind":"chat","payload":{"text":"who hears this?"}}`)
	observer.read()
	if env := second.readEnvelope(); env.ID != "probe-1" {
		t.Fatalf("second socket got %+v", env)
	}
	first.quiet(50 * time.Millisecond)

	// Closing the first socket ends the id's session, the second's too.
	first.close()
	if env := observer.readEnvelope(); env.Kind != agent.KindPresence || !strings.Contains(string(env.Payload), `"leave"`) {
		t.Fatalf("observer got %+v", env)
	}
	second.send(`{"id":"probe-2","kind":"chat","payload":{"text":"still here?"}}`)
	wantFrame(t, "second", second.read(),
		`{"protocol":"mew/v0.4","id":"error-1795342304327","ts":"x","from":"system:gateway","to":["dup"],"kind":"system/error","correlation_id":["probe-2"],"payload":{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}}`)
	if got := s.Participants(); len(got) != 1 || got[0] != "observer" {
		t.Fatalf("Participants() = %v", got)
	}
	second.close()
	if env := observer.readEnvelope(); env.Kind != agent.KindPresence {
		t.Fatalf("no second leave: %+v", env)
	}
}

func TestDropAllThenRejoin(t *testing.T) {
	s := newLab(t)
	a, b := dial(t, s, "a", nil), dial(t, s, "b", nil)
	a.join("a", "")
	b.join("b", "")
	a.read()

	s.DropAll()
	for _, c := range []*testClient{a, b} {
		err := c.waitClosed()
		if !websocket.IsCloseError(err, websocket.CloseAbnormalClosure) {
			t.Fatalf("%s: got %v, want 1006 (no close frame)", c.name, err)
		}
	}
	poll.Until(t, "every participant gone", func() bool { return len(s.Participants()) == 0 })

	a2, b2 := dial(t, s, "a", nil), dial(t, s, "b", nil)
	a2.join("a", "")
	if w := b2.join("b", ""); !bytes.Contains(w, []byte(`"participants":[{"id":"a",`)) {
		t.Fatalf("welcome after rejoin: %s", w)
	}
	if got := s.Participants(); len(got) != 2 {
		t.Fatalf("Participants() = %v", got)
	}
}

func TestSetStalledStopsReadsAndPongs(t *testing.T) {
	s := newLab(t)
	pongs := make(chan string, 4)
	ws, _, err := dialer.Dial(s.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetPongHandler(func(data string) error { pongs <- data; return nil })
	c := &testClient{t: t, name: "pinger", ws: ws, in: make(chan wsFrame, 16), quit: make(chan struct{}), done: make(chan struct{})}
	go c.readLoop()
	defer c.close()
	c.join("pinger", "")

	ping := func(data string) {
		if err := ws.WriteControl(websocket.PingMessage, []byte(data), time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	ping("healthy")
	if got := <-pongs; got != "healthy" {
		t.Fatalf("pong %q", got)
	}

	s.SetStalled(true)
	ping("hung")
	c.send(`{"id":"while-stalled","kind":"chat","payload":{"text":"anyone?"}}`)
	select {
	case got := <-pongs:
		t.Fatalf("stalled space answered ping %q", got)
	case <-time.After(200 * time.Millisecond):
	}
	c.quiet(50 * time.Millisecond)

	s.SetStalled(false)
	if env := c.readEnvelope(); env.ID != "while-stalled" {
		t.Fatalf("after the stall got %+v", env)
	}
	ping("recovered")
	for {
		select {
		case got := <-pongs:
			if got == "recovered" {
				return
			}
		case <-time.After(readTimeout):
			t.Fatal("no pong after the stall ended")
		}
	}
}

func TestTapSeesExactBytes(t *testing.T) {
	s := newLab(t)
	frames, stop := s.Tap(16)
	a, b := dial(t, s, "a", nil), dial(t, s, "b", nil)
	a.join("a", "")
	b.join("b", "")
	joinB := a.read()
	// a's own presence join reached nobody, but the space broadcast it.
	if got := <-frames; !bytes.Contains(got, []byte(`"event":"join","participant":{"id":"a"`)) {
		t.Fatalf("tap %s", got)
	}
	if got := <-frames; !bytes.Equal(got, joinB) {
		t.Fatalf("tap %s, wire %s", got, joinB)
	}

	b.send(`{"kind":"chat","payload":{"text":"tap me"}}`)
	wire := a.read()
	if got := <-frames; !bytes.Equal(got, wire) {
		t.Fatalf("tap %s, wire %s", got, wire)
	}
	b.read()

	// Errors and welcomes go to one socket and are not on the tap; nor is
	// another space.
	b.send(`{"kind":"mcp/proposal","payload":{}}`)
	b.read()
	other := dial(t, s, "other", nil)
	other.send(`{"type":"join","participantId":"o","space":"elsewhere"}`)
	other.read()
	other.send(`{"kind":"chat","payload":{"text":"elsewhere"}}`)
	other.read()
	select {
	case f := <-frames:
		t.Fatalf("unexpected tap frame %s", f)
	case <-time.After(50 * time.Millisecond):
	}
	stop()
	stop()
	if _, ok := <-frames; ok {
		t.Fatal("tap still open after stop")
	}
}

func TestSpacesDoNotCross(t *testing.T) {
	s := newLab(t)
	home, away := dial(t, s, "home", nil), dial(t, s, "away", nil)
	home.join("same-id", "")
	away.send(`{"type":"join","participantId":"same-id","space":"other","token":"fulfiller-token"}`)
	if env := away.readEnvelope(); !bytes.Contains(env.Payload, []byte(`"participants":[]`)) {
		t.Fatalf("other space not empty: %s", env.Payload)
	}
	away.send(`{"kind":"chat","payload":{"text":"over here"}}`)
	away.read()
	home.quiet(50 * time.Millisecond)
	if got := s.Participants(); len(got) != 1 {
		t.Fatalf("Participants() = %v", got)
	}
}

func TestStreamFramesRelayedAsBinary(t *testing.T) {
	s := newLab(t)
	streamer, observer := dial(t, s, "streamer", nil), dial(t, s, "observer", nil)
	streamer.send(`#stream-1#before join`) // nobody hears it
	streamer.join("streamer", "streamer-token")
	observer.join("observer", "")
	streamer.read()

	streamer.send(`#stream-1#hello stream`)
	for _, c := range []*testClient{streamer, observer} {
		f := c.next()
		if f.typ != websocket.BinaryMessage || string(f.data) != "#stream-1#hello stream" {
			t.Fatalf("%s got type %d %q", c.name, f.typ, f.data)
		}
	}
}

func TestSlowReaderIsDropped(t *testing.T) {
	s, err := New(Config{QueueSize: 4, SlowClientTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fast, observer := dial(t, s, "fast", nil), dial(t, s, "observer", nil)
	fast.join("fast", "")
	observer.join("observer", "")
	fast.read()

	// A client that joins and then never reads.
	slow, _, err := dialer.Dial(s.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if err := slow.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","participantId":"slow"}`)); err != nil {
		t.Fatal(err)
	}
	fast.read()
	observer.read()

	big := `{"kind":"chat","payload":{"text":"` + strings.Repeat("x", 256<<10) + `"}}`
	left := make(chan struct{})
	go func() {
		defer close(left)
		for {
			f, ok := <-observer.in
			if !ok {
				return
			}
			if bytes.Contains(f.data, []byte(`"event":"leave","participant":{"id":"slow"}`)) {
				return
			}
		}
	}()
send:
	for range 200 {
		select {
		case <-left:
			break send
		default:
		}
		fast.send(big)
		fast.read()
	}
	select {
	case <-left:
	case <-time.After(readTimeout):
		t.Fatal("slow reader was never dropped")
	}
	poll.Until(t, "two participants", func() bool { return len(s.Participants()) == 2 })
}

func TestHealth(t *testing.T) {
	s := newLab(t)
	c := dial(t, s, "a", nil)
	c.join("a", "")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + strings.TrimPrefix(s.URL(), "ws://") + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var h health
	if err := json.Unmarshal(body, &h); err != nil || h.Status != "ok" || h.Spaces != 1 || h.Clients != 1 {
		t.Fatalf("health %s (%v)", body, err)
	}
	if !strings.HasPrefix(string(body), `{"status":"ok","spaces":1,"clients":1,"uptime":`) {
		t.Fatalf("health %s", body)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := dial(t, s, "a", nil), dial(t, s, "b", nil)
	a.join("a", "")
	frames, _ := s.Tap(1)
	s.SetStalled(true) // a reader waiting out a stall must stop too
	b.send(`{"type":"join","participantId":"b"}`)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a.waitClosed(); !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("a: %v, want 1001 going away", err)
	}
	// b's join was never read, and closing a TCP socket with unread data
	// resets it, so b may see a reset instead of the close frame.
	_ = b.waitClosed()
	if _, ok := <-frames; ok {
		t.Fatal("tap open after Close")
	}
	if _, _, err := dialer.Dial(s.URL(), nil); err == nil {
		t.Fatal("dial after Close succeeded")
	}
	a.close()
	b.close()
	goleak.VerifyNone(t)
}

// A client that gives up on a hung space closes its old socket and joins
// on a new one. After the stall the space must handle the close before the
// join, in arrival order like the single-threaded reference: the other way
// round, the old socket's leave would end the new session too.
func TestStallHandlesFramesInArrivalOrder(t *testing.T) {
	s := newLab(t)
	obs := dial(t, s, "observer", nil)
	obs.join("observer", "")
	old := dial(t, s, "x-old", nil)
	old.join("x", "")
	if env := obs.readEnvelope(); env.Kind != agent.KindPresence {
		t.Fatalf("observer got %+v", env)
	}
	queued := func(n int) func() bool {
		return func() bool { s.stallMu.Lock(); defer s.stallMu.Unlock(); return len(s.turns) == n }
	}

	s.SetStalled(true)
	old.close()
	poll.Until(t, "the old socket's close to be read", queued(1))
	fresh := dial(t, s, "x-new", nil)
	fresh.send(`{"type":"join","participantId":"x","space":"fulfiller-lab"}`)
	poll.Until(t, "the new join to be read", queued(2))
	s.SetStalled(false)

	if env := fresh.readEnvelope(); env.Kind != agent.KindWelcome {
		t.Fatalf("new socket got %+v, want its welcome", env)
	}
	for _, want := range []string{`"event":"leave"`, `"event":"join"`} {
		if env := obs.readEnvelope(); env.Kind != agent.KindPresence || !strings.Contains(string(env.Payload), want) {
			t.Fatalf("observer got %s %s, want presence %s", env.Kind, env.Payload, want)
		}
	}
	obs.send(`{"id":"after","kind":"chat","payload":{"text":"still there?"}}`)
	if env := fresh.readEnvelope(); env.ID != "after" {
		t.Fatalf("new session got %+v, want the chat: it was ended by the old socket's leave", env)
	}
}
