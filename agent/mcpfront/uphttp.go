package mcpfront

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An upstream over Streamable HTTP gets its tools/calls from the Front
// itself (httpCaller), not through the SDK's client session: that
// session's call is a jsonrpc2 round of its own (the request encoded,
// its _meta decoded again for the headers, the answer read by a
// goroutine of the stream, handed to the session's reader, to the
// waiting call, decoded into the SDK's result type and encoded again
// for the engine), and each of the SDK's decodings allocates a 32 KiB
// buffer: together more CPU than the HTTP exchange itself. The Front
// posts the call on the session the SDK made (its Mcp-Session-Id and
// revision), reads the answer (JSON or an SSE stream) on the goroutine
// that posted it, and hands the result on as it came (relayable). The
// session itself (initialize, lists, resources, prompts, the standalone
// stream, its end) stays the SDK's.

// httpCaller posts an upstream's tools/calls on its Streamable HTTP
// session.
type httpCaller struct {
	u        *upstream
	cs       *mcp.ClientSession // the session whose id and revision the calls carry
	endpoint string
	hc       *http.Client
	session  string // Mcp-Session-Id ("" for a server that gave none)
	version  string // Mcp-Protocol-Version
	maxEvent int    // bound of one message (JSON body or SSE event)
	next     atomic.Uint64
}

// httpMaxMessage bounds one message of an upstream's answer when its
// transport sets no MaxEventSize: far above any tool result a model
// reads, and what keeps a server that streams without end from growing
// the Front's memory.
const httpMaxMessage = 32 << 20

// newHTTPCaller is the caller for cs, the SDK's session over t, or nil
// when the Front leaves the calls to the SDK: a transport with OAuth
// (its token flow is the SDK's), or a session of the 2026-07-28
// revision, whose requests carry headers of the tool's (Mcp-Method,
// Mcp-Name, Mcp-Param-*) and _meta the SDK writes.
func newHTTPCaller(u *upstream, t mcp.Transport, cs *mcp.ClientSession) *httpCaller {
	st, ok := t.(*mcp.StreamableClientTransport)
	if !ok || st.OAuthHandler != nil {
		return nil
	}
	init := cs.InitializeResult()
	if init == nil || init.ProtocolVersion == "" || init.ProtocolVersion >= mrtrVersion {
		return nil
	}
	hc := st.HTTPClient
	if hc == nil {
		hc = http.DefaultClient // as the SDK's transport does
	}
	limit := st.MaxEventSize
	if limit <= 0 {
		limit = httpMaxMessage
	}
	return &httpCaller{u: u, cs: cs, endpoint: st.Endpoint, hc: hc, session: cs.ID(), version: init.ProtocolVersion, maxEvent: limit}
}

// drainWait bounds how long the rest of an answer is read after the
// call's response, to keep its connection.
const drainWait = time.Second

// errSessionGone: the upstream no longer knows the session (404): the
// SDK's session is closed, and the supervisor starts a new one.
var errSessionGone = errors.New("the upstream ended the session (404 Not Found)")

// call posts a tools/call of params and returns the upstream's answer
// as send does: its result as it came (res nil: decoded only when a
// client's handler needs it), its JSON-RPC error, or a failed result
// naming the upstream. When ctx ends first, the call is cancelled
// upstream (notifications/cancelled) as the SDK's client cancels one.
func (c *httpCaller) call(ctx context.Context, params *mcp.CallToolParams) (Response, *mcp.CallToolResult) {
	id := directPrefix + strconv.FormatUint(c.next.Add(1), 10)
	rpc, err := c.roundTrip(ctx, id, params)
	if err != nil && ctx.Err() != nil {
		c.cancel(id)
		err = errDirectCancelled
	}
	if errors.Is(err, errSessionGone) || errors.Is(err, errSessionBroken) {
		// As the SDK's connection fails: the session ends, and the
		// upstream is started again (supervise).
		_ = c.cs.Close()
	}
	return c.u.f.received(c.u, rpc, err)
}

// errSessionBroken: the upstream answered in a way that leaves the
// session's state unknown (a status the SDK's client fails the
// connection for, or a stream it cannot read).
var errSessionBroken = errors.New("the session cannot be used further")

// roundTrip posts the call and reads its answer.
func (c *httpCaller) roundTrip(ctx context.Context, id string, params *mcp.CallToolParams) (*jsonrpc.Response, error) {
	args, _ := params.Arguments.(json.RawMessage)
	if args == nil {
		args = json.RawMessage("{}") // as the SDK's CallTool sends none
	}
	var meta json.RawMessage
	if token := params.GetProgressToken(); token != nil {
		raw, err := json.Marshal(map[string]any{"progressToken": token})
		if err != nil {
			return nil, fmt.Errorf("the progress token: %w", err)
		}
		meta = raw
	}
	p, err := callParamsJSON(meta, params.Name, args)
	if err != nil {
		return nil, fmt.Errorf("the request's params: %w", err)
	}
	qid, _ := json.Marshal(id)
	body := make([]byte, 0, len(p)+len(qid)+64)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, qid...)
	body = append(body, `,"method":"tools/call","params":`...)
	body = append(body, p...)
	body = append(body, '}')
	resp, err := c.post(ctx, body, "application/json, text/event-stream")
	if err != nil {
		return nil, err
	}
	defer func() {
		// Drained so that the connection is kept (a stream's end comes
		// right after the response), but not waited on for long: a
		// server may hold a stream open past its response.
		stop := time.AfterFunc(drainWait, func() { _ = resp.Body.Close() })
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		stop.Stop()
		_ = resp.Body.Close()
	}()
	if err := c.status(resp); err != nil {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return &jsonrpc.Response{Error: rpcErr}, nil
		}
		return nil, err
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	switch strings.ToLower(strings.TrimSpace(ct)) {
	case "application/json":
		data, err := readLimited(resp.Body, c.maxEvent)
		if err != nil {
			return nil, err
		}
		m, err := decodeUpMessage(data)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errSessionBroken, err)
		}
		if m.isResponse() && m.idIs(id) {
			return m.response(), nil
		}
		return nil, fmt.Errorf("%w: the answer is not the call's response: %.200s", errSessionBroken, data)
	case "text/event-stream":
		return c.stream(ctx, id, resp.Body)
	default:
		return nil, fmt.Errorf("unsupported content type %q", ct)
	}
}

// post posts body on the session.
func (c *httpCaller) post(ctx context.Context, body []byte, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	req.Header.Set("Mcp-Protocol-Version", c.version)
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	return c.hc.Do(req)
}

// status is the error of an answer that is not a success, as the SDK's
// client reads one: transient statuses fail the call only; a JSON-RPC
// error in the body is the upstream's answer (*jsonrpc.Error); 404 on a
// session is errSessionGone; any other failure breaks the session.
func (c *httpCaller) status(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return fmt.Errorf("answered %s", resp.Status)
	}
	if data, err := readLimited(resp.Body, 1<<20); err == nil {
		if m, err := decodeUpMessage(data); err == nil && m.isResponse() && m.Error != nil {
			return &jsonrpc.Error{Code: m.Error.Code, Message: m.Error.Message, Data: m.Error.Data}
		}
	}
	if resp.StatusCode == http.StatusNotFound && c.session != "" {
		return errSessionGone
	}
	return fmt.Errorf("%w: answered %s", errSessionBroken, resp.Status)
}

// stream reads an SSE answer until the call's response: what else the
// upstream sends on it (progress, log lines, list changes, a ping) is
// handled as the SDK's client would.
func (c *httpCaller) stream(ctx context.Context, id string, body io.Reader) (*jsonrpc.Response, error) {
	br := readers.Get().(*bufio.Reader)
	br.Reset(body)
	defer func() {
		br.Reset(nil) // not holding on to the body
		readers.Put(br)
	}()
	var data []byte
	name := ""
	for {
		line, err := readLine(br, c.maxEvent-len(data))
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errors.New("request terminated without response") // the SDK's words
			}
			if errors.Is(err, errEventTooLarge) {
				return nil, fmt.Errorf("%w: an SSE event exceeds %d bytes", errSessionBroken, c.maxEvent)
			}
			return nil, err
		}
		if len(line) == 0 { // the event ends
			if len(data) > 0 && (name == "" || name == "message") {
				m, err := decodeUpMessage(data)
				if err != nil {
					return nil, fmt.Errorf("%w: an event cannot be read: %w", errSessionBroken, err)
				}
				if m.isResponse() {
					if m.idIs(id) {
						return m.response(), nil
					}
				} else {
					c.serverMessage(ctx, m)
				}
			}
			data, name = data[:0], ""
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, value...)
		case "event":
			name = string(value)
		}
	}
}

var errEventTooLarge = errors.New("event too large")

// readers are the buffers of the streams read (a call's answer is read
// on the worker that posted it, then the buffer serves the next).
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// readLine reads one line of an SSE stream, without its end of line,
// failing once it is over budget bytes.
func readLine(br *bufio.Reader, budget int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > budget+2 {
			return nil, errEventTooLarge
		}
		if err == bufio.ErrBufferFull {
			line = append(line, chunk...)
			continue
		}
		if err != nil {
			if err == io.EOF && len(line)+len(chunk) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if line != nil {
			chunk = append(line, chunk...)
		}
		chunk = bytes.TrimSuffix(chunk, []byte("\n"))
		return bytes.TrimSuffix(chunk, []byte("\r")), nil
	}
}

// readLimited reads r whole, failing when it is over limit bytes.
func readLimited(r io.Reader, limit int) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("the answer could not be read: %w", err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: the answer exceeds %d bytes", errSessionBroken, limit)
	}
	return data, nil
}

// serverMessage handles a request or notification of the upstream's on
// a call's stream, as the SDK's client (newClient) handles them.
func (c *httpCaller) serverMessage(ctx context.Context, m *upMessage) {
	u := c.u
	if m.ID != nil {
		// A request: fulfiller declares no capabilities, so only a
		// ping is answered with a result.
		var out []byte
		if m.Method == "ping" {
			out = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
		} else {
			msg, _ := json.Marshal("fulfiller does not answer " + m.Method)
			out = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%s}}`, m.ID, jsonrpc.CodeMethodNotFound, msg)
		}
		c.send(out)
		return
	}
	switch m.Method {
	case "notifications/progress":
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(m.Params, &p) == nil {
			u.f.progress(ctx, &p)
		}
	case "notifications/message":
		var p mcp.LoggingMessageParams
		if json.Unmarshal(m.Params, &p) == nil {
			u.logMessage(ctx, &p)
		}
	case "notifications/tools/list_changed":
		u.toolsChanged(ctx, c.cs)
	case "notifications/prompts/list_changed":
		u.listChanged(notifyPrompts)
	case "notifications/resources/list_changed":
		u.listChanged(notifyResources)
	case "notifications/resources/updated":
		var p mcp.ResourceUpdatedNotificationParams
		if json.Unmarshal(m.Params, &p) == nil {
			u.resourceUpdated(ctx, &p)
		}
	}
}

// send posts a message that has no answer but 202 (a response to the
// upstream's request, a notification), for a few seconds at most.
func (c *httpCaller) send(msg []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.post(ctx, msg, "application/json, text/event-stream")
	if err != nil {
		c.u.f.log.Debug("mcp message not sent upstream", "upstream", c.u.Name, "err", err)
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		c.u.f.log.Debug("mcp message refused upstream", "upstream", c.u.Name, "status", resp.Status)
	}
}

// cancel tells the upstream that call id is cancelled, with the reason
// the SDK's client gives.
func (c *httpCaller) cancel(id string) {
	params, _ := json.Marshal(map[string]string{"requestId": id, "reason": context.Canceled.Error()})
	c.send(fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":%s}`, params))
}

// upMessage is a JSON-RPC message of the upstream's, read loosely: what
// the SDK's reading would refuse is refused here too (not an object,
// no jsonrpc "2.0").
type upMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func decodeUpMessage(data []byte) (*upMessage, error) {
	var m upMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("not a JSON-RPC message: %w", err)
	}
	if m.JSONRPC != "2.0" {
		return nil, fmt.Errorf("not a JSON-RPC 2.0 message: %.200s", data)
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return nil, fmt.Errorf("neither a request nor a response: %.200s", data)
	}
	return &m, nil
}

func (m *upMessage) isResponse() bool { return m.Method == "" }

// idIs: the message's id is the string id (the Front's ids need no
// escaping: as written, or spelled with escapes).
func (m *upMessage) idIs(id string) bool {
	if len(m.ID) == len(id)+2 && m.ID[0] == '"' && string(m.ID[1:len(m.ID)-1]) == id {
		return true
	}
	var s string
	return bytes.IndexByte(m.ID, '\\') >= 0 && json.Unmarshal(m.ID, &s) == nil && s == id
}

// response is the message as the SDK's jsonrpc.Response (received reads
// it).
func (m *upMessage) response() *jsonrpc.Response {
	if m.Error != nil {
		return &jsonrpc.Response{Error: &jsonrpc.Error{Code: m.Error.Code, Message: m.Error.Message, Data: m.Error.Data}}
	}
	return &jsonrpc.Response{Result: m.Result}
}
