package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by the Client. They are wrapped with context, so compare
// with errors.Is.
var (
	// ErrClosed means the Client was closed; nothing more will be sent or
	// received.
	ErrClosed = errors.New("agent: client closed")
	// ErrNotPermitted means our own capabilities (from the latest welcome)
	// do not allow the envelope, so it was not sent: the gateway would
	// only answer with a capability violation.
	ErrNotPermitted = errors.New("not permitted by own capabilities")
	// ErrSessionLost means the session ended while a write was under way;
	// the envelope may or may not have reached the gateway. The Client
	// reconnects by itself; the caller decides whether to send again.
	ErrSessionLost = errors.New("session lost")
	// ErrNoWelcome means the gateway did not welcome us in time, or
	// welcomed someone else.
	ErrNoWelcome = errors.New("no welcome from gateway")
	// ErrNoRPCID means no JSON-RPC id could be had from Config.RPCIDs (the
	// state store did not answer), so the request was not sent: sending
	// it with an id that may have been used before is worse (rule 11).
	ErrNoRPCID = errors.New("no JSON-RPC id available")
)

// Defaults for zero Config fields.
const (
	DefaultMaxFrame     = 1 << 20
	DefaultJoinTimeout  = 10 * time.Second
	DefaultPingInterval = 15 * time.Second
	DefaultProbeAfter   = 60 * time.Second
	DefaultPongTimeout  = 10 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultBackoffMin   = 100 * time.Millisecond
	DefaultBackoffMax   = 30 * time.Second
	// DefaultOutboxSize bounds the envelopes kept for re-sending after a
	// reconnect (see SendOrQueue) when Config.Outbox is nil.
	DefaultOutboxSize = 4096
)

// Config says where and as whom to join. Zero durations and sizes take the
// defaults above.
type Config struct {
	URL   string // ws://host:port[/path]; the reference gateway ignores path and query
	Space string // optional; sent in the join frame
	Token string // never logged
	ID    string // participant id, e.g. "fulfiller"

	MaxFrame     int64         // read limit per frame; default 1 MiB
	JoinTimeout  time.Duration // dial, join and wait for the welcome; default 10s
	PingInterval time.Duration // default 15s
	PongTimeout  time.Duration // default 10s: no pong within this after a ping => session lost
	// ProbeAfter [60s; negative: never] is how long a session may read
	// nothing before the client sends itself a probe envelope, whose echo
	// must come within PongTimeout (see probeIdle).
	ProbeAfter   time.Duration
	WriteTimeout time.Duration // deadline of each frame written; default 10s

	// BackoffMin and BackoffMax shape the reconnect schedule (see
	// ReconnectDelay); defaults 100ms / 30s.
	BackoffMin, BackoffMax time.Duration
	// Jitter returns a number in [0, 1) that places each reconnect wait
	// within its jitter band; nil uses math/rand. Tests fix it to make the
	// schedule deterministic.
	Jitter func() float64
	// Outbox keeps envelopes given to SendOrQueue that could not be
	// written, until the next session; nil keeps up to DefaultOutboxSize
	// in memory.
	Outbox Outbox
	// RPCIDs hands out the JSON-RPC ids of every request sent through the
	// Client (docs/design.md rule 11: no peer sees an id twice). nil counts from 1
	// in this process. A group of fulfillers passes its state store's
	// NextRPCID, unique across the group and its restarts. An error (or an
	// id outside 1..2^53-1) means no id: the request is not sent
	// (ErrNoRPCID), and no id is ever reused instead.
	RPCIDs func(ctx context.Context) (int64, error)

	Logger *slog.Logger // default discard
}

// LogValue keeps the token out of logs even when a whole Config is logged.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", c.URL),
		slog.String("space", c.Space),
		slog.String("id", c.ID),
		slog.Bool("token_set", c.Token != ""),
	)
}

// String keeps the token out of fmt output.
func (c Config) String() string {
	return fmt.Sprintf("agent.Config{URL:%q Space:%q ID:%q Token:%s}", c.URL, c.Space, c.ID, redacted(c.Token))
}

// GoString keeps the token out of %#v output.
func (c Config) GoString() string { return c.String() }

func redacted(s string) string {
	if s == "" {
		return `""`
	}
	return "[redacted]"
}

func (c *Config) setDefaults() error {
	if c.ID == "" {
		return errors.New("agent: participant id is required")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("agent: gateway URL: %w", err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return fmt.Errorf("agent: gateway URL %q: scheme must be ws or wss", c.URL)
	}
	if u.Host == "" {
		return fmt.Errorf("agent: gateway URL %q has no host", c.URL)
	}
	c.URL = u.String()
	setDefault(&c.MaxFrame, DefaultMaxFrame)
	setDefault(&c.JoinTimeout, DefaultJoinTimeout)
	setDefault(&c.PingInterval, DefaultPingInterval)
	if c.ProbeAfter == 0 {
		c.ProbeAfter = DefaultProbeAfter // negative: never
	}
	setDefault(&c.PongTimeout, DefaultPongTimeout)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.BackoffMin, DefaultBackoffMin)
	setDefault(&c.BackoffMax, DefaultBackoffMax)
	c.BackoffMax = max(c.BackoffMax, c.BackoffMin)
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.Outbox == nil {
		c.Outbox = NewMemoryOutbox(DefaultOutboxSize)
	}
	if c.RPCIDs == nil {
		var seq atomic.Int64
		c.RPCIDs = func(context.Context) (int64, error) { return seq.Add(1), nil }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func setDefault[T int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Stats are counters since Dial. They exist so operators can see frames
// the client chose not to deliver (and why) without raising log levels.
type Stats struct {
	FramesIn     uint64 // WebSocket messages read, of any type or size
	Envelopes    uint64 // envelopes received from others, welcomes included (own echoes excluded)
	Delivered    uint64 // envelopes handed to subscriptions (one per subscription)
	Echoes       uint64 // our own envelopes coming back from the gateway, dropped
	Malformed    uint64 // text frames that were not MEW envelopes, skipped
	Binary       uint64 // binary frames (stream data), skipped
	Oversized    uint64 // frames over MaxFrame, discarded unread
	SessionsLost uint64 // sessions that ended for any reason but Close
	Reconnects   uint64 // sessions re-established after a loss
	// ReconnectAttempts counts every attempt to re-establish a session,
	// failed ones included: with one loss, it is the attempt that
	// succeeded.
	ReconnectAttempts uint64
	Sends             uint64 // envelopes written
	// Refused counts system/error frames by which the gateway refused an
	// envelope we wrote (correlated to its id; see RefusalOf).
	Refused uint64
	// ForgedErrors counts system/error frames that named an envelope of
	// ours the gateway had already accepted (we saw its echo): someone
	// else wrote them, so they were dropped.
	ForgedErrors uint64
	// Impersonations counts envelopes in our name that we did not write
	// (see SubscribeOptions.Impersonations).
	Impersonations uint64
	// Queued counts envelopes SendOrQueue kept for a later session;
	// Resent those of them written after a reconnect.
	Queued, Resent uint64
}

type counters struct {
	framesIn, envelopes, delivered, echoes, malformed, binary, oversized atomic.Uint64
	sessionsLost, reconnects, attempts, sends                            atomic.Uint64
	refused, forged, queued, resent, impersonations                      atomic.Uint64
}

// Client is one participant's presence in a MEW space. It keeps the session
// alive, reconnects after a loss, tracks the roster and routes received
// envelopes to subscriptions. All methods are safe for concurrent use.
//
// Backpressure: subscription channels are bounded. When a subscription's
// buffer is full, the receive loop waits for it: envelopes are neither
// dropped nor queued without bound, and nothing else is read (including
// answers to Request) until the consumer catches up or closes the
// subscription. A consumer must therefore not wait on a Request while its
// own subscription may be full. While the loop waits, liveness checks are
// paused, so a slow consumer is never taken for a dead link.
type Client struct {
	cfg   Config
	log   *slog.Logger
	stats counters

	ctx    context.Context // cancelled by Close; bounds reconnects
	cancel context.CancelFunc
	wg     sync.WaitGroup // the supervisor goroutine

	pending pendingCalls
	sent    sentLog       // recently written envelope ids, to tell refusals from forgeries
	kick    chan struct{} // a queued envelope waits for the outbox to be flushed

	mu     sync.Mutex
	state  *spaceState
	sess   *session      // nil while there is no welcomed session
	ready  chan struct{} // closed while sess != nil
	subs   []*Subscription
	closed bool
}

// Dial connects, joins and waits for the welcome, so that a returned Client
// knows its capabilities and the roster. ctx bounds only this first
// connection; afterwards background goroutines keep the session alive and
// reconnect until Close.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c, _, err := DialSubscribed(ctx, cfg)
	return c, err
}

// DialSubscribed is Dial with subscriptions (one per opts, in order) that
// exist before the first envelope after the welcome is read. With Dial and
// then Subscribe, envelopes that arrive in between are not delivered: a
// participant that others answer as soon as it appears (the fulfiller
// re-sends an open prompt when an approver joins) must subscribe this way.
func DialSubscribed(ctx context.Context, cfg Config, opts ...SubscribeOptions) (*Client, []*Subscription, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, nil, err
	}
	c := &Client{
		cfg:   cfg,
		log:   cfg.Logger.With(slog.String("participant", cfg.ID), slog.String("gateway", cfg.URL)),
		state: newSpaceState(cfg.ID),
		ready: make(chan struct{}),
		sent:  newSentLog(sentLogSize),
		kick:  make(chan struct{}, 1),
	}
	c.pending.m = map[string]*call{}
	s, w, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.install(s, w)
	c.log.Info("joined space", slog.Any("capabilities", capKinds(w.You.Capabilities)), slog.Any("others", rosterIDs(c.Roster())))
	subs := make([]*Subscription, len(opts))
	for i, o := range opts {
		subs[i] = c.Subscribe(o) // before supervise starts the session's reader
	}
	c.wg.Add(1)
	go c.supervise(s)
	return c, subs, nil
}

// Close leaves the space: it closes the socket, stops every goroutine the
// Client started, closes all subscription channels and makes waiting Send
// and Request calls return ErrClosed. It is safe to call more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	subs := c.subs
	c.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	if n := c.cfg.Outbox.Len(); n > 0 {
		c.log.Warn("left space with envelopes never sent", slog.Int("unsent", n))
		return nil
	}
	c.log.Info("left space")
	return nil
}

// ID returns our participant id; envelopes we send carry it as from.
func (c *Client) ID() string { return c.cfg.ID }

// Capabilities returns our own capabilities from the latest welcome, so
// callers can explain why something is not permitted.
func (c *Client) Capabilities() []Capability {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cloneCaps(c.state.caps)
}

// Can reports whether our own capabilities permit sending an envelope of
// this kind and payload, so callers can decide before building one.
func (c *Client) Can(kind string, payload json.RawMessage) bool {
	c.mu.Lock()
	caps := c.state.caps // replaced, never modified in place
	c.mu.Unlock()
	return Permits(caps, kind, payload)
}

// Roster returns the other participants present, sorted by id. The
// entries are copies. It may include ghosts the gateway never announced
// leaving (see testdata/conformance/mew-v0.4/README.md on re-join).
func (c *Client) Roster() []Participant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.roster()
}

// Participant looks up one other participant, for routing and for policy
// input about the proposer.
func (c *Client) Participant(id string) (Participant, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.participant(id)
}

// Connected reports whether there is a live, welcomed session right now;
// readiness checks use it.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess != nil
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		FramesIn:     s.framesIn.Load(),
		Envelopes:    s.envelopes.Load(),
		Delivered:    s.delivered.Load(),
		Echoes:       s.echoes.Load(),
		Malformed:    s.malformed.Load(),
		Binary:       s.binary.Load(),
		Oversized:    s.oversized.Load(),
		SessionsLost: s.sessionsLost.Load(),
		Reconnects:   s.reconnects.Load(),
		Sends:        s.sends.Load(),

		ReconnectAttempts: s.attempts.Load(),
		Refused:           s.refused.Load(),
		ForgedErrors:      s.forged.Load(),
		Impersonations:    s.impersonations.Load(),
		Queued:            s.queued.Load(),
		Resent:            s.resent.Load(),
	}
}

// Send stamps env (protocol, a unique id unless one is set, ts, from),
// refuses a from other than our id, refuses it with ErrNotPermitted when our capabilities do not allow it,
// waits for a live session if the Client is reconnecting (bounded by ctx),
// and writes it. It returns the envelope as sent.
//
// An envelope is written at most once: if the session is lost during the
// write, Send returns an error wrapping ErrSessionLost and does not retry.
func (c *Client) Send(ctx context.Context, env Envelope) (Envelope, error) {
	if env.Kind == "" {
		return env, errors.New("send: envelope has no kind")
	}
	if env.From != "" && env.From != c.cfg.ID {
		// The gateway would pass a forged from through; we do not forge.
		return env, fmt.Errorf("send %s: from %q is not our id %q", env.Kind, env.From, c.cfg.ID)
	}
	Stamp(&env, c.cfg.ID, time.Now())
	if !c.Can(env.Kind, env.Payload) {
		return env, fmt.Errorf("send %s: %w", env.Kind, ErrNotPermitted)
	}
	if err := checkRPCID(env); err != nil {
		return env, err
	}
	data, err := Encode(env)
	if err != nil {
		return env, fmt.Errorf("send %s: encode: %w", env.Kind, err)
	}
	for {
		s, err := c.session(ctx)
		if err != nil {
			return env, fmt.Errorf("send %s %s: %w", env.Kind, env.ID, err)
		}
		// The capabilities may have changed with a new session's welcome.
		if !c.Can(env.Kind, env.Payload) {
			return env, fmt.Errorf("send %s: %w", env.Kind, ErrNotPermitted)
		}
		// Recorded before the write: the echo may be read before the
		// write returns.
		c.sent.add(env.ID)
		err = s.write(ctx, data, c.cfg.WriteTimeout)
		if errors.Is(err, errNotWritten) {
			continue // lost before anything was written: wait for the next session
		}
		if err != nil {
			return env, fmt.Errorf("send %s %s: %w", env.Kind, env.ID, err)
		}
		c.stats.sends.Add(1)
		return env, nil
	}
}

// SendOrQueue is Send for envelopes that must reach the gateway even when
// the link is down when they are due, and that do no harm if they arrive
// twice (MCP notifications/cancelled: a receiver ignores a cancellation
// of a request it does not know). When there is no live session, or the
// write fails, env is kept in the outbox and written after the next
// reconnect, with the same id and bytes; queued is true then. The error
// is set only when env can never be sent (no kind, a forged from, not
// permitted by our capabilities, the Client closed).
func (c *Client) SendOrQueue(ctx context.Context, env Envelope) (sent Envelope, queued bool, err error) {
	if env.Kind == "" {
		return env, false, errors.New("send: envelope has no kind")
	}
	if env.From != "" && env.From != c.cfg.ID {
		return env, false, fmt.Errorf("send %s: from %q is not our id %q", env.Kind, env.From, c.cfg.ID)
	}
	Stamp(&env, c.cfg.ID, time.Now())
	if !c.Connected() {
		if !c.Can(env.Kind, env.Payload) {
			return env, false, fmt.Errorf("send %s: %w", env.Kind, ErrNotPermitted)
		}
		if err := checkRPCID(env); err != nil {
			return env, false, err
		}
		return env, true, c.enqueue(env)
	}
	sent, err = c.Send(ctx, env)
	switch {
	case err == nil:
		return sent, false, nil
	case errors.Is(err, ErrNotPermitted), errors.Is(err, ErrClosed), errors.Is(err, ErrNoRPCID):
		return sent, false, err
	}
	c.log.Info("envelope kept for re-sending after a reconnect", slog.String("kind", env.Kind), slog.String("envelope", env.ID), slog.Any("error", err))
	return sent, true, c.enqueue(sent)
}

// enqueue keeps env for the supervisor to write on the next live session.
func (c *Client) enqueue(env Envelope) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("send %s %s: %w", env.Kind, env.ID, ErrClosed)
	}
	c.cfg.Outbox.Put(env)
	c.stats.queued.Add(1)
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// Queued reports how many envelopes wait in the outbox for a session. At
// Close they are given up: callers that must account for undelivered
// messages read it before closing.
func (c *Client) Queued() int { return c.cfg.Outbox.Len() }

// flush writes what the outbox holds on s, oldest first. What cannot be
// written goes back for the next session; what our capabilities no longer
// permit is dropped and logged.
func (c *Client) flush(s *session) {
	envs := c.cfg.Outbox.Take()
	done := func(Envelope) {}
	if d, ok := c.cfg.Outbox.(OutboxDoner); ok {
		done = d.Done
	}
	for i, env := range envs {
		if !c.Can(env.Kind, env.Payload) {
			c.log.Warn("kept envelope dropped: no longer permitted by our capabilities", slog.String("kind", env.Kind), slog.String("envelope", env.ID))
			done(env)
			continue
		}
		data, err := Encode(env)
		if err != nil {
			c.log.Warn("kept envelope dropped", slog.String("envelope", env.ID), slog.Any("error", err))
			done(env)
			continue
		}
		c.sent.add(env.ID)
		if err := s.write(c.ctx, data, c.cfg.WriteTimeout); err != nil {
			// Also when the write may have gone out: these envelopes are
			// safe to repeat, and losing one is worse.
			for _, rest := range envs[i:] {
				c.cfg.Outbox.Put(rest)
			}
			return
		}
		done(env)
		c.stats.sends.Add(1)
		c.stats.resent.Add(1)
		c.log.Info("kept envelope sent after the reconnect", slog.String("kind", env.Kind), slog.String("envelope", env.ID))
	}
}

// session returns the live session, waiting for one while reconnecting.
func (c *Client) session(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		s, ready, closed := c.sess, c.ready, c.closed
		c.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case s != nil:
			return s, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for session: %w", ctx.Err())
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// install makes s the live session with the state its welcome describes.
func (c *Client) install(s *session, w WelcomePayload) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.reset(w)
	c.sess = s
	close(c.ready)
}

// uninstall marks the Client as reconnecting; Sends wait from now on.
func (c *Client) uninstall(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == s {
		c.sess = nil
		c.ready = make(chan struct{})
	}
}

// supervise owns the live session: it runs it until it is lost, then closes
// the old socket and reconnects with backoff, until Close. It also writes
// the outbox (SendOrQueue) whenever a session is live.
func (c *Client) supervise(s *session) {
	defer c.wg.Done()
	attempt := 0
	for {
		s.start(c)
		c.flush(s)
	live:
		for {
			select {
			case <-c.kick:
				c.flush(s)
			case <-s.lost:
				break live
			case <-c.ctx.Done():
				c.uninstall(s)
				s.shutdown(c.closeGrace())
				return
			}
		}
		c.uninstall(s)
		c.stats.sessionsLost.Add(1)
		c.log.Warn("session lost, reconnecting", slog.Any("reason", s.reason()))
		// Close the old socket before joining again: the gateway ties the
		// id to one session, and a late close of the old socket would end
		// the new one too.
		s.shutdown(c.closeGrace())
		if time.Since(s.started) >= c.cfg.BackoffMax {
			attempt = 0 // it was stable; do not carry old failures over
		}
		for {
			if !c.sleep(ReconnectDelay(attempt, c.cfg.BackoffMin, c.cfg.BackoffMax, c.cfg.Jitter())) {
				return
			}
			attempt++
			c.stats.attempts.Add(1)
			ns, w, err := c.connect(c.ctx)
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				c.log.Warn("reconnect failed", slog.Int("attempt", attempt), slog.Any("error", err))
				continue
			}
			c.install(ns, w)
			c.stats.reconnects.Add(1)
			c.log.Info("session re-established", slog.Int("attempt", attempt),
				slog.Any("capabilities", capKinds(w.You.Capabilities)), slog.Any("others", rosterIDs(c.Roster())))
			// Subscribers of system/welcome learn about the new session
			// from its welcome.
			c.dispatch(ns.welcome)
			s = ns
			break
		}
	}
}

// FastRetries is how many reconnect attempts after a loss wait only about
// BackoffMin: a gateway restart takes a second or two, and a fulfiller
// that is away longer misses proposals and approval deadlines.
const FastRetries = 3

// ReconnectDelay is the wait before reconnect attempt n (0 for the first
// after a loss). The first FastRetries attempts wait about lo; after that
// the wait doubles per attempt (2·lo, 4·lo, …) up to hi. jitter, in
// [0, 1), places the wait uniformly within ±25% of that value, so that
// participants dropped together do not all come back at once. With the
// defaults (100ms, 30s) the waits are about 100, 100, 100, 200, 400,
// 800ms, … 30s: a 1.5s outage is over by the sixth attempt, about 1.7s
// after the loss.
func ReconnectDelay(n int, lo, hi time.Duration, jitter float64) time.Duration {
	d := lo
	for i := FastRetries; i <= n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	jitter = min(max(jitter, 0), 1)
	return time.Duration(float64(d) * (0.75 + jitter/2))
}

// sleep waits d unless the Client closes first.
func (c *Client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// closeGrace bounds how long a closing socket waits for the gateway to
// confirm the close.
func (c *Client) closeGrace() time.Duration {
	return min(time.Second, c.cfg.PongTimeout)
}

// handle processes one envelope from the gateway.
func (c *Client) handle(s *session, env Envelope) {
	s.heard(&env)
	if env.From == c.cfg.ID {
		if c.sent.echoed(env.ID) {
			c.stats.echoes.Add(1)
			return
		}
		// The gateway echoes each envelope we write once: one we never
		// wrote, or a second echo, was written by someone else in our
		// name. Subscribers that asked for them judge it.
		c.stats.impersonations.Add(1)
		c.log.Warn("an envelope in our name that we did not send (impersonation)",
			slog.String("envelope", env.ID), slog.String("kind", env.Kind))
		c.dispatch(env)
		return
	}
	c.stats.envelopes.Add(1)
	if r, ok := RefusalOf(env, c.cfg.ID); ok {
		switch c.sent.state(r.EnvelopeID) {
		case sentEchoed:
			// The gateway broadcasts an accepted envelope to its sender
			// before anyone else can react to it, and never refuses what
			// it accepted: this error was written by another participant
			// (the gateway passes a forged from through).
			c.stats.forged.Add(1)
			c.log.Warn("ignored a forged system/error about an envelope the gateway accepted",
				slog.String("envelope", r.EnvelopeID), slog.String("error_envelope", env.ID), slog.String("error", r.Error.Error))
			return
		case sentWritten:
			c.stats.refused.Add(1)
			c.log.Warn("the gateway refused an envelope we sent", slog.String("envelope", r.EnvelopeID),
				slog.String("kind", r.Error.AttemptedKind), slog.String("error", r.Error.Error))
		}
	}
	c.mu.Lock()
	eff := c.state.observe(&env)
	c.mu.Unlock()
	if eff.welcome {
		c.log.Info("welcome received", slog.String("envelope", env.ID))
	}
	if env.Kind == KindResponse {
		c.pending.resolve(env, c.log)
	}
	c.dispatch(env)
	if eff.lost != "" {
		s.lose(fmt.Errorf("%w: %s", ErrSessionLost, eff.lost))
	}
}
