package agent

import (
	"slices"
	"strings"
	"sync"
)

// DefaultSubscriptionBuffer is the channel capacity of a subscription that
// asks for none.
const DefaultSubscriptionBuffer = 256

// SubscribeOptions select which received envelopes a subscription gets.
// Own echoes are never delivered; envelopes in our name that we did not
// write only with Impersonations.
type SubscribeOptions struct {
	// Kinds are exact kinds or globs like "mcp/*"; empty means all kinds.
	Kinds []string
	// All also delivers envelopes addressed (to) to others. The gateway
	// broadcasts everything, so a fulfiller watching the whole space (an
	// mcp/request by another fulfiller, answers to others) sets it; by
	// default only envelopes addressed to us or to everyone arrive.
	All bool
	// Impersonations also delivers envelopes whose from is this Client's
	// id but which it never wrote (an id it did not send, or a second
	// echo of one it did): the gateway passes any from through, so they
	// are another participant speaking in our name (docs/design.md rule 14).
	// Only they carry our own id in from.
	Impersonations bool
	// Buffer is the channel capacity; default 256. A full buffer makes the
	// Client wait (see Client): it never drops envelopes.
	Buffer int
}

// Subscription is a stream of received envelopes, in the order the gateway
// sent them.
type Subscription struct {
	c     *Client
	ch    chan Envelope
	kinds []string
	all   bool
	imp   bool

	done      chan struct{} // closed by Close; unblocks a waiting delivery
	closeOnce sync.Once
	mu        sync.Mutex // held while delivering, so Close can close ch safely
}

// Subscribe starts receiving envelopes that match opts. Envelopes received
// before the call are not replayed; system/welcome subscribers get the
// welcome of every re-established session. Close the subscription when
// done: an unread one holds up the Client.
func (c *Client) Subscribe(opts SubscribeOptions) *Subscription {
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultSubscriptionBuffer
	}
	s := &Subscription{
		c:     c,
		ch:    make(chan Envelope, opts.Buffer),
		kinds: slices.Clone(opts.Kinds),
		all:   opts.All,
		imp:   opts.Impersonations,
		done:  make(chan struct{}),
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		// Copy on write: dispatch reads the slice without holding the lock.
		c.subs = append(slices.Clip(c.subs), s)
	}
	c.mu.Unlock()
	if closed {
		s.Close()
	}
	return s
}

// C returns the channel of envelopes. It is closed after Close, or when the
// Client is closed.
func (s *Subscription) C() <-chan Envelope { return s.ch }

// Close stops the subscription and closes C. A delivery waiting on a full
// buffer is abandoned, so a consumer that stops reading can always let the
// Client go on.
func (s *Subscription) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.c.removeSub(s)
		s.mu.Lock()
		close(s.ch)
		s.mu.Unlock()
	})
}

func (c *Client) removeSub(s *Subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.subs, s); i >= 0 {
		c.subs = slices.Delete(slices.Clone(c.subs), i, i+1)
	}
}

// wants reports whether the subscription takes env; self is our own id.
func (s *Subscription) wants(self string, env *Envelope) bool {
	if env.From == self && !s.imp {
		return false
	}
	if !s.all && !env.AddressedTo(self) {
		return false
	}
	if len(s.kinds) == 0 {
		return true
	}
	for _, k := range s.kinds {
		if k == env.Kind || (strings.Contains(k, "*") && globMatch(k, env.Kind)) {
			return true
		}
	}
	return false
}

// deliver waits until env is in the buffer, the subscription is closed or
// the Client closes.
func (s *Subscription) deliver(env Envelope, clientDone <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.ch <- env:
		return true
	case <-s.done:
	case <-clientDone:
	}
	return false
}

// dispatch hands env to every subscription that wants it, waiting on full
// buffers (backpressure).
func (c *Client) dispatch(env Envelope) {
	c.mu.Lock()
	subs := c.subs
	c.mu.Unlock()
	for _, s := range subs {
		if s.wants(c.cfg.ID, &env) && s.deliver(env, c.ctx.Done()) {
			c.stats.delivered.Add(1)
		}
	}
}
