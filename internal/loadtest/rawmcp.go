package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Load generators of the MCP bench (MCPConfig.Load).
const (
	// LoadSDK: each client is a go-sdk client (mcp.ClientSession), as an
	// MCP client built on the SDK is; the clients' own CPU is then about
	// as much as the front end's.
	LoadSDK = "sdk"
	// LoadRaw: each client speaks Streamable HTTP itself on one
	// keep-alive TCP connection, as wrk does for HTTP servers: an
	// initialize handshake per session, then pre-encoded tools/call POSTs
	// whose answers are checked to be exactly the calculator's. It
	// measures the server rather than the clients (rawClient).
	LoadRaw = "raw"
)

// rawProtocolVersion is the MCP revision the raw clients ask for in
// their initialize request; they use whatever the server answers.
const rawProtocolVersion = "2025-11-25"

// rawIDDigits is the width of the number in a raw client's request ids:
// the ids have a fixed length, so that one pre-encoded request (and its
// Content-Length) serves every call with only the digits patched.
const rawIDDigits = 10

// rawWantResult is the result a raw client must get for the bench's
// call, add with {"a":1,"b":2}: the calculator's answer as the front end
// relays it, upstream being how the front end reaches the tool server.
// Over stdio the front end's session to the tool server is of the
// 2026-07-28 revision, whose servers name themselves in each result's
// _meta (the go-sdk's MetaKeyServerInfo), and the front end relays the
// result as it came. An answer with other bytes is still accepted when
// it decodes to the same JSON value (key order, spacing); anything else
// is an error of the run.
func rawWantResult(upstream string) string {
	if upstream == MCPStdio {
		return `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"` + MCPServerName + `","version":"1.0.0"}},"content":[{"type":"text","text":"3"}]}`
	}
	return `{"content":[{"type":"text","text":"3"}]}`
}

// rawClient is one connection of the raw load generator: a Streamable
// HTTP session to the front end on a keep-alive HTTP/1.1 connection,
// with no MCP SDK. It is what wrk is to an HTTP server: it sends bytes
// prepared before the run and reads the answers with net/http's
// response parser, so that its CPU per call is a small part of the
// server's. What it does not do: no GET stream for server-initiated
// messages, no answers to server requests (an elicitation or a ping on
// the call's stream fails the call), no progress tokens, no
// cancellation, one call at a time per connection (like an SDK client
// awaiting each call, so -clients is the concurrency).
type rawClient struct {
	addr, path string
	conn       net.Conn
	br         *bufio.Reader
	session    string
	// call is the pre-encoded tools/call POST; idAt is where its id's
	// digits are; prefix is the id's fixed part.
	call []byte
	idAt int
	seq  uint64
	body bytes.Buffer
	want []byte // the whole expected data line's JSON, id digits at wantIDAt
	// wantIDAt is where the id's digits are in want.
	wantIDAt int
}

// dialRaw opens a raw client's connection to the MCP endpoint endpoint
// (http://host:port/path) and makes its session: initialize, then the
// initialized notification. name distinguishes the client's request ids;
// want is the result every call must answer.
func dialRaw(ctx context.Context, endpoint, name, want string) (*rawClient, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" {
		return nil, fmt.Errorf("raw client: endpoint %q: want http://host:port/path", endpoint)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("raw client: %w", err)
	}
	c := &rawClient{addr: u.Host, path: u.EscapedPath(), conn: conn, br: bufio.NewReaderSize(conn, 16<<10)}
	if err := c.handshake(ctx, name, want); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

// post writes one POST with body (and the session's headers once it has
// one) and reads the answer's head; the body is the caller's to read.
func (c *rawClient) post(ctx context.Context, body []byte) (*http.Response, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	}
	if _, err := c.conn.Write(c.request(body, "")); err != nil {
		return nil, err
	}
	return http.ReadResponse(c.br, nil)
}

// request is the bytes of a POST of body to the endpoint; protocol, when
// set, is the negotiated revision's header.
func (c *rawClient) request(body []byte, protocol string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", c.path, c.addr)
	if c.session != "" {
		fmt.Fprintf(&b, "Mcp-Session-Id: %s\r\n", c.session)
	}
	if protocol != "" {
		fmt.Fprintf(&b, "Mcp-Protocol-Version: %s\r\n", protocol)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// handshake makes the session and prepares the call's bytes.
func (c *rawClient) handshake(ctx context.Context, name, want string) error {
	init := fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"fulfiller-bench-raw","version":"1.0.0"}}}`, rawProtocolVersion)
	resp, err := c.post(ctx, []byte(init))
	if err != nil {
		return fmt.Errorf("raw client: initialize: %w", err)
	}
	data, err := c.readAnswer(resp)
	if err != nil {
		return fmt.Errorf("raw client: initialize: %w", err)
	}
	var ans struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &ans); err != nil || ans.Error != nil || ans.Result.ProtocolVersion == "" {
		return fmt.Errorf("raw client: initialize answered %s", data)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	if c.session == "" {
		return errors.New("raw client: initialize answered no Mcp-Session-Id")
	}
	proto := ans.Result.ProtocolVersion
	// The notification, with the session's headers from now on.
	if _, err := c.conn.Write(c.request([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), proto)); err != nil {
		return fmt.Errorf("raw client: initialized: %w", err)
	}
	resp, err = http.ReadResponse(c.br, nil)
	if err != nil {
		return fmt.Errorf("raw client: initialized: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("raw client: initialized answered %s", resp.Status)
	}

	// The call, prepared once: only its id's digits change.
	id := name + "-" + string(bytes.Repeat([]byte("0"), rawIDDigits))
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":%q,"arguments":{"a":1,"b":2}}}`, id, MCPTool)
	c.call = c.request([]byte(body), proto)
	c.idAt = bytes.Index(c.call, []byte(id)) + len(name) + 1
	c.want = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%q,"result":%s}`, id, want)
	c.wantIDAt = bytes.Index(c.want, []byte(id)) + len(name) + 1
	return nil
}

// readAnswer reads resp's body, JSON or an SSE stream, and returns the
// JSON-RPC response in it: the first message with an id (a server's
// request on the call's stream is not answered and fails the call).
func (c *rawClient) readAnswer(resp *http.Response) ([]byte, error) {
	c.body.Reset()
	_, err := c.body.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s: %s", resp.Status, bytes.TrimSpace(c.body.Bytes()))
	}
	b := c.body.Bytes()
	ct := resp.Header.Get("Content-Type")
	if len(ct) >= 16 && ct[:16] == "application/json" {
		return b, nil
	}
	// SSE: events separated by a blank line, the message in data lines
	// (the go-sdk writes one data line per event).
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimPrefix(data, []byte(" "))
		if bytes.Contains(data, []byte(`"method"`)) && !bytes.Contains(data, []byte(`"result"`)) && !bytes.Contains(data, []byte(`"error"`)) {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(data, &m) == nil && m.Method != "" {
				if m.ID != nil {
					return nil, fmt.Errorf("the server asked %s on the call's stream; the raw client answers no requests", m.Method)
				}
				continue // a notification (progress, a log line)
			}
		}
		return data, nil
	}
	return nil, fmt.Errorf("no JSON-RPC response in the %q answer: %q", ct, c.body.Bytes())
}

// callOnce makes one tools/call and checks that its answer is exactly the
// calculator's: the JSON-RPC response to this call's id with the result
// rawWantResult.
func (c *rawClient) callOnce(ctx context.Context) error {
	c.seq++
	digits := strconv.AppendUint(make([]byte, 0, 20), c.seq, 10)
	if len(digits) > rawIDDigits {
		return errors.New("raw client: request ids exhausted")
	}
	pad := rawIDDigits - len(digits)
	for i := range pad {
		c.call[c.idAt+i] = '0'
		c.want[c.wantIDAt+i] = '0'
	}
	copy(c.call[c.idAt+pad:], digits)
	copy(c.want[c.wantIDAt+pad:], digits)
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	}
	if _, err := c.conn.Write(c.call); err != nil {
		return rawNetErr(err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return rawNetErr(err)
	}
	data, err := c.readAnswer(resp)
	if err != nil {
		return rawNetErr(err)
	}
	if bytes.Equal(data, c.want) {
		return nil
	}
	return sameJSON(data, c.want)
}

// sameJSON is nil when got is the JSON value want is (another key order
// or spacing), else an error quoting got.
func sameJSON(got, want []byte) error {
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Errorf("answered %q: not JSON: %w", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Errorf("the expected answer %q: %w", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Errorf("answered %s, want %s", got, want)
	}
	return nil
}

// rawNetErr makes a deadline on the connection the context's deadline,
// so that the tally counts the call as unanswered rather than wrong.
func rawNetErr(err error) error {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// close ends the session (DELETE, as a polite client does) and the
// connection.
func (c *rawClient) close() {
	_ = c.conn.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c.conn, "DELETE %s HTTP/1.1\r\nHost: %s\r\nMcp-Session-Id: %s\r\nContent-Length: 0\r\n\r\n", c.path, c.addr, c.session)
	if resp, err := http.ReadResponse(c.br, nil); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	_ = c.conn.Close()
}

// measureRaw is measureMCP for LoadRaw: cfg.Clients raw clients, each
// with its own session and connection to the front end, calling it one
// call at a time; a warm-up (up to 50 calls a client) is not measured.
// A client whose call fails stops (its connection's state is unknown);
// the others make the rest of the calls.
func measureRaw(ctx context.Context, cfg MCPConfig, rig *mcpRig) (*MCPReport, error) {
	if rig.proxiedURL == "" {
		return nil, errors.New("mcp bench: the raw load needs the front end over HTTP")
	}
	tally := &mcpTally{}
	clients := make([]*rawClient, cfg.Clients)
	var err error
	labelled(ctx, ComponentClients, func(ctx context.Context) {
		for i := range clients {
			cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
			clients[i], err = dialRaw(cctx, rig.proxiedURL, fmt.Sprintf("c%d", i), rawWantResult(cfg.Upstream))
			cancel()
			if err != nil {
				err = fmt.Errorf("mcp bench: connect to the front end: %w", err)
				return
			}
		}
	})
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.close()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	call := func(ctx context.Context, c *rawClient, side string, h *histogram) bool {
		cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
		defer cancel()
		t0 := time.Now()
		err := c.callOnce(cctx)
		d := time.Since(t0)
		if err != nil {
			tally.fail(side, err)
			return false
		}
		if h != nil {
			h.record(d.Nanoseconds())
		}
		return true
	}

	warm := max(1, min(50, cfg.Calls/(10*cfg.Clients)))
	var wg sync.WaitGroup
	labelled(ctx, ComponentClients, func(ctx context.Context) {
		for _, c := range clients {
			wg.Go(func() {
				for range warm {
					if !call(ctx, c, "proxied (warm-up)", nil) {
						return
					}
				}
			})
		}
	})
	wg.Wait()
	if tally.errors.Load() > 0 || tally.unanswered.Load() > 0 {
		return warmUpFailed(cfg, tally, int64(cfg.Calls)), nil
	}

	var prof bytes.Buffer
	profErr := pprof.StartCPUProfile(&prof)
	cpu0, child0 := cpuTime(), rig.childCPU()
	start := time.Now()
	var next atomic.Int64
	hists := make([]histogram, len(clients))
	labelled(ctx, ComponentClients, func(ctx context.Context) {
		for i, c := range clients {
			wg.Go(func() {
				for next.Add(1) <= int64(cfg.Calls) && ctx.Err() == nil {
					if !call(ctx, c, "proxied", &hists[i]) {
						return
					}
				}
			})
		}
	})
	wg.Wait()
	elapsed := time.Since(start)
	cpu, child := cpuTime()-cpu0, rig.childCPU()-child0
	if profErr == nil {
		pprof.StopCPUProfile()
	}
	for i := range hists {
		tally.proxied.merge(&hists[i])
	}
	return finishMCP(cfg, tally, elapsed, cpu, child, &prof, profErr)
}
