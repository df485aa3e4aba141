package space

import (
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/agent"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// labTokens is the token setup of the recordings in testdata/conformance.
func labTokens() map[string][]agent.Capability {
	k := func(kinds ...string) []agent.Capability {
		caps := make([]agent.Capability, len(kinds))
		for i, kind := range kinds {
			caps[i] = agent.Capability{Kind: kind}
		}
		return caps
	}
	return map[string][]agent.Capability{
		"fulfiller-token":  k("mcp/*", "chat", "system/*"),
		"proposer-token":   k("mcp/proposal", "mcp/withdraw", "chat"),
		"calculator-token": k("mcp/response", "chat"),
		"human-token":      k("mcp/response", "chat", "mcp/request"),
		"observer-token":   k("chat"),
		"streamer-token":   k("stream/*", "chat"),
		"admin-token":      k("capability/*", "chat"),
	}
}

// newLab starts a space configured like the recorded reference gateway.
func newLab(t testing.TB) *Server {
	t.Helper()
	s, err := New(Config{Tokens: labTokens()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

type wsFrame struct {
	typ  int
	data []byte
}

// testClient is a raw WebSocket client whose frames are read in the
// background, so that a test can wait for a frame with a deadline, or check
// that none came, without corrupting the gorilla connection (a timed-out
// read would).
type testClient struct {
	t    testing.TB
	name string
	ws   *websocket.Conn
	in   chan wsFrame
	quit chan struct{}
	done chan struct{}
	once sync.Once
	err  error // why the reader stopped; read after done
}

var dialer = websocket.Dialer{HandshakeTimeout: 5 * time.Second}

func dial(t testing.TB, s *Server, name string, header http.Header) *testClient {
	t.Helper()
	ws, _, err := dialer.Dial(s.URL()+"/ignored/path?space=ignored", header)
	if err != nil {
		t.Fatalf("%s: dial: %v", name, err)
	}
	c := &testClient{
		t:    t,
		name: name,
		ws:   ws,
		in:   make(chan wsFrame, 4096),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go c.readLoop()
	t.Cleanup(c.close)
	return c
}

func (c *testClient) readLoop() {
	defer close(c.done)
	defer close(c.in)
	for {
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			c.err = err
			return
		}
		select {
		case c.in <- wsFrame{typ, data}:
		case <-c.quit:
			return
		}
	}
}

// close closes the socket without a close frame and waits for the reader.
func (c *testClient) close() {
	c.once.Do(func() {
		close(c.quit)
		c.ws.Close()
		<-c.done
	})
}

// closed reports whether close was called.
func (c *testClient) closed() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

func (c *testClient) send(frame string) {
	c.t.Helper()
	c.sendType(websocket.TextMessage, []byte(frame))
}

func (c *testClient) sendType(typ int, data []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(typ, data); err != nil {
		c.t.Fatalf("%s: send: %v", c.name, err)
	}
}

const readTimeout = 5 * time.Second

// next returns the next frame, failing the test after readTimeout.
func (c *testClient) next() wsFrame {
	c.t.Helper()
	select {
	case f, ok := <-c.in:
		if !ok {
			c.t.Fatalf("%s: socket finished while a frame was expected: %v", c.name, c.err)
		}
		return f
	case <-time.After(readTimeout):
		c.t.Fatalf("%s: no frame within %v", c.name, readTimeout)
	}
	return wsFrame{}
}

// read returns the next frame, which must be a text frame.
func (c *testClient) read() []byte {
	c.t.Helper()
	f := c.next()
	if f.typ != websocket.TextMessage {
		c.t.Fatalf("%s: got a binary frame %q, want text", c.name, f.data)
	}
	return f.data
}

// readEnvelope reads the next frame and decodes it with the agent package,
// as a MEW client would.
func (c *testClient) readEnvelope() agent.Envelope {
	c.t.Helper()
	b := c.read()
	env, err := agent.Decode(b)
	if err != nil {
		c.t.Fatalf("%s: %v in %s", c.name, err, b)
	}
	return env
}

// quiet fails if a frame arrives within d.
func (c *testClient) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case f, ok := <-c.in:
		if ok {
			c.t.Fatalf("%s: unexpected frame %s", c.name, f.data)
		}
	case <-time.After(d):
	}
}

// waitClosed waits until the space closes the socket and returns the
// reader's error.
func (c *testClient) waitClosed() error {
	c.t.Helper()
	deadline := time.After(readTimeout)
	for {
		select {
		case _, ok := <-c.in:
			if !ok {
				return c.err
			}
		case <-deadline:
			c.t.Fatalf("%s: socket still open", c.name)
		}
	}
}

// join sends the reference join frame and returns the welcome.
func (c *testClient) join(id, token string) []byte {
	c.t.Helper()
	c.send(`{"type":"join","participantId":"` + id + `","space":"fulfiller-lab","token":"` + token + `"}`)
	return c.read()
}

var (
	genID    = regexp.MustCompile(`"(welcome-update|welcome|presence|error|msg|http|stream-open)-\d{13}(-[a-z0-9]+)?"`)
	genPID   = regexp.MustCompile(`participant-\d{13}`)
	anyTS    = regexp.MustCompile(`"(ts|timestamp)":"[^"]*"`)
	parseErr = regexp.MustCompile(`"error":"[^"]*","code":"PROCESSING_ERROR"`)
)

// norm blanks what a recording cannot predict (ids and timestamps the
// gateway makes, the JavaScript parser's wording) and keeps everything else,
// key order included, for byte comparison.
func norm(b []byte) string {
	b = genID.ReplaceAll(b, []byte(`"$1-*"`))
	b = genPID.ReplaceAll(b, []byte(`participant-*`))
	b = anyTS.ReplaceAll(b, []byte(`"$1":"*"`))
	b = parseErr.ReplaceAll(b, []byte(`"error":"*","code":"PROCESSING_ERROR"`))
	return string(b)
}

// wantFrame compares a received frame with the expected one after norm.
func wantFrame(t testing.TB, who string, got []byte, want string) {
	t.Helper()
	if norm(got) != norm([]byte(want)) {
		t.Fatalf("%s got\n  %s\nwant\n  %s", who, got, want)
	}
}
