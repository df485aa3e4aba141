package approver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// Link is one approver's session with the fulfiller, whatever carries
// it: Conn to answer on, In the envelopes the approver receives (Run's
// input), Close to end it. A space gives one per join (an *agent.Client
// and its Subscription); Local gives one per approver in the process.
type Link struct {
	Conn  Conn
	In    <-chan agent.Envelope
	Close func()
}

// SpaceLink is the Link of an approver joined to a space: c answers,
// sub (subscribed with SubscribeOptions) feeds Run, and Close leaves.
func SpaceLink(c *agent.Client, sub *agent.Subscription) Link {
	return Link{Conn: c, In: sub.C(), Close: func() {
		sub.Close()
		_ = c.Close()
	}}
}

// Local is an in-process approvers' channel: where there is no space
// (fulfiller mcp hosting the team inbox), the fulfiller's prompts reach
// the approver clients of this process through it and their answers
// come back, carried in the same envelopes a space carries, so that
// neither the Client nor the fulfiller's core tells the difference. The
// fulfiller's side sends with Send; each approver's side is a Link made
// by Join. An answer's from is the approver's Link it came through,
// never a claim: only this process's clients hold Links.
type Local struct {
	from    string
	deliver func(context.Context, agent.Envelope) error

	mu      sync.Mutex // guards members
	members map[string]*localMember
}

// localBuffer is how many envelopes an approver's Link holds before
// Send waits for its client to read them: prompts come one per
// escalation, so only a burst fills it.
const localBuffer = 64

// ErrNotJoined is Send's error when no approver the envelope is for has
// a Link: the prompt reached nobody (the core then counts the approver
// unreachable).
var ErrNotJoined = errors.New("approver: not connected through the in-process channel")

// NewLocal makes a channel whose prompts come from fulfillerID (a
// Client's Options.Fulfillers must name it) and whose approvers'
// envelopes to the fulfiller go to deliver, called on the approver's
// Client's goroutine (it must not wait for that approver's In).
func NewLocal(fulfillerID string, deliver func(context.Context, agent.Envelope) error) *Local {
	return &Local{from: fulfillerID, deliver: deliver, members: map[string]*localMember{}}
}

// localMember is one approver's side of a Local.
type localMember struct {
	l    *Local
	id   string
	in   chan agent.Envelope
	done chan struct{} // closed by Close: Send stops waiting for in
	once sync.Once
}

// Join connects approver id: its Link gets the envelopes addressed to
// it until Close. One Link per approver at a time: a second Join of the
// same id, before the first is closed, is refused.
func (l *Local) Join(id string) (Link, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.members[id]; ok {
		return Link{}, fmt.Errorf("approver %s is connected already", id)
	}
	m := &localMember{l: l, id: id, in: make(chan agent.Envelope, localBuffer), done: make(chan struct{})}
	l.members[id] = m
	return Link{Conn: m, In: m.in, Close: m.close}, nil
}

// Connected reports whether approver id has a Link now.
func (l *Local) Connected(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.members[id]
	return ok
}

// Send hands env, from the fulfiller, to each approver of env.To that
// has a Link, waiting while a Link's buffer is full (until ctx ends or
// the Link closes). It fails with ErrNotJoined when none has one.
func (l *Local) Send(ctx context.Context, env agent.Envelope) error {
	env.From = l.from
	agent.Stamp(&env, l.from, time.Now())
	l.mu.Lock()
	var to []*localMember
	for _, id := range env.To {
		if m, ok := l.members[id]; ok {
			to = append(to, m)
		}
	}
	l.mu.Unlock()
	if len(to) == 0 {
		return fmt.Errorf("%w: %v", ErrNotJoined, env.To)
	}
	for _, m := range to {
		select {
		case m.in <- env:
		case <-m.done:
			return fmt.Errorf("%w: %s left", ErrNotJoined, m.id)
		case <-ctx.Done():
			return fmt.Errorf("approver %s: %w", m.id, ctx.Err())
		}
	}
	return nil
}

// Offer hands env, from the fulfiller, to every approver with a Link
// whose buffer has room, without waiting: for what is told only as a
// courtesy (what became of a proposal an approver approved, which its
// Client matches to the cards it approved and otherwise ignores), so
// that the engine's observers, which must not block, can send it. An
// approver whose buffer is full misses it.
func (l *Local) Offer(env agent.Envelope) {
	env.From = l.from
	agent.Stamp(&env, l.from, time.Now())
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.members {
		select {
		case m.in <- env:
		default:
		}
	}
}

// ID is the approver's id.
func (m *localMember) ID() string { return m.id }

// Send implements Conn: env, from this approver, goes to the fulfiller
// when it is addressed to it (or to nobody in particular). From is the
// Link's approver whatever env says.
func (m *localMember) Send(ctx context.Context, env agent.Envelope) (agent.Envelope, error) {
	if env.Kind == "" {
		return env, errors.New("send: envelope has no kind")
	}
	if env.From != "" && env.From != m.id {
		return env, fmt.Errorf("send %s: from %q is not our id %q", env.Kind, env.From, m.id)
	}
	select {
	case <-m.done:
		return env, fmt.Errorf("send %s: %w", env.Kind, net.ErrClosed)
	default:
	}
	agent.Stamp(&env, m.id, time.Now())
	if len(env.To) > 0 && !slices.Contains(env.To, m.l.from) {
		return env, nil // for another approver: nobody else is here
	}
	if err := m.l.deliver(ctx, env); err != nil {
		return env, fmt.Errorf("send %s %s: %w", env.Kind, env.ID, err)
	}
	return env, nil
}

// close ends the Link: its approver no longer gets prompts, and the id
// may Join again.
func (m *localMember) close() {
	m.once.Do(func() {
		m.l.mu.Lock()
		if m.l.members[m.id] == m {
			delete(m.l.members, m.id)
		}
		m.l.mu.Unlock()
		close(m.done)
	})
}
