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
// called on the reading goroutine, one frame at a time; f and the bytes
// it points into are the reader's again once it returns.
type frameHook func(f *inFrame) bool

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
//
// A frame is read in one pass (scanner) over the line that holds it,
// in a buffer reused from frame to frame. A stream the pass cannot
// frame that way (a value over several lines, two on one, a top-level
// scalar, one that is not JSON or nests too deep) is read from there on
// as before, by encoding/json's decoder, whose framing and errors are
// the SDK's own.
func readFrames(r io.Reader, limit int, pw *io.PipeWriter, hook frameHook) {
	fr := &frameReader{r: r, limit: limit, buf: make([]byte, frameBufSize)}
	var s scanner
	var f inFrame
	for {
		line, err := fr.line()
		if err != nil {
			_ = pw.CloseWithError(err)
			return
		}
		s.reset(line)
		s.skipSpace()
		start := s.i
		if start == len(line) {
			continue // a blank line, which the SDK's decoder skips
		}
		var ok bool
		switch line[start] {
		case '{':
			ok = s.object(true)
		case '[':
			ok = s.array()
		}
		end := s.i
		if ok {
			s.skipSpace()
			ok = s.i == len(line) && (end == len(line) || line[end] == '\n' || line[end] == '\r')
		}
		if !ok {
			legacyFrames(fr.pending(line), limit, pw, hook)
			return
		}
		f.read(&s, line[start:end])
		if hook(&f) {
			continue
		}
		out := line[start:]
		if out[len(out)-1] != '\n' {
			out = append(out[:len(out):len(out)], '\n') // the last frame, no newline after it
		}
		if _, err := pw.Write(out); err != nil {
			return // the SDK's connection was closed
		}
	}
}

// frameBufSize is a frame reader's buffer to begin with: a call or a
// result of most tools fits, and a larger frame grows it (to its limit
// at most), until the frames are small again.
const frameBufSize = 16 << 10

// frameReader reads a stream a line at a time into a buffer it reuses.
type frameReader struct {
	r     io.Reader
	limit int // >0: at most that much buffered for one line
	buf   []byte
	// start, end: the bytes read and not yet returned; scanned of them
	// hold no newline.
	start, end, scanned int
	err                 error // the read error, returned once the lines before it are
}

// line is the next line, its newline included (none after the last),
// valid until the next call; an error: the stream's, or
// errFrameTooLarge.
func (fr *frameReader) line() ([]byte, error) {
	for {
		if i := bytes.IndexByte(fr.buf[fr.start+fr.scanned:fr.end], '\n'); i >= 0 {
			n := fr.scanned + i + 1
			if fr.limit > 0 && n-1 > fr.limit {
				return nil, errFrameTooLarge
			}
			line := fr.buf[fr.start : fr.start+n]
			fr.start += n
			fr.scanned = 0
			return line, nil
		}
		fr.scanned = fr.end - fr.start
		if fr.limit > 0 && fr.scanned > fr.limit {
			return nil, errFrameTooLarge
		}
		if fr.err != nil {
			if fr.start == fr.end {
				return nil, fr.err
			}
			line := fr.buf[fr.start:fr.end]
			fr.start, fr.scanned = fr.end, 0
			return line, nil
		}
		fr.room()
		n, err := fr.r.Read(fr.buf[fr.end:])
		fr.end += n
		fr.err = err
	}
}

// room makes room in buf for a read: what is pending moves to its
// front, and a buffer it fills grows; one that grew large for a large
// frame is let go once the frames are small again.
func (fr *frameReader) room() {
	pending := fr.end - fr.start
	if pending == 0 && len(fr.buf) > 64*frameBufSize {
		fr.buf = make([]byte, frameBufSize)
		fr.start, fr.end = 0, 0
	}
	if fr.end < len(fr.buf) {
		return
	}
	if pending < len(fr.buf)/2 {
		copy(fr.buf, fr.buf[fr.start:fr.end])
	} else {
		nb := make([]byte, 2*len(fr.buf))
		copy(nb, fr.buf[fr.start:fr.end])
		fr.buf = nb
	}
	fr.start, fr.end = 0, pending
}

// pending is a reader of what fr has not returned, line (just returned)
// first, then the rest of the stream.
func (fr *frameReader) pending(line []byte) io.Reader {
	rest := append(append([]byte(nil), line...), fr.buf[fr.start:fr.end]...)
	fr.start = fr.end
	if fr.err != nil {
		return io.MultiReader(bytes.NewReader(rest), errReader{fr.err})
	}
	return io.MultiReader(bytes.NewReader(rest), fr.r)
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// legacyFrames reads r's frames as the SDK's transport does, with
// encoding/json's decoder (limit as it counts it), offers each to hook,
// and writes the others to pw: what readFrames falls back to.
func legacyFrames(r io.Reader, limit int, pw *io.PipeWriter, hook frameHook) {
	var reader io.Reader = r
	var limiter *frameLimit
	if limit > 0 {
		limiter = &frameLimit{r: r, limit: limit}
		reader = limiter
	}
	dec := json.NewDecoder(reader)
	var s scanner
	var f inFrame
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
		if s.scanText(raw) {
			f.read(&s, raw)
		} else {
			f = inFrame{raw: raw} // too deep for the SDK: not strict
		}
		if !hook(&f) {
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

// Frames the Front writes itself (a diverted call's result, its own
// call upstream) go straight to the frame writer, as the bytes the
// SDK's ioConn.Write would have written: the SDK encodes a message by
// reflection, and compacts its params or result once more on the way.

// framePool holds the buffers such frames are put together in: the
// frame writer copies what it queues, so a buffer is free once its
// Write returns.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledFrame is the largest buffer put back in framePool: one that
// grew for a large result is let go, not kept for every later frame.
const maxPooledFrame = 64 << 10

// putFrame gives bp back to framePool, unless it grew too large.
func putFrame(bp *[]byte) {
	if cap(*bp) <= maxPooledFrame {
		framePool.Put(bp)
	}
}

// writeResult writes the response {"jsonrpc":"2.0","id":id,"result":
// result}. done false: the SDK would write it otherwise (an id it would
// escape, a result not on one line), and its Write is to.
func (c *lineConn) writeResult(id jsonrpc.ID, result []byte) (done bool, err error) {
	bp := framePool.Get().(*[]byte)
	defer putFrame(bp)
	b, ok := appendResult((*bp)[:0], id, result)
	if !ok {
		return false, nil
	}
	*bp = b
	_, err = c.w.Write(b)
	return true, err
}

// appendResult appends the frame of the response to id with result
// (writeResult).
func appendResult(b []byte, id jsonrpc.ID, result []byte) ([]byte, bool) {
	if len(result) == 0 || !oneLine(result) {
		return b, false
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b, ok := appendID(b, id)
	if !ok {
		return b, false
	}
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, "}\n"...), true
}

// writeCall writes the request {"jsonrpc":"2.0","id":id,"method":
// method,"params":params}; id and method are the Front's own (no
// escapes). done false: as writeResult.
func (c *lineConn) writeCall(id, method string, params []byte) (done bool, err error) {
	bp := framePool.Get().(*[]byte)
	defer putFrame(bp)
	b, ok := appendCall((*bp)[:0], id, method, params)
	if !ok {
		return false, nil
	}
	*bp = b
	_, err = c.w.Write(b)
	return true, err
}

// appendCall appends the frame of the request (writeCall).
func appendCall(b []byte, id, method string, params []byte) ([]byte, bool) {
	if len(params) == 0 || !oneLine(params) {
		return b, false
	}
	b = append(b, `{"jsonrpc":"2.0","id":"`...)
	b = append(b, id...)
	b = append(b, `","method":"`...)
	b = append(b, method...)
	b = append(b, `","params":`...)
	b = append(b, params...)
	return append(b, "}\n"...), true
}

// oneLine: v, valid JSON, has no line break (outside its strings,
// where JSON has none): it can be written as a line.
func oneLine(v []byte) bool {
	return bytes.IndexByte(v, '\n') < 0 && bytes.IndexByte(v, '\r') < 0
}

// appendID appends id as the SDK's encoding writes it: ok false for an
// id it might write otherwise (a string with a byte it escapes, or
// anything but printable ASCII), or none.
func appendID(b []byte, id jsonrpc.ID) ([]byte, bool) {
	switch v := id.Raw().(type) {
	case int64:
		return strconv.AppendInt(b, v, 10), true
	case string:
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
				return b, false
			}
		}
		b = append(b, '"')
		b = append(b, v...)
		return append(b, '"'), true
	}
	return b, false
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

// sdkMaxDepth is the deepest nesting the SDK's JSON decoding accepts
// (its internal/json defaultMaxDepth): a frame nested deeper is left to
// the SDK, which refuses it, so that the Front takes no frame the SDK
// would not.
const sdkMaxDepth = 1000

// head is f's id as the SDK's DecodeMessage makes it (a number made an
// integer), when f is a JSON-RPC 2.0 frame a strict reader reads as
// the SDK's does: ok false leaves it to the SDK.
func (f *inFrame) head() (jsonrpc.ID, bool) {
	if !f.strict || string(f.version) != `"2.0"` || (!isNull(f.method) && f.method[0] != '"') {
		return jsonrpc.ID{}, false
	}
	v := f.id
	if isNull(v) {
		return jsonrpc.ID{}, true
	}
	var id jsonrpc.ID
	var err error
	switch c := v[0]; {
	case c == '"' && bytes.IndexByte(v, '\\') < 0:
		id, err = jsonrpc.MakeID(string(v[1 : len(v)-1]))
	case c == '"':
		var s string
		if err = jsonv2.Unmarshal(v, &s); err == nil {
			id, err = jsonrpc.MakeID(s)
		}
	case c == '-' || (c >= '0' && c <= '9'):
		var x float64
		if x, err = strconv.ParseFloat(string(v), 64); err == nil {
			id, err = jsonrpc.MakeID(x)
		}
	default:
		return id, false
	}
	return id, err == nil
}

var directIDPrefix = []byte(`"` + directPrefix)

// rawFrame is frontConn's frameHook: a tools/call it can divert, or a
// cancellation of one it diverted, is taken here.
func (c *frontConn) rawFrame(f *inFrame) bool {
	if f.result != nil || !isNull(f.err) {
		return false
	}
	var method string
	switch string(f.method) { // an escaped name is the SDK's to read
	case `"tools/call"`:
		method = "tools/call"
	case `"notifications/cancelled"`:
		method = "notifications/cancelled"
	default:
		return false
	}
	id, ok := f.head()
	if !ok {
		return false
	}
	r := &jsonrpc.Request{ID: id, Method: method, Params: json.RawMessage(f.params)}
	if method == "tools/call" {
		return r.IsCall() && c.divert(r)
	}
	return !r.IsCall() && c.cancelled(r)
}

// rawFrame is upConn's frameHook: a response to a call of the Front's
// is taken here.
func (c *upConn) rawFrame(f *inFrame) bool {
	if !bytes.HasPrefix(f.id, directIDPrefix) || !isNull(f.method) {
		return false
	}
	id, ok := f.head()
	if !ok {
		return false
	}
	resp := &jsonrpc.Response{ID: id, Result: json.RawMessage(f.result)}
	if !isNull(f.err) {
		var e jsonrpc.Error
		if jsonv2.Unmarshal(f.err, &e) != nil {
			return false
		}
		resp.Error = &e
	}
	return c.response(resp)
}
