package agent

import "sync"

// Outbox keeps envelopes that must reach the gateway but could not be
// written when they were due (the link was down), until the Client has a
// session again; see Client.SendOrQueue. The Client takes everything on
// each flush and puts back what it could not write.
//
// The in-memory outbox loses its content with the process; an
// implementation backed by the state store can keep it across restarts.
type Outbox interface {
	// Put keeps env, after everything kept before it.
	Put(env Envelope)
	// Take removes and returns everything kept, oldest first.
	Take() []Envelope
	// Len reports how many envelopes are kept.
	Len() int
}

// OutboxDoner is implemented by an Outbox that must know when an
// envelope it gave out on Take is no longer its concern: written to the
// gateway, or dropped for good (our capabilities no longer permit it, it
// cannot be encoded). A durable outbox then removes it from its store.
// Envelopes put back after Take are not done.
type OutboxDoner interface {
	Done(env Envelope)
}

// MemoryOutbox is an Outbox in memory with a bound: when it is full, the
// oldest envelope is dropped to make room, and counted in Dropped.
type MemoryOutbox struct {
	mu      sync.Mutex
	envs    []Envelope
	limit   int
	dropped uint64
}

// NewMemoryOutbox makes an outbox for at most limit envelopes (at least 1).
func NewMemoryOutbox(limit int) *MemoryOutbox {
	return &MemoryOutbox{limit: max(limit, 1)}
}

// Put keeps env, dropping the oldest envelope when the outbox is full.
func (o *MemoryOutbox) Put(env Envelope) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.envs) >= o.limit {
		o.envs[0] = Envelope{}
		o.envs = o.envs[1:]
		o.dropped++
	}
	o.envs = append(o.envs, env)
}

// Take removes and returns everything kept, oldest first.
func (o *MemoryOutbox) Take() []Envelope {
	o.mu.Lock()
	defer o.mu.Unlock()
	envs := o.envs
	o.envs = nil
	return envs
}

// Len reports how many envelopes are kept.
func (o *MemoryOutbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.envs)
}

// Dropped reports how many envelopes were dropped because the outbox was
// full.
func (o *MemoryOutbox) Dropped() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}
