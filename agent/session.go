package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// errNotWritten means a write did not start because the session was
// already lost; the caller may safely try the next session.
var errNotWritten = errors.New("session lost before the write")

// session is one socket from join to close. The Client's supervisor owns it.
type session struct {
	conn    *websocket.Conn
	welcome Envelope // the welcome that opened it
	started time.Time

	wsem chan struct{} // one writer at a time (gorilla allows one)

	lost     chan struct{} // closed by lose
	lostOnce sync.Once
	lostErr  error

	readerDone chan struct{}
	// frame is where the session's one reader (the join's, then
	// readLoop) reads each frame before it keeps an exact copy: a frame
	// read into a fresh slice grew it from 512 bytes up, several
	// allocations a frame on a socket that carries the whole space.
	frame bytes.Buffer
	wg    sync.WaitGroup // reader and pinger

	// lastIn is when the session last read an envelope (unix nanos);
	// probe is the envelope id of a probe awaiting its echo, probeSent
	// when it went out (unix nanos; 0: none out). See probe.
	lastIn    atomic.Int64
	probe     atomic.Value // string
	probeSent atomic.Int64
}

// lose marks the session as gone; the supervisor reconnects.
func (s *session) lose(err error) {
	s.lostOnce.Do(func() {
		s.lostErr = err
		close(s.lost)
	})
}

func (s *session) reason() error {
	<-s.lost
	return s.lostErr
}

// connect dials, sends the join frame and waits for our welcome, all
// within JoinTimeout (and ctx).
func (c *Client) connect(ctx context.Context) (*session, WelcomePayload, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
	defer cancel()
	header := http.Header{}
	if c.cfg.Token != "" {
		header.Set("Authorization", "Bearer "+c.cfg.Token) // the spec wants it; the gateway ignores it
	}
	dialer := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: c.cfg.JoinTimeout}
	conn, resp, err := dialer.DialContext(ctx, c.cfg.URL, header)
	if err != nil {
		if resp != nil {
			return nil, WelcomePayload{}, fmt.Errorf("dial %s: %w (HTTP %d)", c.cfg.URL, err, resp.StatusCode)
		}
		return nil, WelcomePayload{}, fmt.Errorf("dial %s: %w", c.cfg.URL, err)
	}
	s := &session{conn: conn, wsem: make(chan struct{}, 1), lost: make(chan struct{}), readerDone: make(chan struct{})}
	w, err := c.join(ctx, s)
	if err != nil {
		conn.Close()
		return nil, WelcomePayload{}, err
	}
	s.started = time.Now()
	return s, w, nil
}

// join writes the join frame and reads until the welcome. Frames before the
// welcome (the reference gateway sends none) are dropped.
func (c *Client) join(ctx context.Context, s *session) (WelcomePayload, error) {
	// Cancellation interrupts a blocked read through the deadline; the
	// loop below never resets it.
	stop := context.AfterFunc(ctx, func() { s.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("join %s as %q: %s: %w", c.cfg.URL, c.cfg.ID, what, err)
	}

	frame, err := json.Marshal(JoinFrame{Type: "join", ParticipantID: c.cfg.ID, Space: c.cfg.Space, Token: c.cfg.Token})
	if err != nil {
		return WelcomePayload{}, fail("encode join frame", err)
	}
	deadline, _ := ctx.Deadline()
	s.conn.SetWriteDeadline(deadline)
	if err := s.conn.WriteMessage(websocket.TextMessage, frame); err != nil {
		return WelcomePayload{}, fail("write join frame", err)
	}
	st := newSpaceState(c.cfg.ID)
	for {
		env, ok, err := c.readEnvelope(s, 0)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return WelcomePayload{}, fmt.Errorf("join %s as %q: %w in time: %w", c.cfg.URL, c.cfg.ID, ErrNoWelcome, ctx.Err())
			}
			return WelcomePayload{}, fail("waiting for welcome", err)
		}
		if !ok {
			continue
		}
		if env.Kind != KindWelcome || !env.IsFromGateway() {
			c.log.Debug("dropping frame before welcome", slog.String("kind", env.Kind), slog.String("envelope", env.ID))
			continue
		}
		w, ok := st.acceptWelcome(&env)
		if !ok {
			return WelcomePayload{}, fmt.Errorf("join %s as %q: %w: the first welcome (%s, to %v) is not a usable welcome for us", c.cfg.URL, c.cfg.ID, ErrNoWelcome, env.ID, env.To)
		}
		if !stop() {
			return WelcomePayload{}, fmt.Errorf("join %s as %q: %w", c.cfg.URL, c.cfg.ID, ctx.Err())
		}
		c.stats.envelopes.Add(1)
		s.welcome = env
		return w, nil
	}
}

// start runs the session's reader and pinger.
func (s *session) start(c *Client) {
	idle := c.cfg.PingInterval + c.cfg.PongTimeout
	s.conn.SetPongHandler(func(string) error {
		return s.conn.SetReadDeadline(time.Now().Add(idle))
	})
	s.wg.Add(2)
	go c.readLoop(s, idle)
	go c.pingLoop(s)
}

// shutdown closes the socket and waits for the session's goroutines. It
// first asks the gateway to close and waits up to grace for its answer, so
// the gateway has let go of the session before we join again.
func (s *session) shutdown(grace time.Duration) {
	s.lose(ErrClosed)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	if s.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(grace)) == nil {
		t := time.NewTimer(grace)
		select {
		case <-s.readerDone:
		case <-t.C:
		}
		t.Stop()
	}
	s.conn.Close()
	s.wg.Wait()
}

// readLoop reads frames until the socket fails. The read deadline is set
// right before each NextReader (and pushed out by pongs and by data), never
// while an envelope waits for a slow subscriber.
func (c *Client) readLoop(s *session, idle time.Duration) {
	defer s.wg.Done()
	defer close(s.readerDone)
	for {
		env, ok, err := c.readEnvelope(s, idle)
		if err != nil {
			s.lose(fmt.Errorf("%w: read: %w", ErrSessionLost, err))
			return
		}
		if ok {
			c.handle(s, env)
		}
	}
}

// pingLoop pings the gateway, which never pings on its own; a missing pong
// lets the read deadline expire. It also probes an idle session (probe).
func (c *Client) pingLoop(s *session) {
	defer s.wg.Done()
	s.lastIn.Store(time.Now().UnixNano())
	every := c.cfg.PingInterval
	if c.cfg.ProbeAfter > 0 {
		every = min(every, c.cfg.ProbeAfter)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.lost:
			return
		case <-t.C:
			if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.cfg.WriteTimeout)); err != nil {
				s.lose(fmt.Errorf("%w: ping: %w", ErrSessionLost, err))
				return
			}
			c.probeIdle(s)
		}
	}
}

// probeIdle checks an idle session with an envelope to ourselves. A pong
// only proves the socket: the reference gateway hands a participant id
// to the last socket that joined with it and leaves the first one open,
// deaf (testdata/conformance/mew-v0.4/README.md, "Sessions"), so a
// fulfiller whose id someone else took would answer pings and never hear
// another proposal. The gateway echoes every envelope to its sender: no
// echo within PongTimeout means the session is gone, and the client
// joins again (taking the id back). Only an idle session is probed (any
// envelope read proves it), and only where our capabilities allow the
// probe: an mcp/request notification addressed to ourselves, which other
// participants ignore.
func (c *Client) probeIdle(s *session) {
	if c.cfg.ProbeAfter <= 0 {
		return
	}
	now := time.Now()
	if sent := s.probeSent.Load(); sent != 0 {
		if now.Sub(time.Unix(0, sent)) > c.cfg.PongTimeout {
			c.log.Error("the gateway did not echo our probe: this session no longer receives (another connection may have joined with our id); joining again")
			s.lose(fmt.Errorf("%w: no echo of our probe within %s", ErrSessionLost, c.cfg.PongTimeout))
		}
		return
	}
	if now.Sub(time.Unix(0, s.lastIn.Load())) < c.cfg.ProbeAfter || !c.Can(KindRequest, probePayload) {
		return
	}
	env := Envelope{ID: NewID(c.cfg.ID + "-probe"), To: []string{c.cfg.ID}, Kind: KindRequest, Payload: probePayload}
	Stamp(&env, c.cfg.ID, now)
	data, err := Encode(env)
	if err != nil {
		return
	}
	s.probe.Store(env.ID)
	s.probeSent.Store(now.UnixNano())
	c.sent.add(env.ID)
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	if err := s.write(ctx, data, c.cfg.WriteTimeout); err != nil {
		s.lose(fmt.Errorf("%w: probe: %w", ErrSessionLost, err))
	}
}

// probePayload is the probe's payload: a notification no MCP peer
// handles, so whoever sees it ignores it.
var probePayload = json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/fulfiller/probe"}`)

// heard notes an envelope read on s, and the echo of its probe.
func (s *session) heard(env *Envelope) {
	s.lastIn.Store(time.Now().UnixNano())
	if id, _ := s.probe.Load().(string); id != "" && env.ID == id {
		s.probeSent.Store(0)
	}
}

// readEnvelope reads one message with our own size limit. ok is false for
// frames that were skipped (binary, oversized, not an envelope); err is set
// only when the socket failed. With idle > 0 the read deadline is set to
// idle from now and pushed out while data arrives.
func (c *Client) readEnvelope(s *session, idle time.Duration) (env Envelope, ok bool, err error) {
	conn := s.conn
	if idle > 0 {
		conn.SetReadDeadline(time.Now().Add(idle))
	}
	typ, r, err := conn.NextReader()
	if err != nil {
		return Envelope{}, false, err
	}
	c.stats.framesIn.Add(1)
	if idle > 0 {
		r = &liveReader{r: r, conn: conn, idle: idle}
	}
	if typ == websocket.BinaryMessage {
		// Stream data (#stream-id#...): not for us.
		n, err := io.Copy(io.Discard, r)
		c.stats.binary.Add(1)
		c.log.Debug("skipped binary frame", slog.Int64("bytes", n))
		return Envelope{}, false, err
	}
	limit := c.cfg.MaxFrame
	s.frame.Reset()
	if _, err := s.frame.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return Envelope{}, false, err
	}
	read := int64(s.frame.Len())
	var data []byte
	if read <= limit {
		data = bytes.Clone(s.frame.Bytes()) // the envelope keeps it (Raw)
	}
	if s.frame.Cap() > maxKeptFrame {
		s.frame = bytes.Buffer{} // a big frame's room is not kept
	}
	if read > limit {
		// Drain instead of closing: the gateway broadcasts everyone's
		// frames, so one big frame must not knock us out of the space.
		n, err := io.Copy(io.Discard, r)
		c.stats.oversized.Add(1)
		c.log.Warn("discarded oversized frame", slog.Int64("bytes", read+n), slog.Int64("limit", limit))
		return Envelope{}, false, err
	}
	env, derr := Decode(data)
	if derr != nil {
		c.stats.malformed.Add(1)
		c.log.Warn("skipped frame that is not a MEW envelope", slog.Int("bytes", len(data)), slog.Any("error", derr))
		return Envelope{}, false, nil
	}
	return env, true, nil
}

// maxKeptFrame bounds the room a session keeps for reading frames: a
// frame larger than this is read into room of its own, let go after it.
const maxKeptFrame = 64 << 10

// liveReader pushes the read deadline out while a message's data keeps
// arriving, so a large frame on a slow link is not mistaken for silence.
type liveReader struct {
	r    io.Reader
	conn *websocket.Conn
	idle time.Duration
}

func (l *liveReader) Read(p []byte) (int, error) {
	l.conn.SetReadDeadline(time.Now().Add(l.idle))
	return l.r.Read(p)
}

// write sends one text frame. It waits for the write slot (bounded by ctx)
// and bounds the write itself by timeout. A failed write ends the session.
func (s *session) write(ctx context.Context, data []byte, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.lost:
		return errNotWritten
	default:
	}
	select {
	case s.wsem <- struct{}{}:
	case <-s.lost:
		return errNotWritten
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.wsem }()
	select {
	case <-s.lost:
		return errNotWritten
	default:
	}
	s.conn.SetWriteDeadline(time.Now().Add(timeout))
	if err := s.conn.WriteMessage(websocket.TextMessage, data); err != nil {
		err = fmt.Errorf("%w: write: %w", ErrSessionLost, err)
		s.lose(err)
		return err
	}
	return nil
}
