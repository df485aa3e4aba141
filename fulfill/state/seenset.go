package state

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// seenSet is the memory of a seenLog: the hashes of the ids seen within
// the TTL, each with the sequence of the log message that holds it. It is
// not safe for concurrent use; seenLog guards it.
//
// Ids are kept in generations, oldest first. The newest is open: a map,
// to which claims add. A generation closes when it spans a width of time
// (TTL/24) or holds seenSealAt ids, and once every id in it is published
// it is sealed into a sorted array of 16 bytes an id (a map costs about
// 50): a million-id flood then keeps about 16 MB here. A generation is
// dropped, all its ids at once, when its newest id is past the TTL, so
// an id is seen for the TTL and at most a width more.
type seenSet struct {
	ttl, width time.Duration
	gens       []*seenGen
	// sealAt is seenSealAt; a test of the generations' bookkeeping
	// makes it small, not to add hundreds of thousands of ids.
	sealAt int
}

// seenSealAt bounds how many ids an open generation (a map) holds.
const seenSealAt = 1 << 16

type seenHash [2]uint64

// seenGen holds the ids claimed from start to end.
type seenGen struct {
	start, end time.Time
	// Open: → the sequence of the message holding each id, 0 until
	// published. nil once sealed.
	ids         map[seenHash]uint64
	unpublished int
	// Sealed: sorted by hash; an id's sequence is base + off.
	base   uint64
	sealed []sealedID
}

// sealedID is an id of a sealed generation: 96 bits of its hash (a
// collision needs about 2^48 ids under one secret seed; a generation holds
// at most seenSealAt, the TTL at most what a day of proposals brings) and
// its message's sequence past the generation's base.
type sealedID struct {
	hi  uint64
	lo  uint32
	off uint32
}

func (a sealedID) cmp(b sealedID) int {
	return cmp.Or(cmp.Compare(a.hi, b.hi), cmp.Compare(a.lo, b.lo))
}

func newSeenSet(ttl time.Duration) *seenSet {
	return &seenSet{ttl: ttl, width: ttl / seenGenerations, sealAt: seenSealAt}
}

// seenGenerations is how many widths a TTL spans.
const seenGenerations = 24

// add keeps h, claimed at at, with its message's sequence (0: not yet
// published; published tells it later). It returns the generation h went
// in. at is now for a claim; a read-back entry keeps its claim's time
// unless it is past the TTL (then add keeps nothing and returns nil).
func (s *seenSet) add(now, at time.Time, h seenHash, seq uint64) *seenGen {
	if !s.within(now, at) {
		return nil
	}
	g := s.genFor(at)
	g.ids[h] = seq
	if at.After(g.end) {
		g.end = at
	}
	if seq == 0 {
		g.unpublished++
	}
	return g
}

// within reports whether an id claimed at at is still seen at now.
func (s *seenSet) within(now, at time.Time) bool { return at.Add(s.ttl).After(now) }

// genFor is the open generation an id claimed at at goes in. Ids come in
// time order but for read-back ones whose claim time came with them
// (moved from an older store, all before any claim): those go in the
// newest generation that started before them, or a new first one.
func (s *seenSet) genFor(at time.Time) *seenGen {
	n := len(s.gens)
	if n > 0 && !at.Before(s.gens[n-1].start) {
		if g := s.gens[n-1]; g.ids != nil && at.Before(g.start.Add(s.width)) && len(g.ids) < s.sealAt {
			return g
		}
		g := &seenGen{start: at, end: at, ids: map[seenHash]uint64{}}
		s.gens = append(s.gens, g)
		return g
	}
	for i := n - 1; i >= 0; i-- {
		if g := s.gens[i]; !at.Before(g.start) && g.ids != nil {
			return g
		}
	}
	g := &seenGen{start: at, end: at, ids: map[seenHash]uint64{}}
	s.gens = append([]*seenGen{g}, s.gens...)
	return g
}

// published records the sequence of the message that now holds h.
func (s *seenSet) published(g *seenGen, h seenHash, seq uint64) {
	if g.ids == nil {
		return // dropped meanwhile
	}
	if _, ok := g.ids[h]; ok {
		g.ids[h] = seq
		g.unpublished--
	}
}

// find returns the sequence of the message holding h (0: not yet
// published) and whether h is seen.
func (s *seenSet) find(h seenHash) (seq uint64, ok bool) {
	key := sealedID{hi: h[0], lo: uint32(h[1])}
	for i := len(s.gens) - 1; i >= 0; i-- {
		g := s.gens[i]
		if g.ids != nil {
			if seq, ok := g.ids[h]; ok {
				return seq, true
			}
			continue
		}
		if j, ok := slices.BinarySearchFunc(g.sealed, key, sealedID.cmp); ok {
			return g.base + uint64(g.sealed[j].off), true
		}
	}
	return 0, false
}

// tidy drops the generations whose newest id is past the TTL, and seals
// the closed ones whose ids are all published.
func (s *seenSet) tidy(now time.Time) {
	i := 0
	for i < len(s.gens) && !now.Before(s.gens[i].end.Add(s.ttl)) {
		s.gens[i].ids = nil
		i++
	}
	if i > 0 {
		clear(s.gens[:i])
		s.gens = s.gens[i:]
	}
	for j := len(s.gens) - 2; j >= 0; j-- {
		if g := s.gens[j]; g.ids != nil && g.unpublished == 0 {
			g.seal()
		}
	}
}

// seal turns a closed generation's map into its sorted array, unless its
// sequences do not fit an offset (more than 2^32 messages in one
// generation: it stays a map).
func (g *seenGen) seal() {
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, seq := range g.ids {
		lo, hi = min(lo, seq), max(hi, seq)
	}
	if len(g.ids) > 0 && hi-lo > math.MaxUint32 {
		return
	}
	sealed := make([]sealedID, 0, len(g.ids))
	for h, seq := range g.ids {
		sealed = append(sealed, sealedID{hi: h[0], lo: uint32(h[1]), off: uint32(seq - lo)})
	}
	slices.SortFunc(sealed, sealedID.cmp)
	g.base, g.sealed, g.ids = lo, sealed, nil
}
