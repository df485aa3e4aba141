package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rpcBlock is how many JSON-RPC ids one reservation hands out. One store
// write per 4096 requests; at most that many ids are skipped per restart.
const rpcBlock = 1 << 12

// rpcIDKey is the meta key holding the group's next unreserved id.
const rpcIDKey = "rpc-next"

// NextRPCID returns a JSON-RPC id (rule 11) never returned before by any
// member of the group on this store, in this or any earlier process: ids
// are handed out from blocks reserved by compare-and-set on one counter in
// the store. Ids stay below 2^53 so JavaScript peers read them exactly.
// Only memory mode forgets its counter, with everything else, on Close.
func (s *Store) NextRPCID(ctx context.Context) (int64, error) {
	s.rpcMu.Lock()
	defer s.rpcMu.Unlock()
	if s.rpcNext >= s.rpcEnd {
		if err := s.reserveLocked(ctx); err != nil {
			return 0, err
		}
	}
	id := s.rpcNext
	s.rpcNext++
	return id, nil
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
		end := start + rpcBlock
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
			s.rpcNext, s.rpcEnd = start, end
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
