package state

import (
	"context"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Local keeps the pending work of one process in its memory: records,
// claims and seen ids in maps, lost when the process ends. It is the store
// of `fulfiller bench --state none` (the decision path with nothing
// persisted: the baseline the real stores are measured against) and of the
// fulfill package's tests that need no NATS. `run` never uses it: there the
// store is JetStream in every mode (docs/design.md "Durable and shared
// pending work").
//
// It keeps Store's contract for a group of one, so that the Fulfiller has
// one code path whatever the store: a claim wins an id once while the id
// is remembered (the last SeenIDs ids); Update, MarkAnswered and Delete
// compare and set on Rev; a written Request is never rewritten;
// Take refuses a record being answered or fulfilled. Nobody else writes
// its records, so its watches never report anything, and no member lapses.
type Local struct {
	member  string
	pending atomic.Int64

	mu      sync.Mutex
	rev     uint64
	records map[string]*lifecycle.Proposal
	// seen: proposal id → the claim's decision id. Used under mu only,
	// so the LRU without a lock of its own (one lock pair fewer a claim).
	seen *simplelru.LRU[string, string]
}

// SeenIDs is how many claimed proposal ids a Local remembers for rule 5
// (a replayed id is ignored): the same bound the Fulfiller's own seen set
// has without a store.
const SeenIDs = 1 << 16

// NewLocal makes an empty Local for the member id.
func NewLocal(member string) *Local {
	seen, _ := simplelru.NewLRU[string, string](SeenIDs, nil)
	return &Local{member: member, records: map[string]*lifecycle.Proposal{}, seen: seen}
}

// InProcess is true: every call returns without I/O, so a caller needs no
// goroutines to wait on it (fulfill claims on its reader).
func (l *Local) InProcess() bool { return true }

// Persistent is false: the records die with the process.
func (l *Local) Persistent() bool { return false }

// Shared reports false: a Local store is this process's alone.
func (l *Local) Shared() bool { return false }

// Member is the member id the records are owned by.
func (l *Local) Member() string { return l.member }

// ClaimRecord writes p as the claim of its id (see Store.ClaimRecord): lost
// when a record exists or the id was claimed with another decision id.
func (l *Local) ClaimRecord(_ context.Context, p *lifecycle.Proposal) (won bool, winner string, err error) {
	if p.Claim == "" {
		return false, "", fmt.Errorf("state: claim %q: no decision id", truncate(p.ID))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.records[p.ID]; ok {
		return false, claimOf(r), nil
	}
	if c, ok := l.seen.Get(p.ID); ok && c != p.Claim {
		return false, c, nil
	}
	l.seen.Add(p.ID, p.Claim)
	p.Owner = l.member
	l.put(p)
	return true, p.Claim, nil
}

// ClaimDecision claims an id without a record (see Store.ClaimDecision).
func (l *Local) ClaimDecision(_ context.Context, proposalID, decisionID string) (won bool, winner string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.records[proposalID]; ok {
		return false, claimOf(r), nil
	}
	if c, ok := l.seen.Get(proposalID); ok {
		return false, c, nil
	}
	l.seen.Add(proposalID, decisionID)
	return true, decisionID, nil
}

// Reclaim reports whether p's claim still holds its id (see Store.Reclaim).
func (l *Local) Reclaim(_ context.Context, p *lifecycle.Proposal) (bool, error) {
	if p.Claim == "" {
		return true, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.seen.Get(p.ID)
	if !ok {
		l.seen.Add(p.ID, p.Claim)
		return true, nil
	}
	return c == p.Claim, nil
}

// Update replaces the record at p.Rev (see Store.Update).
func (l *Local) Update(_ context.Context, p *lifecycle.Proposal) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.update(p)
}

// UpdateSoon is Update: nothing here waits for a disk.
func (l *Local) UpdateSoon(ctx context.Context, p *lifecycle.Proposal) error { return l.Update(ctx, p) }

// MarkAnswered is Update for a record moving to phase Answered.
func (l *Local) MarkAnswered(_ context.Context, p *lifecycle.Proposal) error {
	if p.Phase != Answered || p.Reject == nil || p.Reject.EnvelopeID == "" {
		return fmt.Errorf("state: mark %q answered: phase %q with reject %+v", truncate(p.ID), p.Phase, p.Reject)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.update(p)
}

func (l *Local) update(p *lifecycle.Proposal) error {
	cur, ok := l.records[p.ID]
	if !ok || cur.Rev != p.Rev {
		return ErrConflict
	}
	if cur.Request != nil && (p.Request == nil || !reflect.DeepEqual(*cur.Request, *p.Request)) {
		return ErrRequestRewritten
	}
	l.put(p)
	return nil
}

// put stores a copy of p at the next revision, which p gets too.
func (l *Local) put(p *lifecycle.Proposal) {
	l.rev++
	p.Rev = l.rev
	l.records[p.ID] = cloneRecord(p)
}

// Delete removes the record at p.Rev (see Store.Delete).
func (l *Local) Delete(_ context.Context, p *lifecycle.Proposal) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, ok := l.records[p.ID]
	if !ok || cur.Rev != p.Rev {
		return ErrConflict
	}
	delete(l.records, p.ID)
	return nil
}

// List returns copies of every record, in proposal id order.
func (l *Local) List(context.Context) ([]*lifecycle.Proposal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*lifecycle.Proposal, 0, len(l.records))
	for _, r := range l.records {
		out = append(out, cloneRecord(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Owned is List: every record is this member's.
func (l *Local) Owned(ctx context.Context) ([]*lifecycle.Proposal, error) { return l.List(ctx) }

// Members is this member alone, with no capacity of its own to add up:
// the Fulfiller's own limits are the only ones.
func (l *Local) Members(context.Context) ([]MemberInfo, error) {
	return []MemberInfo{{ID: l.member, Pending: int(l.pending.Load())}}, nil
}

// SetPending is what Members reports as this member's pending work.
func (l *Local) SetPending(n int) { l.pending.Store(int64(n)) }

// WatchLapsed reports nothing: no other member holds a lease. The channel
// is closed when ctx ends.
func (l *Local) WatchLapsed(ctx context.Context) (<-chan string, error) {
	return closedAtEnd[string](ctx), nil
}

// Adopt adopts nothing: there is no other member.
func (l *Local) Adopt(context.Context, string) ([]*lifecycle.Proposal, error) { return nil, nil }

// Get returns a copy of one record (ErrNotFound).
func (l *Local) Get(_ context.Context, proposalID string) (*lifecycle.Proposal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.records[proposalID]
	if !ok {
		return nil, ErrNotFound
	}
	return cloneRecord(r), nil
}

// Take moves a record to this member (see Store.Take): it is already, so
// only its refusals and a new revision remain.
func (l *Local) Take(_ context.Context, proposalID string) (*lifecycle.Proposal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.records[proposalID]
	switch {
	case !ok:
		return nil, ErrNotFound
	case r.Phase == Answered:
		return nil, ErrAnswered
	case r.Request != nil:
		return nil, ErrFulfilling
	}
	p := cloneRecord(r)
	p.Owner = l.member
	l.put(p)
	return p, nil
}

// WatchRecords reports nothing: only this member writes the records. The
// channel is closed when ctx ends.
func (l *Local) WatchRecords(ctx context.Context) (<-chan RecordChange, error) {
	return closedAtEnd[RecordChange](ctx), nil
}

// closedAtEnd is a channel nothing is sent on, closed when ctx ends (no
// goroutine waits for it meanwhile).
func closedAtEnd[T any](ctx context.Context) <-chan T {
	ch := make(chan T)
	context.AfterFunc(ctx, func() { close(ch) })
	return ch
}

// cloneRecord copies what a caller may change in place: the slices and
// the structs pointed to. Raw JSON is never changed in place.
func cloneRecord(p *lifecycle.Proposal) *lifecycle.Proposal {
	q := *p
	q.Prompts = slices.Clone(p.Prompts)
	q.Approvals = slices.Clone(p.Approvals)
	if p.Escalation != nil {
		x := *p.Escalation
		x.Approvers = slices.Clone(x.Approvers)
		q.Escalation = &x
	}
	if p.Request != nil {
		r := *p.Request
		q.Request = &r
	}
	if p.Task != nil {
		t := *p.Task
		q.Task = &t
	}
	if p.Reject != nil {
		r := *p.Reject
		q.Reject = &r
	}
	if p.Relay != nil {
		r := *p.Relay
		q.Relay = &r
	}
	return &q
}
