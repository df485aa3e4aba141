package fulfill

import (
	"testing"
)

func queuedFrom(from, id string) *proposal {
	p := &proposal{}
	p.env.From, p.env.ID = from, id
	return p
}

// Slots go to the queued proposers in turn, never past one proposer's
// share, and calls that ended while queued are skipped.
func TestSlotsAreSharedInTurn(t *testing.T) {
	s := newSlots(4, 2)
	waiting := func(p *proposal) bool { return p.env.ID != "m-gone" }
	// mallory holds her share; coder and bob hold nothing.
	s.take("mallory")
	s.take("mallory")
	if s.free("mallory") || !s.free("coder") {
		t.Fatal("share not applied")
	}
	for _, p := range []*proposal{queuedFrom("mallory", "m3"), queuedFrom("mallory", "m-gone"), queuedFrom("mallory", "m4"),
		queuedFrom("coder", "c1"), queuedFrom("coder", "c2"), queuedFrom("coder", "c3"), queuedFrom("bob", "b1")} {
		s.enqueue(p)
	}
	var order []string
	for p := s.next(waiting); p != nil; p = s.next(waiting) {
		order = append(order, p.env.ID)
		s.take(p.env.From)
	}
	// Two free slots: coder, then bob (mallory is at her share).
	if got := join(order); got != "c1 b1" {
		t.Fatalf("started %q, want c1 b1", got)
	}
	// mallory's slot frees: she was passed over while at her share, so
	// her next call goes before coder's second.
	s.give("mallory")
	if p := s.next(waiting); p == nil || p.env.ID != "m3" {
		t.Fatalf("after mallory's slot freed: %v", p)
	}
	s.take("mallory")
	s.give("mallory")
	// Her ended call is skipped on the way to her next live one, but
	// coder comes first: mallory just had her turn.
	if p := s.next(waiting); p == nil || p.env.ID != "c2" {
		t.Fatalf("after mallory's second slot freed: %v", p)
	}
	s.take("coder")
	s.give("bob")
	if p := s.next(waiting); p == nil || p.env.ID != "m4" {
		t.Fatalf("after bob's slot freed: %v", p)
	}
	s.take("mallory")
	if s.used != 4 || s.waiting() != 1 || s.next(waiting) != nil {
		t.Fatalf("used %d, waiting %d; want 4, 1 and nothing to start", s.used, s.waiting())
	}
}

func join(ids []string) string {
	out := ""
	for i, id := range ids {
		if i > 0 {
			out += " "
		}
		out += id
	}
	return out
}

// waiting is how many calls are queued.
func (s *slots) waiting() int {
	n := 0
	for _, q := range s.queued {
		n += len(q)
	}
	return n
}
