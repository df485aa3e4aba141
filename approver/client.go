package approver

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
)

// Conn is what the Client needs of the approver's MEW session;
// *agent.Client has it.
type Conn interface {
	ID() string
	Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error)
}

// UI is how the person sees cards and answers them. Ask shows one card and
// returns the answer; its ctx ends when the card is withdrawn (the
// fulfiller cancelled it or its deadline passed) or the client stops, and
// Ask must then return promptly. Dropped and Sent report what happened to a
// card afterwards. The Client calls Ask for one card at a time; Dropped may
// be called for a queued card while Ask shows another.
type UI interface {
	Ask(ctx context.Context, c *Card) (Answer, error)
	Dropped(c *Card, reason string)
	Sent(c *Card, a Answer, err error)
}

// ErrQuit is returned by a UI's Ask when the person wants to stop; Run then
// returns nil.
var ErrQuit = errors.New("quit")

// Options tune a Client.
type Options struct {
	// Key signs every answer; nil sends them unsigned (fine only where the
	// fulfiller has no key for this approver).
	Key ed25519.PrivateKey
	// Fulfiller is the participant whose elicitations are shown
	// [fulfiller]. Requests from anyone else are ignored and logged: the
	// gateway does not authenticate from, but a stranger's card should at
	// least not look like the fulfiller's.
	Fulfiller string
	// Limit stops Run after this many answers; 0 means no limit.
	Limit int
	// Remember is how many sent answers are kept to be sent again when
	// the fulfiller asks the same question again after a reconnect [256].
	// An answer is forgotten sooner when its prompt's deadline passes.
	Remember int
	Logger   *slog.Logger     // [discard]
	Now      func() time.Time // [time.Now]
}

// Client shows the elicitations addressed to one approver, one card at a
// time in arrival order, and answers them. Each question is shown once: the
// fulfiller asks again, byte for byte, after a link was lost, and the
// Client then re-sends the answer it recorded (Options.Remember) rather
// than ask the person twice.
type Client struct {
	conn Conn
	ui   UI
	opts Options
	log  *slog.Logger
}

// New makes a Client. Feed it envelopes with Run.
func New(conn Conn, ui UI, opts Options) *Client {
	if opts.Fulfiller == "" {
		opts.Fulfiller = "fulfiller"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Remember <= 0 {
		opts.Remember = 256
	}
	return &Client{conn: conn, ui: ui, opts: opts, log: opts.Logger}
}

// asking is the card being shown.
type asking struct {
	card   *Card
	cancel context.CancelCauseFunc
	done   chan askResult
}

type askResult struct {
	a   Answer
	err error
}

// errWithdrawn is the cause of a card's context when the fulfiller
// cancelled it.
type errWithdrawn struct{ reason string }

func (e errWithdrawn) Error() string { return "withdrawn: " + e.reason }

// Run handles the requests addressed to this approver (subscribe to
// mcp/request and pass the channel) until ctx ends, in is closed, the UI
// quits or Limit answers were sent.
func (c *Client) Run(ctx context.Context, in <-chan agent.Envelope) error {
	var queue []*Card
	seen := newSeenPrompts(seenLimit)
	mem := &memory{max: c.opts.Remember, now: c.opts.Now}
	var cur *asking
	answered := 0

	stopCurrent := func(cause error) {
		if cur == nil {
			return
		}
		cur.cancel(cause)
		<-cur.done
		cur = nil
	}
	defer stopCurrent(context.Canceled)

	for {
		if cur == nil {
			for len(queue) > 0 && cur == nil {
				card := queue[0]
				queue = queue[1:]
				if dl := card.Deadline(); !dl.IsZero() && !c.opts.Now().Before(dl) {
					c.ui.Dropped(card, "the deadline passed")
					continue
				}
				cur = c.ask(ctx, card)
			}
		}
		var done chan askResult
		if cur != nil {
			done = cur.done
		}
		select {
		case <-ctx.Done():
			return nil
		case env, ok := <-in:
			if !ok {
				return nil
			}
			card, cancelled, reason := c.receive(ctx, env, seen, mem)
			switch {
			case card != nil:
				queue = append(queue, card)
			case cancelled != "" && cur != nil && cur.card.RequestID == cancelled:
				card := cur.card
				stopCurrent(errWithdrawn{reason})
				c.ui.Dropped(card, reason)
			case cancelled != "":
				if i := slices.IndexFunc(queue, func(q *Card) bool { return q.RequestID == cancelled }); i >= 0 {
					card := queue[i]
					queue = slices.Delete(queue, i, i+1)
					c.ui.Dropped(card, reason)
				}
			}
		case r := <-done:
			card := cur.card
			cur = nil
			var withdrawn errWithdrawn
			switch {
			case errors.Is(r.err, ErrQuit):
				return nil
			case errors.As(r.err, &withdrawn):
				// Dropped was reported where it was cancelled.
			case errors.Is(r.err, context.DeadlineExceeded):
				c.ui.Dropped(card, "the deadline passed")
			case r.err != nil:
				if ctx.Err() != nil {
					return nil
				}
				c.log.Warn("card not answered", "request", card.RequestID, "err", r.err)
			default:
				err := c.respond(ctx, card, r.a, mem)
				c.ui.Sent(card, r.a, err)
				if err == nil {
					answered++
					if c.opts.Limit > 0 && answered >= c.opts.Limit {
						return nil
					}
				}
			}
		}
	}
}

// ask shows card in its own goroutine, with a context that ends at the
// card's deadline.
func (c *Client) ask(ctx context.Context, card *Card) *asking {
	cctx, cancel := context.WithCancelCause(ctx)
	a := &asking{card: card, cancel: cancel, done: make(chan askResult, 1)}
	go func() {
		actx := cctx
		if dl := card.Deadline(); !dl.IsZero() {
			var stop context.CancelFunc
			actx, stop = context.WithDeadline(cctx, dl)
			defer stop()
		}
		ans, err := c.ui.Ask(actx, card)
		if err == nil && actx.Err() != nil {
			err = actx.Err() // too late: the card went away while answering
		}
		if cause := context.Cause(cctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		a.done <- askResult{ans, err}
	}()
	return a
}

// receive reads one request: a new card, a cancellation (the request id it
// cancels and why), or nothing for us. tools/list is answered with no
// tools, so that the fulfiller's discovery does not wait on a human.
func (c *Client) receive(ctx context.Context, env agent.Envelope, seen *lru.Cache[string, [32]byte], mem *memory) (card *Card, cancelled, reason string) {
	if env.Kind != agent.KindRequest || !slices.Contains(env.To, c.conn.ID()) {
		return nil, "", ""
	}
	var req agent.RPCRequest
	if json.Unmarshal(env.Payload, &req) != nil {
		return nil, "", ""
	}
	if req.Method == agent.MethodToolsList && len(req.ID) > 0 {
		payload, _ := orderedJSON([]string{"jsonrpc", "id", "result"}, map[string]json.RawMessage{
			"jsonrpc": mustJSON("2.0"), "id": req.ID, "result": json.RawMessage(`{"tools":[]}`),
		})
		c.send(ctx, agent.Envelope{To: []string{env.From}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{env.ID}, Payload: payload})
		return nil, "", ""
	}
	if req.Method != agent.MethodElicitationCreate && req.Method != agent.MethodCancelled {
		return nil, "", ""
	}
	if env.From != c.opts.Fulfiller {
		c.log.Warn("request from a participant that is not the fulfiller; ignored", "from", env.From, "method", req.Method, "envelope", env.ID)
		return nil, "", ""
	}
	if req.Method == agent.MethodCancelled {
		var p struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(req.Params, &p)
		return nil, env.CorrelationID.First(), p.Reason
	}
	sum := sha256.Sum256(env.Payload)
	if first, ok := seen.Get(env.ID); ok {
		// Only the first request with an id is shown. The fulfiller asks
		// the same question again, byte for byte, after a reconnect,
		// because our answer may have been lost (the gateway replays
		// nothing): send the recorded answer again rather than ask the
		// person twice. Anything else under a seen id is someone's attempt
		// to put another call under a digest the person already saw.
		switch a, answered := mem.get(env.ID); {
		case first != sum:
			c.log.Warn("elicitation with an id seen before but a different content; ignored", "request", env.ID)
		case answered:
			c.log.Info("asked again about a request already answered; sending the answer again", "request", env.ID)
			c.send(ctx, a)
		default:
			c.log.Debug("asked again about a request already shown or dropped; ignored", "request", env.ID)
		}
		return nil, "", ""
	}
	seen.Add(env.ID, sum)
	card, err := ParseCard(env)
	if err != nil {
		c.log.Warn("elicitation not understood; ignored", "request", env.ID, "err", err)
		return nil, "", ""
	}
	return card, "", ""
}

// seenLimit bounds the prompts Run remembers having shown. The gateway
// does not authenticate `from`, so anyone in the space can send prompts
// that claim to come from the fulfiller; an unbounded record would let
// them grow an approver's client without end. A prompt old enough to be
// forgotten is long past any deadline a fulfiller would still re-ask it
// under.
const seenLimit = 4096

// newSeenPrompts makes the record of shown prompts: elicitation envelope
// id → SHA-256 of its payload, least recently seen forgotten first.
func newSeenPrompts(size int) *lru.Cache[string, [32]byte] {
	c, err := lru.New[string, [32]byte](size)
	if err != nil {
		panic(err) // only for size <= 0, which callers never pass
	}
	return c
}

// respond sends the answer to card and remembers it, sent or not: if it is
// lost, the fulfiller's asking again gets it re-sent (see receive).
func (c *Client) respond(ctx context.Context, card *Card, a Answer, mem *memory) error {
	env, err := Response(card, a, c.opts.Key)
	if err != nil {
		return err
	}
	mem.put(card, env)
	return c.send(ctx, env)
}

// memory holds the last answers sent, by elicitation envelope id, so that
// one can be sent again (the same signed bytes) when the fulfiller asks
// the same question again. It keeps at most max answers and none past its
// prompt's deadline. Only Run's goroutine uses it.
type memory struct {
	max     int
	now     func() time.Time
	order   []string // request ids, oldest first
	answers map[string]remembered
}

type remembered struct {
	env      agent.Envelope // as built, before Send stamps an id
	deadline time.Time      // zero: none given
}

func (m *memory) put(card *Card, env agent.Envelope) {
	if m.answers == nil {
		m.answers = map[string]remembered{}
	}
	m.expire()
	if _, ok := m.answers[card.RequestID]; !ok {
		m.order = append(m.order, card.RequestID)
	}
	m.answers[card.RequestID] = remembered{env: env, deadline: card.Deadline()}
	for len(m.order) > m.max {
		delete(m.answers, m.order[0])
		m.order = m.order[1:]
	}
}

func (m *memory) get(requestID string) (agent.Envelope, bool) {
	m.expire()
	r, ok := m.answers[requestID]
	return r.env, ok
}

// expire forgets answers whose prompt's deadline has passed: the fulfiller
// no longer waits for them.
func (m *memory) expire() {
	now := m.now()
	m.order = slices.DeleteFunc(m.order, func(id string) bool {
		if dl := m.answers[id].deadline; !dl.IsZero() && !now.Before(dl) {
			delete(m.answers, id)
			return true
		}
		return false
	})
}

func (c *Client) send(ctx context.Context, env agent.Envelope) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := c.conn.Send(sctx, env)
	return err
}
