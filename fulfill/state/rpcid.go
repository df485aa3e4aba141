package state

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rpcBlockBits: one reservation hands out 2^28 JSON-RPC ids (a store
// write at start, then one per 268 million requests), so the id space
// below 2^53 holds 2^25 reservations: one a minute for 60 years. A
// restart skips what its block had left.
const rpcBlockBits = 28

// rpcIDKey is the meta key holding the group's next unreserved id.
const rpcIDKey = "rpc-next"

// NextRPCID returns a JSON-RPC id (rule 11) never returned before by any
// member of the group on this store, in this or any earlier process: ids
// are handed out from blocks reserved by compare-and-set on one counter in
// the store. Ids stay below 2^53 so JavaScript peers read them exactly.
// Only memory mode forgets its counter, with everything else, on Close.
//
// Within its block an id is not the next of a count but the count's
// image under a permutation of the block keyed at random when it is
// reserved (rpcPerm): every id of the block once, in an order nobody
// outside this process can tell. Everything fulfiller sends is broadcast,
// and an approver's client takes a second prompt under an id it has
// seen for a forgery (the card is contested): with counted ids a forger
// posted cards ahead under the next ones, and the genuine prompt arrived
// contested (issue 41, row 6).
func (s *Store) NextRPCID(ctx context.Context) (int64, error) {
	s.rpcMu.Lock()
	defer s.rpcMu.Unlock()
	if s.rpcUsed >= s.rpcSize {
		if err := s.reserveLocked(ctx); err != nil {
			return 0, err
		}
	}
	id := s.rpcStart + int64(s.rpcPerm.at(uint64(s.rpcUsed)))
	s.rpcUsed++
	return id, nil
}

// rpcPerm is a permutation of [0, 2^bits) (bits even) keyed at random: a
// Feistel network of ten rounds over two halves of bits/2, each round's
// function AES under the key, as FF1's format-preserving encryption is
// built. It is a bijection whatever the key, so ids never repeat within
// a block; without the key, the ids seen so far say nothing of the next.
type rpcPerm struct {
	block cipher.Block
	half  uint
}

// newRPCPerm makes a permutation of [0, 2^bits) under a fresh random key.
func newRPCPerm(bits uint) rpcPerm {
	key := make([]byte, 16)
	rand.Read(key) // never fails (crypto/rand)
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return rpcPerm{block: b, half: bits / 2}
}

// at is the image of i (below 2^(2·half)).
func (p rpcPerm) at(i uint64) uint64 {
	mask := uint64(1)<<p.half - 1
	l, r := i>>p.half&mask, i&mask
	var in, out [aes.BlockSize]byte
	for round := range 10 {
		in[0] = byte(round)
		binary.BigEndian.PutUint64(in[8:], r)
		p.block.Encrypt(out[:], in[:])
		l, r = r, l^(binary.BigEndian.Uint64(out[:8])&mask)
	}
	return l<<p.half | r
}

func (s *Store) reserveRPCBlock(ctx context.Context) error {
	s.rpcMu.Lock()
	defer s.rpcMu.Unlock()
	return s.reserveLocked(ctx)
}

func (s *Store) reserveLocked(ctx context.Context) (err error) {
	defer s.timed("rpcid", time.Now(), &err)
	for range 100 {
		var start int64 = 1
		var rev uint64
		e, err := s.meta.Get(ctx, rpcIDKey)
		switch {
		case err == nil:
			start, err = strconv.ParseInt(string(e.Value()), 10, 64)
			if err != nil || start < 1 {
				return fmt.Errorf("state: corrupt rpc id counter %q", e.Value())
			}
			rev = e.Revision()
		case transient(ctx, err):
			continue
		case !errNoEntry(err):
			return fmt.Errorf("state: reserve rpc ids: %w", err)
		}
		end := start + s.rpcBlockSize()
		if end >= 1<<53 {
			return errors.New("state: rpc id space exhausted")
		}
		val := []byte(strconv.FormatInt(end, 10))
		if rev == 0 {
			_, err = s.meta.Create(ctx, rpcIDKey, val)
		} else {
			_, err = s.meta.Update(ctx, rpcIDKey, val, rev)
		}
		if err == nil {
			s.rpcStart, s.rpcUsed, s.rpcSize = start, 0, end-start
			s.rpcPerm = newRPCPerm(s.rpcBits())
			return nil
		}
		if transient(ctx, err) {
			continue
		}
		if !isWrongLastSeq(err) {
			return fmt.Errorf("state: reserve rpc ids: %w", err)
		}
		// Another member reserved a block first: read again.
	}
	return errors.New("state: reserve rpc ids: too much contention")
}

// transient reports an error worth one more try after a pause: a stream
// without a responder for a moment, as while another member's Open
// updates a bucket it shares or a new replicated stream elects its leader. It waits the pause (false if ctx ends).
func transient(ctx context.Context, err error) bool {
	if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}

// rpcBits is the size of this store's blocks in bits: rpcBlockBits, or
// the smaller one a test sets (Config.rpcBlockBits) to cross blocks.
func (s *Store) rpcBits() uint {
	if b := s.cfg.rpcBlockBits; b > 0 {
		return b
	}
	return rpcBlockBits
}

func (s *Store) rpcBlockSize() int64 { return 1 << s.rpcBits() }
