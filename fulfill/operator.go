package fulfill

import (
	"fmt"
	"sort"
)

// Pending lists the proposals that still wait for something, oldest first.
func (f *Fulfiller) Pending() []Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Snapshot
	for _, p := range f.store.all() {
		if !p.State().Terminal() {
			out = append(out, p.snapshot())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Received.Before(out[j].Received) })
	return out
}

// Get returns one pending proposal.
func (f *Fulfiller) Get(id string) (Snapshot, bool) {
	p, ok := f.store.get(id)
	if !ok || p.State().Terminal() {
		return Snapshot{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return p.snapshot(), true
}

// Cancel rejects a pending proposal on an operator's behalf, with reason
// "other" and a message naming the operator action. A proposal whose
// fulfilment request is already out cannot be cancelled this way.
func (f *Fulfiller) Cancel(id, by string) error {
	p, ok := f.store.get(id)
	if !ok || p.State().Terminal() {
		return fmt.Errorf("cancel %s: %w", id, ErrUnknownProposal)
	}
	prev, ok := f.transition(p, StateRejected, notAnswered)
	if !ok {
		return fmt.Errorf("cancel %s: %w", id, ErrAnswered)
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(id, escalationCancel(p, "cancelled"))
	}
	msg := "cancelled by the operator"
	if by != "" {
		msg += " (" + by + ")"
	}
	f.answerReject(p, "other", msg)
	return nil
}

// Tools lists every tool discovered in the space.
func (f *Fulfiller) Tools() []ToolInfo { return f.catalog.all() }

// Counts reports pending and in-flight work, for metrics and /readyz.
func (f *Fulfiller) Counts() (pending, inflight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live, f.inflight
}
