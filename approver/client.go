package approver

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

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
	Limit  int
	Logger *slog.Logger     // [discard]
	Now    func() time.Time // [time.Now]
}

// Client shows the elicitations addressed to one approver, one card at a
// time in arrival order, and answers them.
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
	seen := map[string]bool{}
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
			card, cancelled, reason := c.receive(ctx, env, seen)
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
				err := c.respond(ctx, card, r.a)
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
func (c *Client) receive(ctx context.Context, env agent.Envelope, seen map[string]bool) (card *Card, cancelled, reason string) {
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
	if seen[env.ID] {
		// Only the first request with an id is shown: a second one with
		// the same id is someone's attempt to put another call under a
		// digest the person already saw.
		c.log.Warn("elicitation with an id seen before; ignored", "request", env.ID)
		return nil, "", ""
	}
	seen[env.ID] = true
	card, err := ParseCard(env)
	if err != nil {
		c.log.Warn("elicitation not understood; ignored", "request", env.ID, "err", err)
		return nil, "", ""
	}
	return card, "", ""
}

func (c *Client) respond(ctx context.Context, card *Card, a Answer) error {
	env, err := Response(card, a, c.opts.Key)
	if err != nil {
		return err
	}
	return c.send(ctx, env)
}

func (c *Client) send(ctx context.Context, env agent.Envelope) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := c.conn.Send(sctx, env)
	return err
}
