package space

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/mewkit/fulfiller/agent"
)

// Defaults for Config fields left zero.
const (
	DefaultSpaceID           = "fulfiller-lab"
	DefaultQueueSize         = 1024
	DefaultSlowClientTimeout = 2 * time.Second
)

// maxFrame is the ws library's default payload limit, which the reference
// gateway inherits; tests of oversized-frame handling need the space to
// relay frames well above fulfiller's own 1 MiB limit.
const maxFrame = 100 << 20

// Config describes the space. The zero value is a usable space named
// DefaultSpaceID in which everyone may chat, like a reference gateway with
// no token store.
type Config struct {
	// Addr is the address to listen on; empty means a free port of
	// 127.0.0.1. Tests that restart the gateway pass the URL's host:port
	// of the space they closed, so clients come back to the same address.
	Addr string
	// SpaceID is the space a join lands in when it names none, and the one
	// Participants and Tap look at. A join naming another space gets a
	// separate, empty space (traffic never crosses), as in the reference.
	SpaceID string
	// Tokens maps a join token to the capabilities it grants. The id a
	// participant asks for is not checked against its token, as in the
	// reference gateway.
	Tokens map[string][]agent.Capability
	// Default applies to unknown or missing tokens; nil means
	// [{kind:"chat"}], the reference's fallback.
	Default []agent.Capability
	// Logger receives the space's diagnostics; nil discards them.
	Logger *slog.Logger

	// QueueSize bounds each socket's outgoing queue (frames); 0 means
	// DefaultQueueSize. See the package doc for the slow-reader policy.
	QueueSize int
	// SlowClientTimeout is how long the space waits for a client with a
	// full queue, and how long one socket write may take, before it drops
	// that client as dead; 0 means DefaultSlowClientTimeout.
	SlowClientTimeout time.Duration
}

// Server is a running space. Its methods are safe for concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	caps     map[string]*capSet // by token
	defCaps  *capSet
	url      string
	started  time.Time
	hs       *http.Server
	upgrader websocket.Upgrader

	// mu orders everything the space routes: joins, envelopes and leaves
	// are queued to sockets and taps while holding it, which gives every
	// participant the same total order, as the single-threaded reference
	// gateway does.
	mu     sync.Mutex
	closed bool
	spaces map[string]*space
	conns  map[*conn]struct{}
	taps   map[*tap]struct{}

	stallMu sync.Mutex
	resume  chan struct{} // non-nil while stalled; closed to resume
	// turns holds the frames (and socket closes) read while stalled, in
	// the order they arrived, each waiting for its turn; see enter.
	turns []*turn

	wg sync.WaitGroup // the HTTP server and every request and socket goroutine
}

// New starts a space listening on a free port of 127.0.0.1, ready for
// clients when it returns, like httptest.NewServer.
func New(cfg Config) (*Server, error) {
	if cfg.QueueSize < 0 || cfg.SlowClientTimeout < 0 {
		return nil, errors.New("space: QueueSize and SlowClientTimeout must not be negative")
	}
	if cfg.SpaceID == "" {
		cfg.SpaceID = DefaultSpaceID
	}
	if cfg.Default == nil {
		cfg.Default = []agent.Capability{{Kind: agent.KindChat}}
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.SlowClientTimeout == 0 {
		cfg.SlowClientTimeout = DefaultSlowClientTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:     cfg,
		log:     log,
		caps:    make(map[string]*capSet, len(cfg.Tokens)),
		started: time.Now(),
		spaces:  make(map[string]*space),
		conns:   make(map[*conn]struct{}),
		taps:    make(map[*tap]struct{}),
		upgrader: websocket.Upgrader{
			// The reference gateway accepts any origin.
			CheckOrigin: func(*http.Request) bool { return true },
		},
	}
	var err error
	if s.defCaps, err = newCapSet(cfg.Default); err != nil {
		return nil, fmt.Errorf("space: default capabilities: %w", err)
	}
	for token, caps := range cfg.Tokens {
		if s.caps[token], err = newCapSet(caps); err != nil {
			return nil, fmt.Errorf("space: capabilities of a token: %w", err)
		}
	}

	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("space: listen: %w", err)
	}
	s.url = "ws://" + ln.Addr().String()
	s.hs = &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("space: serve", "err", err)
		}
	}()
	s.log.Info("space: listening", "url", s.url, "space", cfg.SpaceID)
	return s, nil
}

// URL is the address to give a MEW client. Any path may be appended: the
// reference gateway ignores it, and so does this space.
func (s *Server) URL() string { return s.url }

// Close stops the space: the listener, every socket (with a going-away close
// frame) and every goroutine the space started, which have all returned when
// Close returns. Taps are closed. Calling Close again does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := s.snapshotConnsLocked()
	for t := range s.taps {
		delete(s.taps, t)
		close(t.ch)
	}
	s.mu.Unlock()

	err := s.hs.Close()
	for _, c := range conns {
		c.closeGoingAway()
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("space: close: %w", err)
	}
	return nil
}

// DropAll closes every client socket abruptly, with no close frame, as when
// the gateway process dies (clients see 1006). The space keeps listening, so
// clients can reconnect and join again.
//
// Every session ends before DropAll returns, as it would with the process:
// were the leaves left to each socket's reader, a client that reconnects at
// once could join before its old socket's leave, which would then end the
// new session too (the duplicate-session rule in the package doc).
func (s *Server) DropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	conns := s.snapshotConnsLocked()
	for _, c := range conns {
		c.kill()
	}
	for _, c := range conns {
		s.leaveLocked(c)
	}
}

// Drop closes the sockets of one participant abruptly, as when its own
// link dies, and ends its session at once (presence leave); everyone else
// stays. It reports how many sockets it closed.
func (s *Server) Drop(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var conns []*conn
	for c := range s.conns {
		if c.id == id {
			conns = append(conns, c)
		}
	}
	for _, c := range conns {
		c.kill()
		s.leaveLocked(c)
	}
	return len(conns)
}

func (s *Server) snapshotConnsLocked() []*conn {
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// SetStalled makes the space behave like a hung gateway (true) or a healthy
// one again (false): while stalled it handles no frame from any socket and
// answers no pings, so clients' keepalive logic can be tested. Frames and
// socket closes that arrive meanwhile are handled after the stall ends,
// one at a time in the order they arrived, as the single-threaded reference
// would; pings that arrived meanwhile are never answered.
//
// The order matters to reconnecting clients: a client that gave up on the
// hung space closes its old socket and joins on a new one, and handling the
// new join before the old close would end the new session too (the
// reference's duplicate-session behaviour, see the package doc).
func (s *Server) SetStalled(stalled bool) {
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	switch {
	case stalled && s.resume == nil:
		s.resume = make(chan struct{})
	case !stalled && s.resume != nil:
		close(s.resume)
		s.resume = nil
		if len(s.turns) > 0 {
			s.turns[0].grant()
		}
	}
}

func (s *Server) stalled() bool {
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	return s.resume != nil
}

// turn is one frame (or socket close) read while the space was stalled or
// while earlier ones were still waiting.
type turn struct {
	ch      chan struct{} // closed when it is this frame's turn
	granted bool
}

func (t *turn) grant() {
	if !t.granted {
		t.granted = true
		close(t.ch)
	}
}

// enter is called after each read: it returns at once when the space runs
// and nothing read earlier is waiting (t is nil then); otherwise the frame
// queues behind everything read before it and enter blocks until the stall
// is over and its turn has come. The caller handles the frame and then
// calls done(t). ok is false, with the turn given up, when the socket is
// dropped (done closes) first.
func (s *Server) enter(done <-chan struct{}) (t *turn, ok bool) {
	s.stallMu.Lock()
	if s.resume == nil && len(s.turns) == 0 {
		s.stallMu.Unlock()
		return nil, true
	}
	t = &turn{ch: make(chan struct{})}
	s.turns = append(s.turns, t)
	if s.resume == nil && s.turns[0] == t {
		t.grant()
	}
	s.stallMu.Unlock()
	select {
	case <-t.ch:
		return t, true
	case <-done:
		s.done(t)
		return nil, false
	}
}

// done ends (or gives up) a turn and lets the next frame go.
func (s *Server) done(t *turn) {
	if t == nil {
		return
	}
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	i := slices.Index(s.turns, t)
	if i < 0 {
		return
	}
	s.turns = slices.Delete(s.turns, i, i+1)
	if i == 0 && s.resume == nil && len(s.turns) > 0 {
		s.turns[0].grant()
	}
}

// Participants lists the ids connected to the default space, sorted, so a
// test can wait until everyone it started has joined. Ghosts left behind by
// a second join on one socket are not listed once their socket is gone.
func (s *Server) Participants() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spaces[s.cfg.SpaceID]
	if sp == nil {
		return []string{}
	}
	ids := make([]string, 0, len(sp.order))
	for _, id := range sp.order {
		if sp.members[id].c.open() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// tap is one Tap subscription.
type tap struct {
	ch chan []byte
}

// Tap lets an end-to-end test see what the default space broadcasts: every
// relayed envelope (once, not once per recipient), presence frame and stream
// frame, as the exact bytes sent, in delivery order. Welcomes and errors are
// not on the tap; they go to one socket only.
//
// The channel holds buffer frames; when the test falls behind, further
// frames are dropped from the tap (and logged) rather than holding up the
// space. stop ends the subscription and closes the channel; Close does too.
func (s *Server) Tap(buffer int) (frames <-chan []byte, stop func()) {
	t := &tap{ch: make(chan []byte, max(buffer, 0))}
	s.mu.Lock()
	if s.closed {
		close(t.ch)
	} else {
		s.taps[t] = struct{}{}
	}
	s.mu.Unlock()
	return t.ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.taps[t]; ok {
			delete(s.taps, t)
			close(t.ch)
		}
	}
}

// tapLocked offers a broadcast frame of space sp to the taps.
func (s *Server) tapLocked(sp *space, frame []byte) {
	if len(s.taps) == 0 || sp.id != s.cfg.SpaceID {
		return
	}
	for t := range s.taps {
		select {
		case t.ch <- slices.Clone(frame):
		default:
			s.log.Warn("space: tap full, frame dropped from the tap", "cap", cap(t.ch))
		}
	}
}

// track runs an HTTP handler as a goroutine Close waits for, and refuses
// requests once the space is closing.
func (s *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			http.Error(w, "space closed", http.StatusServiceUnavailable)
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		defer s.wg.Done()
		h.ServeHTTP(w, r)
	})
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.serveHealth)
	mux.HandleFunc("GET /participants", s.serveParticipants)
	mux.HandleFunc("POST /participants/{id}/messages", s.servePost)
	return s.track(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The reference gateway upgrades on any path.
		if websocket.IsWebSocketUpgrade(r) {
			s.serveWS(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// capsFor resolves a join token; unknown and missing tokens get the default.
func (s *Server) capsFor(token string) *capSet {
	if cs, ok := s.caps[token]; ok && token != "" {
		return cs
	}
	return s.defCaps
}
