// Package inbox is the browser face of a human approver: an approver.UI
// that serves every open prompt as a card on a live web page instead of
// drawing terminal cards (`fulfiller approve --web`, `fulfiller demo
// --web`). Joining, answering, signing and recovery stay in
// approver.Client; the inbox only shows cards and turns a click into an
// approver.Answer, so the terminal and the browser are two faces of one
// client.
//
// The page is embedded (no CDN: it works air-gapped), follows the inbox
// over Server-Sent Events, and answers with a JSON POST. Everything it
// serves needs the secret of the URL the inbox prints (then a cookie):
// whoever can reach the port without it gets 401.
package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/printable"
)

// Options configure an Inbox.
type Options struct {
	// Approver is the id the person answers as, shown in the page header.
	Approver string
	// Signing says how answers are signed, shown in the header ("" when
	// they are not).
	Signing string
	// Fulfillers are the fulfillers whose prompts are shown, for the
	// presence line.
	Fulfillers []string
	// Secret is what the page's URL carries; a random one when empty.
	Secret string
	// Keep is how many answered or ended cards stay on the page [50].
	Keep   int
	Logger *slog.Logger     // [discard]
	Now    func() time.Time // [time.Now]
}

// Inbox is an approver.UI whose cards are shown in the browsers that
// follow it (Handler). It is safe for concurrent use: the client asks
// about several cards at once (approver.Options.Open), and every browser
// tab is a reader.
type Inbox struct {
	opts   Options
	secret string
	log    *slog.Logger

	mu       sync.Mutex
	seq      uint64
	items    map[string]*item // by request id
	order    []string         // request ids, oldest first
	presence map[string]string
	subs     map[*subscriber]struct{}
	closed   bool
}

// item is one card and what became of it.
type item struct {
	view   View
	card   *approver.Card
	answer chan approver.Answer // open cards: the person's answer, buffered
}

// New makes an Inbox.
func New(opts Options) (*Inbox, error) {
	if opts.Keep <= 0 {
		opts.Keep = 50
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	secret := opts.Secret
	if secret == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, errors.New("inbox: no randomness for the URL secret")
		}
		secret = hex.EncodeToString(b)
	}
	in := &Inbox{opts: opts, secret: secret, log: opts.Logger,
		items: map[string]*item{}, presence: map[string]string{}, subs: map[*subscriber]struct{}{}}
	for _, f := range opts.Fulfillers {
		in.presence[f] = "unknown"
	}
	return in, nil
}

// Secret is what the page's URL must carry (?token=SECRET).
func (in *Inbox) Secret() string { return in.secret }

// Close ends every event stream; pages then show that the inbox is gone.
// isClosed reports whether Close was called.
func (in *Inbox) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

func (in *Inbox) Close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closed = true
	for s := range in.subs {
		s.close()
	}
	in.subs = map[*subscriber]struct{}{}
}

// Ask implements approver.UI: the card is shown on every page until the
// person answers it there or ctx ends (the card went away; Notify says
// why).
func (in *Inbox) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	// answer is read through this copy: the field is cleared, under mu,
	// once the card can take no more answers.
	answer := make(chan approver.Answer, 1)
	it := &item{card: c, view: viewOf(c), answer: answer}
	it.view.State = StateOpen
	in.mu.Lock()
	in.put(it)
	in.mu.Unlock()
	select {
	case a := <-answer:
		return a, nil
	case <-ctx.Done():
		in.mu.Lock()
		if cur := in.items[c.RequestID]; cur == it && it.view.State == StateOpen {
			// Notify follows with the cause; until then nothing may be
			// answered here.
			it.answer = nil
			it.view.State = StateEnding
			in.publish(it)
		}
		in.mu.Unlock()
		return approver.Answer{}, ctx.Err()
	}
}

// Notify implements approver.UI: what became of a card, and where the
// fulfillers are.
func (in *Inbox) Notify(ev approver.Event) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch ev.Kind {
	case approver.EventFulfillerLeft:
		in.setPresence(ev.Fulfiller, "left")
		return
	case approver.EventFulfillerJoined:
		in.setPresence(ev.Fulfiller, "here")
		return
	case approver.EventFulfillerAbsent:
		in.setPresence(ev.Fulfiller, "absent")
		return
	}
	if ev.Card == nil {
		return
	}
	it := in.items[ev.Card.RequestID]
	if ev.Kind == approver.EventPeers {
		if it != nil {
			// Still open: the answer channel stays.
			it.view.Peers, it.view.Approvals = peerWords(ev.Peers), approver.Approvals(ev.Peers)
			in.put(it)
		}
		return
	}
	if it == nil {
		// A card that ended while it waited its turn was never shown:
		// show how it ended, so nothing a person was asked vanishes
		// unexplained.
		it = &item{card: ev.Card, view: viewOf(ev.Card)}
	}
	it.answer = nil
	v := &it.view
	switch ev.Kind {
	case approver.EventEnded:
		v.State, v.Cause, v.Note = StateEnded, string(ev.End.Cause), ev.End.String()
		if len(ev.End.By) > 0 {
			v.Peers, v.Approvals = peerWords(ev.End.By), approver.Approvals(ev.End.By)
		}
	case approver.EventSent:
		v.Answer = printable.String(ev.Answer.Describe())
		v.Approved = ev.Answer.Approves()
		if ev.Err != nil {
			v.State, v.Note = StateFailed, "not sent: "+printable.String(ev.Err.Error())
		} else {
			v.State, v.Note = StateAnswered, ""
		}
	case approver.EventOutcome:
		v.State, v.Note = StateOutcome, ev.Outcome.String()
		v.Outcome = "rejected"
		if ev.Outcome.Fulfilled {
			v.Outcome = "fulfilled"
		}
		v.RejectReason = printable.String(ev.Outcome.Reason)
	default:
		return
	}
	in.put(it)
}

// put stores it as the latest state of its card and tells the pages. The
// caller holds mu.
func (in *Inbox) put(it *item) {
	id := it.card.RequestID
	if _, ok := in.items[id]; !ok {
		in.order = append(in.order, id)
	}
	in.items[id] = it
	in.publish(it)
	in.trim()
}

// publish sends it's view to every page. The caller holds mu.
func (in *Inbox) publish(it *item) {
	in.seq++
	it.view.Seq = in.seq
	in.broadcast("item", it.view)
}

// trim forgets the oldest cards that are no longer open beyond Keep.
func (in *Inbox) trim() {
	done := 0
	for _, id := range in.order {
		if in.items[id].view.State.closed() {
			done++
		}
	}
	for i := 0; done > in.opts.Keep && i < len(in.order); {
		id := in.order[i]
		if !in.items[id].view.State.closed() {
			i++
			continue
		}
		delete(in.items, id)
		in.order = slices.Delete(in.order, i, i+1)
		done--
		in.broadcast("remove", map[string]string{"id": id})
	}
}

func (in *Inbox) setPresence(fulfiller, where string) {
	in.presence[fulfiller] = where
	in.broadcast("presence", in.presence)
}

// ErrNotOpen is returned by Answer for a card that is not open (any more):
// answered already, ended, or never shown.
var ErrNotOpen = errors.New("the prompt is not open")

// Answer answers the open card with request id, as a click on the page
// does. It checks nothing but that the card is open; the page's requests
// are checked by the handler (answerRequest.answer) first.
func (in *Inbox) Answer(requestID string, a approver.Answer) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	it := in.items[requestID]
	if it == nil || it.answer == nil || it.view.State != StateOpen {
		return ErrNotOpen
	}
	it.answer <- a // buffered, and only ever sent once: answer is nil after
	it.answer = nil
	it.view.State = StateSending
	it.view.Answer = printable.String(a.Describe())
	in.publish(it)
	return nil
}

// card returns the open card with request id.
func (in *Inbox) card(requestID string) (*approver.Card, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	it := in.items[requestID]
	if it == nil || it.view.State != StateOpen {
		return nil, false
	}
	return it.card, true
}

// snapshot is what a page is sent when it connects.
type snapshot struct {
	Approver   string            `json:"approver"`
	Signing    string            `json:"signing"`
	Fulfillers map[string]string `json:"fulfillers"`
	Now        time.Time         `json:"now"`
	Items      []View            `json:"items"`
}

// subscribe registers a page's event stream and returns what it shows
// first. The caller must unsubscribe it.
func (in *Inbox) subscribe() (*subscriber, []byte, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, nil, errors.New("inbox closed")
	}
	s := newSubscriber()
	in.subs[s] = struct{}{}
	snap := snapshot{Approver: printable.String(in.opts.Approver), Signing: in.opts.Signing, Fulfillers: in.presence, Now: in.opts.Now().UTC()}
	for _, id := range in.order {
		snap.Items = append(snap.Items, in.items[id].view)
	}
	b, err := json.Marshal(snap)
	return s, b, err
}

func (in *Inbox) unsubscribe(s *subscriber) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.subs, s)
}

// broadcast queues an event for every page. A page that cannot keep up
// is dropped: it reconnects and starts again from a snapshot, which is
// better than holding up the client or growing without bound.
func (in *Inbox) broadcast(event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		in.log.Error("inbox event not encoded", "event", event, "err", err)
		return
	}
	for s := range in.subs {
		if !s.offer(sseEvent{name: event, data: b}) {
			delete(in.subs, s)
			s.close()
		}
	}
}

// peerWords says each of the other approvers' answers for the page.
func peerWords(answers []approver.PeerAnswer) []string {
	out := make([]string, len(answers))
	for i, a := range answers {
		out[i] = a.String()
	}
	return out
}
