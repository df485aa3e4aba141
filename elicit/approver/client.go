package approver

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
)

// Conn is what the Client needs of the approver's MEW session;
// *agent.Client has it.
type Conn interface {
	ID() string
	Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error)
}

// UI is how the person sees cards and answers them. Ask shows one card and
// returns the answer; its ctx ends when the card goes away (the fulfiller
// cancelled it, its deadline passed, the fulfiller left) or the client
// stops, and Ask must then return promptly. Notify reports what happened
// afterwards — a card ended and why, an answer sent, the outcome of an
// approval, the fulfiller leaving or coming back — as data for the UI to
// word. The Client calls Ask for at most Options.Open cards at once (one,
// for the terminal card), each from a goroutine of its own, in arrival
// order; Notify may be called (from Run's goroutine) while Ask shows a
// card.
type UI interface {
	Ask(ctx context.Context, c *Card) (Answer, error)
	Notify(ev Event)
}

// ErrQuit is returned by a UI's Ask when the person wants to stop; Run then
// returns nil.
var ErrQuit = errors.New("quit")

// Options tune a Client.
type Options struct {
	// Key signs every answer; nil sends them unsigned (fine only where the
	// fulfiller has no key for this approver).
	Key ed25519.PrivateKey
	// FulfillerKeys pins the fulfillers' prompt keys (--fulfiller-keys).
	// When set, only prompts whose signature verifies under the key of the
	// fulfiller that signed them are shown; any other is dropped and
	// reported (EventRefused), and leaves no trace a later prompt could
	// collide with. Empty: prompts are taken on the gateway's word.
	FulfillerKeys approval.Keys
	// Fulfillers are the participants whose elicitations are shown: one
	// fulfiller, or every member of a group of fulfillers sharing a state
	// store, any of which may ask, re-ask (adopt) or end a prompt
	// [["fulfiller"]]. Requests from anyone else are ignored and logged:
	// the gateway does not authenticate from, but a stranger's card should
	// at least not look like the fulfiller's.
	Fulfillers []string
	// Limit stops Run after this many answers; 0 means no limit.
	Limit int
	// Open is how many cards the UI is shown at once [1]: one for the
	// terminal card, which shows one card at a time; an inbox page shows
	// every open prompt side by side. The rest wait, in arrival order.
	Open int
	// MaxCards and MaxCardBytes bound the cards the client holds at once,
	// shown or waiting: how many [max(Open, 64)], and the bytes of their
	// prompts' payloads [8 MiB]. A prompt that would pass either bound
	// makes room: the oldest waiting card is dropped, else (when every
	// held card is shown) the oldest shown one, each ended with
	// CauseDisplaced. So a flood of forged prompts costs bounded memory
	// and the newest prompt is always held, and shown when MaxCards is at
	// most Open (the inboxes). With FulfillerKeys a prompt that does not
	// verify takes no place at all.
	MaxCards     int
	MaxCardBytes int
	// Remember is how many sent answers are kept to be sent again when
	// the fulfiller asks the same question again after a reconnect [256].
	// An answer is forgotten sooner when its prompt's deadline passes.
	Remember int
	Logger   *slog.Logger     // [discard]
	Now      func() time.Time // [time.Now]

	// seenLimit replaces seenLimit in tests, which need not send
	// thousands of prompts to see the bound work.
	seenLimit int
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

// The defaults of Options.MaxCards and Options.MaxCardBytes.
const (
	defaultMaxCards     = 64
	defaultMaxCardBytes = 8 << 20
)

// New makes a Client. Feed it envelopes with Run.
func New(conn Conn, ui UI, opts Options) *Client {
	if len(opts.Fulfillers) == 0 {
		opts.Fulfillers = []string{"fulfiller"}
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
	if opts.Open <= 0 {
		opts.Open = 1
	}
	if opts.MaxCards <= 0 {
		opts.MaxCards = max(opts.Open, defaultMaxCards)
	}
	if opts.MaxCardBytes <= 0 {
		opts.MaxCardBytes = defaultMaxCardBytes
	}
	return &Client{conn: conn, ui: ui, opts: opts, log: opts.Logger}
}

// asking is a card being shown.
type asking struct {
	card *Card
	// from is the member of the group that asked it last, where the
	// answer goes: card.From, or the member that adopted the prompt and
	// asked it again. Kept here rather than in card because the UI reads
	// card from its own goroutine.
	from   string
	cancel context.CancelCauseFunc
	done   chan askResult // Ask's result; buffered, written once
}

type askResult struct {
	a   Answer
	err error
}

// errEnded is the cause of a card's context when the card went away while
// shown; Run has already reported why.
type errEnded struct{ end End }

func (e errEnded) Error() string { return "card ended: " + e.end.String() }

// session is Run's state; only Run's goroutine uses it.
type session struct {
	queue []*Card   // cards not shown yet, in arrival order
	open  []*asking // cards being shown, oldest first (at most Options.Open)
	// wake wakes Run when one of open has its result: a card's goroutine
	// writes its done, then signals here without blocking.
	wake     chan struct{}
	seen     *lru.Cache[string, seenPrompt]
	mem      *memory
	answered int

	// approved holds the approvals sent whose outcome is not known yet,
	// by proposal id; rejects the rejects of those proposals still
	// waiting for their explanation, by reject envelope id.
	approved *lru.Cache[string, *watch]
	rejects  map[string]*watch
	// peers are the other approvers' prompts and answers, for quorum
	// progress and for who decided a card that ended.
	peers *peers
}

// watch is an approval waiting for its outcome.
type watch struct {
	card    *Card
	answer  Answer
	reason  string    // the reject's reason, once it came
	from    string    // who sent the reject: its explanation comes from them
	explain time.Time // when to stop waiting for the reject's explanation
}

// explainWait is how long the outcome of a rejected approval waits for
// the fulfiller's chat that explains the reject, which it sends right
// after the reject. A reject without a message has no chat.
const explainWait = 2 * time.Second

// Run handles the envelopes of the approver's subscription (pass the
// channel of a subscription made with SubscribeOptions) until ctx ends, in
// is closed, the UI quits or Limit answers were sent.
func (c *Client) Run(ctx context.Context, in <-chan agent.Envelope) error {
	approved, err := lru.New[string, *watch](max(c.opts.Remember, 1))
	if err != nil {
		return fmt.Errorf("approver: %w", err)
	}
	s := &session{
		seen:     newSeenPrompts(cmp.Or(c.opts.seenLimit, seenLimit)),
		mem:      &memory{max: c.opts.Remember, now: c.opts.Now},
		approved: approved,
		rejects:  map[string]*watch{},
		wake:     make(chan struct{}, 1),
		peers:    newPeers(),
	}
	defer c.stopAll(s)

	if r, ok := c.conn.(roster); ok {
		for _, id := range c.opts.Fulfillers {
			if _, here := r.Participant(id); !here {
				c.notify(Event{Kind: EventFulfillerAbsent, Fulfiller: id})
			}
		}
	}
	for {
		for len(s.open) < c.opts.Open && len(s.queue) > 0 {
			card := s.queue[0]
			s.queue = s.queue[1:]
			if dl := card.Deadline(); !dl.IsZero() && !c.opts.Now().Before(dl) {
				c.notify(Event{Kind: EventEnded, Card: card, End: End{Cause: CauseDeadline}})
				continue
			}
			s.open = append(s.open, c.ask(ctx, card, s.wake))
		}
		var explain *time.Timer
		var explainC <-chan time.Time
		if next := c.nextExplain(s); !next.IsZero() {
			explain = time.NewTimer(next.Sub(c.opts.Now()))
			explainC = explain.C
		}
		select {
		case <-ctx.Done():
			return nil
		case env, ok := <-in:
			if !ok {
				return nil
			}
			if explain != nil {
				explain.Stop()
			}
			c.receive(ctx, s, env)
		case <-explainC:
			c.explainDue(s)
			continue
		case <-s.wake:
			if explain != nil {
				explain.Stop()
			}
			if stop := c.collect(ctx, s); stop {
				return nil
			}
		}
	}
}

// collect handles the results of the open cards that have one, oldest
// first. It reports whether Run must stop: the person quit, or Limit
// answers were sent.
func (c *Client) collect(ctx context.Context, s *session) (stop bool) {
	for i := 0; i < len(s.open); {
		a := s.open[i]
		var r askResult
		select {
		case r = <-a.done:
		default:
			i++
			continue
		}
		s.open = slices.Delete(s.open, i, i+1)
		card := a.card
		if a.from != card.From {
			// Adopted: the answer goes to the member that asked last.
			adopted := *card
			adopted.From = a.from
			card = &adopted
		}
		var ended errEnded
		switch {
		case errors.Is(r.err, ErrQuit):
			return true
		case errors.As(r.err, &ended):
			// Reported where it ended.
		case errors.Is(r.err, context.DeadlineExceeded):
			c.notify(Event{Kind: EventEnded, Card: card, End: End{Cause: CauseDeadline}})
		case r.err != nil:
			if ctx.Err() != nil {
				return true
			}
			c.log.Warn("card not answered", "request", card.RequestID, "err", r.err)
		default:
			err := c.respond(ctx, card, r.a, s.mem)
			c.notify(Event{Kind: EventSent, Card: card, Answer: r.a, Err: err})
			if err != nil {
				break
			}
			if r.a.Approves() && card.Proposal != nil {
				s.approved.Add(card.Proposal.ID, &watch{card: card, answer: r.a})
			}
			s.answered++
			if c.opts.Limit > 0 && s.answered >= c.opts.Limit {
				return true
			}
		}
	}
	return false
}

// roster is what Run uses, when the Conn has it (*agent.Client does), to
// say at the start that the fulfiller is not in the space.
type roster interface {
	Participant(id string) (agent.Participant, bool)
}

// notify tells the UI about ev, naming the fulfiller concerned: the one
// given, else the member that asked the card.
func (c *Client) notify(ev Event) {
	if ev.Fulfiller == "" && ev.Card != nil {
		ev.Fulfiller = ev.Card.From
	}
	c.ui.Notify(ev)
}

// listed reports whether id is one of the fulfillers whose prompts are
// shown.
func (c *Client) listed(id string) bool {
	return slices.Contains(c.opts.Fulfillers, id)
}

// stopAll ends the cards being shown and waits for their Ask to return.
func (c *Client) stopAll(s *session) {
	for _, a := range s.open {
		a.cancel(context.Canceled)
	}
	for _, a := range s.open {
		<-a.done
	}
	s.open = nil
}

// shown returns the index in s.open of the card with request id, or -1.
func (s *session) shown(requestID string) int {
	return slices.IndexFunc(s.open, func(a *asking) bool { return a.card.RequestID == requestID })
}

// end removes the card with request id from the screen or the queue, and
// reports why. It reports whether there was one.
func (c *Client) end(s *session, requestID string, e End) bool {
	if card := s.find(requestID); card != nil && card.Proposal != nil {
		e.By = s.peers.of(card.Proposal.ID)
	}
	if i := s.shown(requestID); i >= 0 {
		a := s.open[i]
		s.open = slices.Delete(s.open, i, i+1)
		a.cancel(errEnded{e})
		<-a.done
		c.notify(Event{Kind: EventEnded, Card: a.card, End: e, Fulfiller: a.from})
		return true
	}
	i := slices.IndexFunc(s.queue, func(q *Card) bool { return q.RequestID == requestID })
	if i < 0 {
		return false
	}
	card := s.queue[i]
	s.queue = slices.Delete(s.queue, i, i+1)
	c.notify(Event{Kind: EventEnded, Card: card, End: e})
	return true
}

// ask shows card in its own goroutine, with a context that ends at the
// card's deadline, and signals wake when Ask returned.
func (c *Client) ask(ctx context.Context, card *Card, wake chan<- struct{}) *asking {
	cctx, cancel := context.WithCancelCause(ctx)
	a := &asking{card: card, from: card.From, cancel: cancel, done: make(chan askResult, 1)}
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
		select {
		case wake <- struct{}{}:
		default: // Run is already woken, and looks at every open card
		}
	}()
	return a
}

// receive handles one envelope of the subscription. The gateway does not
// authenticate `from`, and everything is broadcast: only what claims to
// come from a listed fulfiller is looked at, and nothing from anyone else
// can end or change a card. The listed fulfillers are one group: any
// member may ask, adopt (ask again) or end any prompt of the group.
func (c *Client) receive(ctx context.Context, s *session, env agent.Envelope) {
	switch env.Kind {
	case agent.KindPresence:
		c.presence(s, env)
		return
	case agent.KindReject, agent.KindChat:
		c.outcome(s, env)
		return
	case agent.KindResponse:
		c.peerAnswer(s, env)
		return
	case agent.KindRequest:
	default:
		return
	}
	if !slices.Contains(env.To, c.conn.ID()) {
		if c.listed(env.From) {
			var req agent.RPCRequest
			if agent.Unmarshal(env.Payload, &req) == nil {
				s.peers.prompt(env, req) // another approver's prompt: its answer tells the quorum's progress
			}
			c.outcome(s, env) // perhaps the fulfilment of a proposal we approved
		}
		return
	}
	var req agent.RPCRequest
	if agent.Unmarshal(env.Payload, &req) != nil {
		return
	}
	if req.Method == agent.MethodToolsList && len(req.ID) > 0 {
		payload, _ := orderedJSON([]string{"jsonrpc", "id", "result"}, map[string]json.RawMessage{
			"jsonrpc": mustJSON("2.0"), "id": req.ID, "result": json.RawMessage(`{"tools":[]}`),
		})
		c.send(ctx, agent.Envelope{To: []string{env.From}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{env.ID}, Payload: payload})
		return
	}
	if req.Method != agent.MethodElicitationCreate && req.Method != agent.MethodCancelled {
		return
	}
	if !c.listed(env.From) {
		c.log.Warn("request from a participant that is not a listed fulfiller; ignored", "from", env.From, "method", req.Method, "envelope", env.ID)
		return
	}
	if req.Method == agent.MethodCancelled {
		c.cancelled(s, env, req)
		return
	}
	if len(c.opts.FulfillerKeys) > 0 {
		// Checked before anything is remembered of the prompt: a forgery
		// must not take an id the real prompt will arrive under
		// (docs/design.md "Proposer identity and grants").
		if _, err := approval.VerifyPrompt(c.opts.FulfillerKeys, env.ID, c.conn.ID(), env.Payload); err != nil {
			c.log.Warn("elicitation whose signature does not verify under the pinned fulfiller keys; dropped, never shown", "from", env.From, "request", env.ID, "err", err)
			c.notify(Event{Kind: EventRefused, Fulfiller: env.From, Request: env.ID, Err: err})
			return
		}
	}
	sum := sha256.Sum256(env.Payload)
	if first, ok := s.seen.Get(env.ID); ok {
		// Only the first request with an id is shown. The fulfiller asks
		// the same question again, byte for byte, after a reconnect,
		// because our answer may have been lost (the gateway replays
		// nothing): send the recorded answer again rather than ask the
		// person twice. Anything else under a seen id is someone's attempt
		// to put another call under a digest the person already saw.
		//
		// In a group the member asking again may not be the one that asked
		// first: it adopted the prompt of a member presumed gone, and
		// re-sends the same envelope id and bytes from itself. The card
		// stays one card, and the answer goes to the member asking now.
		switch a, answered := s.mem.get(env.ID); {
		case first.contested:
			c.log.Warn("elicitation under a contested id; ignored", "from", env.From, "request", env.ID)
			return
		case first.sum != sum:
			// Two different prompts under one id: one of them is not the
			// fulfiller's, and which one cannot be told here. An open card
			// is contested whichever came first (the forgery may arrive
			// before the real prompt while the link comes back).
			if c.contest(s, env.ID, env.From, env.ID) {
				return
			}
			c.log.Warn("elicitation with an id seen before but a different content; ignored", "request", env.ID)
			return
		case answered:
			c.log.Info("asked again about a request already answered; sending the answer again", "request", env.ID, "from", env.From)
			a.To = []string{env.From}
			c.send(ctx, a)
			return
		case !first.again:
			if !s.readdress(env.ID, env.From) {
				c.log.Debug("asked again about a request already shown or dropped; ignored", "request", env.ID)
			}
			return
		}
		// The card ended because the fulfiller left, and the fulfiller,
		// back, still wants the answer: show it again.
	}
	card, err := ParseCard(env)
	if err != nil {
		s.seen.Add(env.ID, seenPrompt{sum: sum})
		c.log.Warn("elicitation not understood; ignored", "request", env.ID, "err", err)
		return
	}
	if open := s.withRPCID(card.RPCID); open != nil {
		// A new envelope id under the JSON-RPC id of an open card: the
		// fulfiller never does this (docs/design.md rule 11), and an answer
		// repeats the JSON-RPC id, so it cannot be told which prompt it
		// answers. Neither is shown as approvable.
		s.seen.Add(env.ID, seenPrompt{sum: sum, contested: true})
		c.contest(s, open.RequestID, env.From, env.ID)
		return
	}
	s.seen.Add(env.ID, seenPrompt{sum: sum})
	if c.replace(s, card) {
		return
	}
	c.makeRoom(s, card)
	s.queue = append(s.queue, card)
}

// makeRoom drops the oldest cards held, waiting ones first, until card
// fits under Options.MaxCards and Options.MaxCardBytes: the bound that
// keeps a flood of prompts (forged, where prompts are not signed) from
// growing the client without end or hiding a later prompt behind it.
func (c *Client) makeRoom(s *session, card *Card) {
	held := func() (n, bytes int) {
		for _, q := range s.queue {
			n, bytes = n+1, bytes+q.size
		}
		for _, a := range s.open {
			n, bytes = n+1, bytes+a.card.size
		}
		return n, bytes
	}
	for {
		n, bytes := held()
		if n == 0 || (n+1 <= c.opts.MaxCards && bytes+card.size <= c.opts.MaxCardBytes) {
			return
		}
		oldest := ""
		if len(s.queue) > 0 {
			oldest = s.queue[0].RequestID
		} else {
			oldest = s.open[0].card.RequestID
		}
		c.log.Warn("more prompts at once than this client holds; the oldest is dropped to make room (forged prompts? sign them: --prompt-key, --fulfiller-keys)",
			"dropped", oldest, "request", card.RequestID, "cards", n, "bytes", bytes, "max_cards", c.opts.MaxCards, "max_bytes", c.opts.MaxCardBytes)
		c.end(s, oldest, End{Cause: CauseDisplaced})
	}
}

// contest marks the open card with request id contested: another prompt
// (envelope other, from from) reused its envelope id or JSON-RPC id with
// different content. Its answers are disabled for good: the card ends
// (CauseContested, in words for the person), nothing is sent, and every
// later prompt under its id is ignored. It reports whether such a card
// was open.
func (c *Client) contest(s *session, requestID, from, other string) bool {
	if s.find(requestID) == nil {
		return false
	}
	c.log.Error("two different prompts under one id: someone else sent a prompt in the fulfiller's name; the card is contested and cannot be answered", "request", requestID, "other", other, "from", from)
	if first, ok := s.seen.Peek(requestID); ok {
		s.seen.Add(requestID, seenPrompt{sum: first.sum, contested: true})
	}
	c.end(s, requestID, End{Cause: CauseContested})
	return true
}

// withRPCID returns the open card (shown or queued) whose JSON-RPC id is
// id, or nil.
func (s *session) withRPCID(id json.RawMessage) *Card {
	for _, a := range s.open {
		if sameValue(a.card.RPCID, id) {
			return a.card
		}
	}
	for _, q := range s.queue {
		if sameValue(q.RPCID, id) {
			return q
		}
	}
	return nil
}

// readdress makes member from the one a shown or queued card answers to,
// when that member asks it again. It reports whether the card is open.
func (s *session) readdress(requestID, from string) bool {
	if i := s.shown(requestID); i >= 0 {
		s.open[i].from = from
		return true
	}
	if i := slices.IndexFunc(s.queue, func(q *Card) bool { return q.RequestID == requestID }); i >= 0 {
		if s.queue[i].From != from {
			// Queued cards are not the UI's yet: a copy can take their place.
			adopted := *s.queue[i]
			adopted.From = from
			s.queue[i] = &adopted
		}
		return true
	}
	return false
}

// replace puts card in the place of an open card about the same call of
// the same proposal that another member of the group asked under another
// envelope id: the member asking now adopted the proposal, and the older
// prompt will not be answered to. A queued card is swapped silently; a
// shown one ends (CauseReasked) and card is shown next. It reports whether
// card took a place. Two prompts about different calls under one proposal
// id stay two cards: one is not what it claims, and the digest the person
// signs tells them apart.
func (c *Client) replace(s *session, card *Card) bool {
	if card.Proposal == nil {
		return false
	}
	same := func(old *Card, from string) bool {
		return old.Proposal != nil && from != card.From &&
			old.Proposal.ID == card.Proposal.ID && old.Proposal.Digest == card.Proposal.Digest
	}
	if i := slices.IndexFunc(s.queue, func(q *Card) bool { return same(q, q.From) }); i >= 0 {
		c.log.Info("proposal asked again by another fulfiller of the group; the newer prompt replaces the older", "proposal", card.Proposal.ID, "request", card.RequestID, "replaced", s.queue[i].RequestID)
		s.queue[i] = card
		return true
	}
	if i := slices.IndexFunc(s.open, func(a *asking) bool { return same(a.card, a.from) }); i >= 0 {
		old := s.open[i].card.RequestID
		c.log.Info("proposal asked again by another fulfiller of the group; the newer prompt replaces the older", "proposal", card.Proposal.ID, "request", card.RequestID, "replaced", old)
		c.end(s, old, End{Cause: CauseReasked})
		s.queue = slices.Insert(s.queue, 0, card)
		return true
	}
	return false
}

// cancelled ends the card a notifications/cancelled names. It must come
// from a listed fulfiller (the caller checked), name an open card and
// repeat its JSON-RPC id: anything else is someone else's attempt to take
// a card away. In a group any listed member may end a card, not only the
// one that asked it: the members share the pending work (a member that
// adopted a prompt, or the one whose operator API cancelled it, ends it),
// and any listed id is already trusted to ask and re-ask.
func (c *Client) cancelled(s *session, env agent.Envelope, req agent.RPCRequest) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
		Reason    string          `json:"reason"`
	}
	_ = agent.Unmarshal(req.Params, &p)
	rid := env.CorrelationID.First()
	card := s.find(rid)
	if card == nil {
		return
	}
	if !sameValue(p.RequestID, card.RPCID) {
		c.log.Warn("cancellation that does not match the card it names; ignored", "from", env.From, "request", rid, "envelope", env.ID)
		return
	}
	c.end(s, rid, endOf(p.Reason))
}

// find returns the card with request id, shown or queued, or nil.
func (s *session) find(requestID string) *Card {
	if i := s.shown(requestID); i >= 0 {
		return s.open[i].card
	}
	if i := slices.IndexFunc(s.queue, func(q *Card) bool { return q.RequestID == requestID }); i >= 0 {
		return s.queue[i]
	}
	return nil
}

// presence follows the listed fulfillers leaving and coming back. When
// one leaves, the cards it asked last end: an answer sent now would reach
// nobody (the gateway replays nothing). A fulfiller that comes back, or
// the member of its group that adopts its prompts, asks them again, and
// receive then shows them again.
func (c *Client) presence(s *session, env agent.Envelope) {
	if !env.IsFromGateway() {
		return
	}
	var p agent.PresencePayload
	if agent.Unmarshal(env.Payload, &p) != nil || !c.listed(p.Participant.ID) {
		return
	}
	who := p.Participant.ID
	switch p.Event {
	case agent.PresenceLeave:
		c.notify(Event{Kind: EventFulfillerLeft, Fulfiller: who})
		var ids []string
		for _, a := range s.open {
			if a.from == who {
				ids = append(ids, a.card.RequestID)
			}
		}
		for _, q := range s.queue {
			if q.From == who {
				ids = append(ids, q.RequestID)
			}
		}
		for _, id := range ids {
			if first, ok := s.seen.Peek(id); ok {
				s.seen.Add(id, seenPrompt{sum: first.sum, again: true})
			}
			c.end(s, id, End{Cause: CauseFulfillerLeft})
		}
	case agent.PresenceJoin:
		c.notify(Event{Kind: EventFulfillerJoined, Fulfiller: who})
	}
}

// outcome follows what the fulfiller does with a proposal this approver
// approved: its fulfilment request to the tool owner (an mcp/request
// correlated to the proposal that is not a prompt), or its mcp/reject and
// the chat that explains it. In a group any member may carry it out (the
// one that receives the answer, or one that adopted the proposal), so
// the outcome is taken from any listed fulfiller; the reject and its
// explanation must come from the same one.
func (c *Client) outcome(s *session, env agent.Envelope) {
	if !c.listed(env.From) {
		return
	}
	switch env.Kind {
	case agent.KindRequest:
		w, ok := s.approved.Peek(env.CorrelationID.First())
		if !ok {
			return
		}
		var req agent.RPCRequest
		if agent.Unmarshal(env.Payload, &req) != nil || req.Method == agent.MethodElicitationCreate || req.Method == agent.MethodCancelled || len(req.ID) == 0 {
			return
		}
		s.approved.Remove(w.card.Proposal.ID)
		c.notify(Event{Kind: EventOutcome, Card: w.card, Answer: w.answer, Outcome: Outcome{Fulfilled: true, Target: strings.Join(env.To, ", ")}, Fulfiller: env.From})
	case agent.KindReject:
		w, ok := s.approved.Peek(env.CorrelationID.First())
		if !ok || env.ID == "" {
			return
		}
		var p struct {
			Reason string `json:"reason"`
		}
		_ = agent.Unmarshal(env.Payload, &p)
		s.approved.Remove(w.card.Proposal.ID)
		w.reason, w.explain, w.from = p.Reason, c.opts.Now().Add(explainWait), env.From
		s.rejects[env.ID] = w
	case agent.KindChat:
		w, ok := s.rejects[env.CorrelationID.First()]
		if !ok || w.from != env.From {
			return
		}
		var p struct {
			Text string `json:"text"`
		}
		_ = agent.Unmarshal(env.Payload, &p)
		delete(s.rejects, env.CorrelationID.First())
		c.notify(Event{Kind: EventOutcome, Card: w.card, Answer: w.answer, Outcome: Outcome{Reason: w.reason, Message: p.Text}, Fulfiller: env.From})
	}
}

// nextExplain is when the first reject stops waiting for its explanation;
// zero when none waits.
func (c *Client) nextExplain(s *session) time.Time {
	var next time.Time
	for _, w := range s.rejects {
		if next.IsZero() || w.explain.Before(next) {
			next = w.explain
		}
	}
	return next
}

// explainDue reports the rejects whose explanation did not come in time.
func (c *Client) explainDue(s *session) {
	now := c.opts.Now()
	for id, w := range s.rejects {
		if !now.Before(w.explain) {
			delete(s.rejects, id)
			c.notify(Event{Kind: EventOutcome, Card: w.card, Answer: w.answer, Outcome: Outcome{Reason: w.reason}, Fulfiller: w.from})
		}
	}
}

// seenLimit bounds the prompts Run remembers having shown. The gateway
// does not authenticate `from`, so anyone in the space can send prompts
// that claim to come from the fulfiller; an unbounded record would let
// them grow an approver's client without end. A prompt old enough to be
// forgotten is long past any deadline a fulfiller would still re-ask it
// under.
const seenLimit = 4096

// seenPrompt is what Run remembers of a prompt it showed: the SHA-256 of
// its payload, whether it may be shown again (it ended because the
// fulfiller left), and whether it is contested (another prompt came under
// its id with other content: nothing under that id is shown again).
type seenPrompt struct {
	sum       [32]byte
	again     bool
	contested bool
}

// newSeenPrompts makes the record of shown prompts by elicitation envelope
// id, least recently seen forgotten first.
func newSeenPrompts(size int) *lru.Cache[string, seenPrompt] {
	c, err := lru.New[string, seenPrompt](size)
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

// peerAnswer takes another approver's answer to a prompt seen in the
// space and, when a card here is about the same proposal, tells the UI
// how the others stand.
func (c *Client) peerAnswer(s *session, env agent.Envelope) {
	proposal, ok := s.peers.answer(env)
	if !ok {
		return
	}
	var card *Card
	for _, a := range s.open {
		if a.card.Proposal != nil && a.card.Proposal.ID == proposal {
			card = a.card
		}
	}
	for _, q := range s.queue {
		if card == nil && q.Proposal != nil && q.Proposal.ID == proposal {
			card = q
		}
	}
	if card != nil {
		c.notify(Event{Kind: EventPeers, Card: card, Peers: s.peers.of(proposal), Fulfiller: card.From})
	}
}
