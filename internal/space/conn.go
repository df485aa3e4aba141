package space

import (
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// outFrame is one WebSocket message waiting in a socket's queue.
type outFrame struct {
	typ  int
	data []byte
}

// conn is one client socket. Its reader runs in the HTTP handler goroutine
// and its writer in a goroutine of its own; the space only ever queues
// frames to it, so a socket that writes slowly delays nobody but itself
// until its queue is full (see send).
type conn struct {
	ws      *websocket.Conn
	out     chan outFrame
	done    chan struct{} // closed when the socket is finished
	once    sync.Once
	timeout time.Duration

	// Session state, guarded by Server.mu. id is the id of the latest join
	// on this socket; sp is nil until the first join.
	id   string
	sp   *space
	left bool // its leave was announced
}

func (c *conn) open() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// kill closes the socket without a close frame, as a dead link would.
func (c *conn) kill() {
	c.once.Do(func() {
		close(c.done)
		c.ws.Close()
	})
}

// closeGoingAway says goodbye with a close frame, then closes the socket.
func (c *conn) closeGoingAway() {
	msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "space closed")
	_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(100*time.Millisecond))
	c.kill()
}

// send queues a frame for the socket. A full queue is given the slow-client
// timeout to drain; after that the client is dropped like a dead link rather
// than holding up the whole space (the caller holds Server.mu). It reports
// whether the frame was queued.
func (c *conn) send(typ int, data []byte) bool {
	f := outFrame{typ: typ, data: data}
	select {
	case c.out <- f:
		return true
	case <-c.done:
		return false
	default:
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case c.out <- f:
		return true
	case <-c.done:
		return false
	case <-t.C:
		c.kill()
		return false
	}
}

// writeLoop sends queued frames until the socket is finished. A write that
// cannot finish within the slow-client timeout drops the client.
func (c *conn) writeLoop() {
	for {
		select {
		case <-c.done:
			return
		case f := <-c.out:
			_ = c.ws.SetWriteDeadline(time.Now().Add(c.timeout))
			if err := c.ws.WriteMessage(f.typ, f.data); err != nil {
				c.kill()
				return
			}
		}
	}
}

// serveWS runs one client socket from upgrade to leave.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		s.log.Debug("space: upgrade failed", "err", err)
		return // the upgrader has answered the request
	}
	c := &conn{
		ws:      ws,
		out:     make(chan outFrame, s.cfg.QueueSize),
		done:    make(chan struct{}),
		timeout: s.cfg.SlowClientTimeout,
	}
	ws.SetReadLimit(maxFrame)
	ws.SetCloseHandler(func(code int, _ string) error {
		if s.stalled() {
			return nil // a hung gateway answers nothing
		}
		// As gorilla's default handler: echo the close code.
		msg := []byte{}
		if code != websocket.CloseNoStatusReceived {
			msg = websocket.FormatCloseMessage(code, "")
		}
		_ = ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		return nil
	})
	ws.SetPingHandler(func(data string) error {
		if s.stalled() {
			return nil // a hung gateway answers nothing
		}
		// Errors are left to the next read or write to notice, as in
		// gorilla's default handler.
		_ = ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		return nil
	})

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()

	t := s.readLoop(c)

	c.kill()
	<-writerDone
	s.mu.Lock()
	delete(s.conns, c)
	s.leaveLocked(c)
	s.mu.Unlock()
	s.done(t) // the leave took its turn among frames read during a stall
}

// readLoop handles the socket's frames in order until it fails or closes.
// A stalled space keeps reading (so it knows the order frames arrived in)
// but handles nothing until the stall ends; see enter. When the socket
// closed while the space was stalled, readLoop returns the turn that the
// leave must take.
func (s *Server) readLoop(c *conn) *turn {
	for {
		_, data, err := c.ws.ReadMessage()
		t, ok := s.enter(c.done)
		if !ok {
			return nil
		}
		if err != nil {
			s.log.Debug("space: socket finished", "id", c.idForLog(), "err", err)
			return t
		}
		s.handleFrame(c, data)
		s.done(t)
	}
}

func (c *conn) idForLog() string {
	if c.id == "" {
		return "(not joined)"
	}
	return c.id
}
