package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Over newline-delimited streams (stdio, a command's pipes) the frames
// are read by a goroutine of the Front's, as the SDK's transport reads
// them, and a frame the Front takes (a client's tools/call, an
// upstream's response to the Front's call) is taken on that goroutine:
// it never reaches the SDK's transport, which costs, per frame, a
// hand-off to the goroutine that reads its connection and a decoding
// whose buffer alone is 32 KiB. Every other frame is handed, as it
// came, to the SDK's own transport over a pipe (an mcp.IOTransport), so
// that its framing, batches, limits and errors stay the SDK's.

// frameHook takes a frame (true) or leaves it to the SDK (false). It is
// called on the reading goroutine, one frame at a time.
type frameHook func(raw []byte) bool

// lineConn is an SDK connection over a newline-delimited stream whose
// frames a hook sees first.
type lineConn struct {
	mcp.Connection // the SDK's, over the pipe the reader feeds
	w              *frameWriter
	closeOnce      sync.Once
	closeErr       error
	closeStream    func() error
}

// closeDrainWait is how long closing a connection waits for its peer to
// take the frames still queued for it, before the stream is closed.
const closeDrainWait = time.Second

// newLineConn reads r (bounded per frame at limit, as the SDK's
// MaxLineLength: 0 is its default, <0 none), hands each frame to hook,
// and those it leaves to the SDK's transport, which writes to w, as the
// Front does, through a frameWriter. close closes the stream (r, then
// w) once the SDK's connection is closed.
func newLineConn(ctx context.Context, r io.Reader, w io.Writer, limit int, hook frameHook, closeStream func() error) (*lineConn, error) {
	pr, pw := io.Pipe()
	// A peer the writer gives up on ends the connection as a peer that
	// leaves ends it: its read side ends, with why (the SDK then closes
	// it, and the calls waiting on it fail).
	fw := newFrameWriter(w, defaultWireLimits, func(err error) { _ = pw.CloseWithError(err) })
	inner, err := (&mcp.IOTransport{Reader: pr, Writer: nopCloser{fw}, MaxLineLength: -1}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = mcp.DefaultMaxLineLength
	}
	go readFrames(r, limit, pw, hook)
	return &lineConn{Connection: inner, w: fw, closeStream: closeStream}, nil
}

// readFrames reads r's frames as the SDK's transport does (one JSON
// value each, a newline after it; at most limit bytes buffered for
// one), offers each to hook, and writes the others to pw. Its end, and
// why, reaches the SDK through pw.
func readFrames(r io.Reader, limit int, pw *io.PipeWriter, hook frameHook) {
	var reader io.Reader = r
	var limiter *frameLimit
	if limit > 0 {
		limiter = &frameLimit{r: r, limit: limit}
		reader = limiter
	}
	dec := json.NewDecoder(reader)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == nil {
			var tr [1]byte
			if n, rerr := dec.Buffered().Read(tr[:]); n > 0 {
				if tr[0] != '\n' && tr[0] != '\r' {
					err = errors.New("invalid trailing data at the end of stream")
				}
			} else if rerr != nil && rerr != io.EOF {
				err = rerr
			}
		}
		if err != nil {
			_ = pw.CloseWithError(err)
			return
		}
		if !hook(raw) {
			if _, err := pw.Write(append(raw, '\n')); err != nil {
				return // the SDK's connection was closed
			}
		}
		if limiter != nil {
			limiter.count = 0
		}
	}
}

// errFrameTooLarge is the SDK's error for a frame over the limit.
var errFrameTooLarge = errors.New("inbound JSON-RPC frame exceeded the configured maximum line length")

// frameLimit bounds what one frame may buffer (the SDK's
// frameLimitReader).
type frameLimit struct {
	r            io.Reader
	limit, count int
}

func (f *frameLimit) Read(p []byte) (int, error) {
	if f.count >= f.limit {
		return 0, errFrameTooLarge
	}
	if len(p) > f.limit-f.count {
		p = p[:f.limit-f.count]
	}
	n, err := f.r.Read(p)
	f.count += n
	return n, err
}

// Close closes the SDK's connection, then the stream, once its peer
// took what was queued for it (for closeDrainWait at most).
func (c *lineConn) Close() error {
	err := c.Connection.Close()
	c.closeOnce.Do(func() {
		c.w.Close(closeDrainWait)
		c.closeErr = c.closeStream()
		c.w.closed()
	})
	return errors.Join(err, c.closeErr)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// lineStream is the stream of a newline-delimited transport the Front
// reads itself: a client's stdio or pipes (mcp.StdioTransport,
// mcp.IOTransport). ok false: t is another kind.
func lineStream(t mcp.Transport) (r io.Reader, w io.Writer, limit int, closeStream func() error, ok bool) {
	switch t := t.(type) {
	case *mcp.StdioTransport:
		out, closeOut := pollableStdout()
		return os.Stdin, out, t.MaxLineLength, func() error { return errors.Join(os.Stdin.Close(), closeOut()) }, true
	case *mcp.IOTransport:
		return t.Reader, t.Writer, t.MaxLineLength, func() error { return errors.Join(t.Reader.Close(), t.Writer.Close()) }, true
	}
	return nil, nil, 0, nil, false
}

// startCommand starts t's command on pipes as the SDK's CommandTransport
// does, and closes it as the SDK does: its stdin closed, then after
// TerminateDuration SIGTERM, then SIGKILL.
func startCommand(t *mcp.CommandTransport) (r io.Reader, w io.Writer, closeStream func() error, err error) {
	stdout, err := t.Command.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdin, err := t.Command.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := t.Command.Start(); err != nil {
		return nil, nil, nil, err
	}
	td := t.TerminateDuration
	if td <= 0 {
		td = 5 * time.Second
	}
	return stdout, stdin, func() error { return terminate(t.Command, stdin, td) }, nil
}

// terminate ends cmd as the SDK's pipeRWC.Close does.
func terminate(cmd *exec.Cmd, stdin io.Closer, td time.Duration) error {
	if err := stdin.Close(); err != nil {
		return fmt.Errorf("closing stdin: %v", err)
	}
	res := make(chan error, 1)
	go func() { res <- cmd.Wait() }()
	wait := func() (error, bool) {
		select {
		case err := <-res:
			return err, true
		case <-time.After(td):
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("unresponsive subprocess")
}

// frameHead is a frame's envelope, read strictly: a frame that does
// not read so (duplicate names, an id neither string nor number) is
// left to the SDK.
type frameHead struct {
	Version string         `json:"jsonrpc"`
	ID      jsontext.Value `json:"id"`
	Method  *string        `json:"method"`
	Params  jsontext.Value `json:"params"`
	Result  jsontext.Value `json:"result"`
	Error   *jsonrpc.Error `json:"error"`
}

// sdkMaxDepth is the deepest nesting the SDK's JSON decoding accepts
// (its internal/json defaultMaxDepth); the strict reader here would
// take ten times as deep.
const sdkMaxDepth = 1000

// readHead reads raw's envelope, and its id as the SDK's DecodeMessage
// makes it (a number made an integer). A frame nested deeper than the
// SDK accepts is not read (ok false): it is left to the SDK, which
// refuses it, so that the Front takes no frame the SDK would not.
func readHead(raw []byte) (frameHead, jsonrpc.ID, bool) {
	var h frameHead
	if nestedDeeper(raw, sdkMaxDepth) {
		return h, jsonrpc.ID{}, false
	}
	if err := jsonv2.Unmarshal(raw, &h); err != nil || h.Version != "2.0" {
		return h, jsonrpc.ID{}, false
	}
	var id jsonrpc.ID
	var err error
	switch h.ID.Kind() {
	case 0, 'n':
	case '"':
		var s string
		if jsonv2.Unmarshal(h.ID, &s) != nil {
			return h, id, false
		}
		id, err = jsonrpc.MakeID(s)
	case '0':
		var f float64
		if f, err = strconv.ParseFloat(string(h.ID), 64); err == nil {
			id, err = jsonrpc.MakeID(f)
		}
	default:
		return h, id, false
	}
	return h, id, err == nil
}

var (
	toolsCallMethod = []byte(`"tools/call"`)
	cancelledMethod = []byte(`"notifications/cancelled"`)
	directIDPrefix  = []byte(`"` + directPrefix)
)

// rawFrame is frontConn's frameHook: a tools/call it can divert, or a
// cancellation of one it diverted, is taken here.
func (c *frontConn) rawFrame(raw []byte) bool {
	if !bytes.Contains(raw, toolsCallMethod) && !bytes.Contains(raw, cancelledMethod) {
		return false
	}
	h, id, ok := readHead(raw)
	if !ok || h.Method == nil || h.Result != nil || h.Error != nil {
		return false
	}
	r := &jsonrpc.Request{ID: id, Method: *h.Method, Params: json.RawMessage(h.Params)}
	switch r.Method {
	case "tools/call":
		return r.IsCall() && c.divert(r)
	case "notifications/cancelled":
		return !r.IsCall() && c.cancelled(r)
	}
	return false
}

// rawFrame is upConn's frameHook: a response to a call of the Front's
// is taken here.
func (c *upConn) rawFrame(raw []byte) bool {
	if !bytes.Contains(raw, directIDPrefix) {
		return false
	}
	h, id, ok := readHead(raw)
	if !ok || h.Method != nil {
		return false
	}
	resp := &jsonrpc.Response{ID: id, Result: json.RawMessage(h.Result)}
	if h.Error != nil {
		resp.Error = h.Error
	}
	return c.response(resp)
}

// nestedDeeper reports whether the JSON text raw nests objects and
// arrays more than max deep (brackets inside strings do not count), as
// the SDK's own check counts (internal/json's checkMaxDepth).
func nestedDeeper(raw []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch b {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > max {
				return true
			}
		case (b == '}' || b == ']') && depth > 0:
			depth--
		}
	}
	return false
}
