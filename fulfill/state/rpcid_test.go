package state

import (
	"testing"
)

// The permutation of a block is a bijection, whatever its key: every id
// of the block comes out once.
func TestRPCPermIsABijection(t *testing.T) {
	for _, bits := range []uint{2, 8, 16} {
		for range 3 {
			p := newRPCPerm(bits)
			seen := make([]bool, 1<<bits)
			for i := range uint64(1) << bits {
				v := p.at(i)
				if v >= 1<<bits || seen[v] {
					t.Fatalf("bits %d: at(%d) = %d, out of range or twice", bits, i, v)
				}
				seen[v] = true
			}
		}
	}
}

// Ids are not the next of a count (issue 41, row 6): a forger who saw the
// ids so far could post cards ahead under the next ones, and the genuine
// prompt would arrive contested. Of the ids one store hands out in a row,
// next is never last+1 more than by chance, and two stores (two keys)
// hand out their blocks in different orders.
func TestRPCIDsAreNotACount(t *testing.T) {
	s := openStore(t, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m"})
	ctx := ctxT(t)
	const n = 1000
	ids := make([]int64, n)
	consecutive := 0
	for i := range ids {
		id, err := s.NextRPCID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id <= 0 || id >= 1<<53 {
			t.Fatalf("id %d out of range", id)
		}
		ids[i] = id
		if i > 0 && id == ids[i-1]+1 {
			consecutive++
		}
	}
	// A count gives n-1 consecutive pairs; a random order of a block of
	// 2^28 about n/2^28.
	if consecutive > 2 {
		t.Fatalf("%d of %d ids follow the one before: %v…", consecutive, n-1, ids[:8])
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		seen[id] = true
	}
	// A second process on a store of its own (memory): the same block
	// start, another key, another order.
	s2 := openStore(t, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m"})
	same := 0
	for i := range 100 {
		id, err := s2.NextRPCID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id == ids[i] {
			same++
		}
	}
	if same > 2 {
		t.Fatalf("two keys gave %d of 100 ids in the same place", same)
	}
}
