package state

import (
	"testing"
	"time"
)

// The seen set's generations: every id is found, with its message's
// sequence, before and after its generation is sealed; a generation is
// sealed only once all its ids are published; ids go at the TTL, not
// before, and at most a width after.
func TestSeenSetGenerations(t *testing.T) {
	const ttl = 24 * time.Hour
	s := newSeenSet(ttl)
	// The bound is one comparison whatever its value: a small one checks
	// the same bookkeeping without the 200 000 map writes that seenSealAt
	// took, seconds of CPU under -race.
	s.sealAt = 1 << 10
	t0 := time.Unix(1_800_000_000, 0)
	h := func(i int) seenHash { return seenHash{uint64(i) * 0x9e3779b97f4a7c15, uint64(i) ^ 0xdeadbeef} }
	n := 3*s.sealAt + 100
	gens := make([]*seenGen, n)
	for i := range n {
		gens[i] = s.add(t0, t0, h(i), 0)
	}
	if len(s.gens) != 4 {
		t.Fatalf("%d ids made %d generations; want 4 (%d ids each at most)", n, len(s.gens), s.sealAt)
	}
	// Published out of order but for the first id: its generation stays
	// a map.
	for i := n - 1; i > 0; i-- {
		s.published(gens[i], h(i), uint64(1000+i))
	}
	s.tidy(t0)
	if s.gens[0].ids == nil || s.gens[1].ids != nil || s.gens[2].ids != nil || s.gens[3].ids == nil {
		t.Fatalf("sealed: %v %v %v %v; want the closed, published ones only (false true true false)",
			s.gens[0].ids == nil, s.gens[1].ids == nil, s.gens[2].ids == nil, s.gens[3].ids == nil)
	}
	s.published(gens[0], h(0), 1000)
	s.tidy(t0)
	if s.gens[0].ids != nil {
		t.Fatal("first generation not sealed once its last id was published")
	}
	for i := range n {
		if seq, ok := s.find(h(i)); !ok || seq != uint64(1000+i) {
			t.Fatalf("find(id %d) = %d, %v; want %d, true", i, seq, ok, 1000+i)
		}
	}
	if _, ok := s.find(h(n)); ok {
		t.Fatal("an id never added is found")
	}
	// A later id, an hour on: a generation of its own.
	later := t0.Add(time.Hour)
	s.add(later, later, h(n), 0)
	s.tidy(t0.Add(ttl - time.Second))
	if _, ok := s.find(h(0)); !ok {
		t.Fatal("id forgotten before its TTL")
	}
	s.tidy(t0.Add(ttl))
	if _, ok := s.find(h(0)); ok {
		t.Fatal("id still seen at its TTL")
	}
	if _, ok := s.find(h(n)); !ok {
		t.Fatal("a later id forgotten with the earlier ones")
	}
	s.tidy(later.Add(ttl + s.width))
	if len(s.gens) != 0 {
		t.Fatalf("%d generations left after every TTL", len(s.gens))
	}
}

// Read-back ids past the TTL are not kept; those with an older claim time
// than the newest generation go in an older one.
func TestSeenSetReadBack(t *testing.T) {
	s := newSeenSet(time.Hour)
	now := time.Unix(1_800_000_000, 0)
	if g := s.add(now, now.Add(-time.Hour), seenHash{1, 1}, 7); g != nil {
		t.Fatal("an id past its TTL was kept")
	}
	s.add(now, now.Add(-time.Minute), seenHash{2, 2}, 8)
	s.add(now, now.Add(-50*time.Minute), seenHash{3, 3}, 9)
	for _, c := range []struct {
		h   seenHash
		seq uint64
	}{{seenHash{2, 2}, 8}, {seenHash{3, 3}, 9}} {
		if seq, ok := s.find(c.h); !ok || seq != c.seq {
			t.Fatalf("find(%v) = %d, %v; want %d", c.h, seq, ok, c.seq)
		}
	}
	s.tidy(now.Add(10*time.Minute + time.Second))
	if _, ok := s.find(seenHash{3, 3}); ok {
		t.Fatal("read-back id kept past its own TTL")
	}
	if _, ok := s.find(seenHash{2, 2}); !ok {
		t.Fatal("read-back id dropped before its TTL")
	}
}
