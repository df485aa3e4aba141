package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestEndedRecordLeavesNothingBehind: once a proposal has ended, its
// record's purge marker is gone within seconds (markerTTL), so a
// store does not hold one tombstone per finished proposal (with a minute,
// a memory store held a quarter of a million at bench load); and once it
// is gone, every guarantee that a marker could seem to carry still holds:
// the proposal stays claimed (a replay loses to the first claim), and a
// write at the record's last revision is refused.
func TestEndedRecordLeavesNothingBehind(t *testing.T) {
	t.Parallel() // a space of its own on the shared cluster
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t, "m1")
			ctx := ctxT(t)
			p := claimRec("ended", "d1")
			if won, _, err := s.ClaimRecord(ctx, p); err != nil || !won {
				t.Fatalf("ClaimRecord = %v, %v", won, err)
			}
			if err := s.Delete(ctx, p); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if s.pending == nil {
				// Alone: the record log forgets the record at once;
				// its stream keeps writes until the next snapshot
				// (TestRecordLogSnapshotBoundsTheStream).
				if _, err := s.recordLog.get(ctx, key(p.ID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
					t.Fatalf("record log get after Delete = %v, want not found", err)
				}
			} else if err := markersExpire(ctx, s); err != nil {
				t.Fatal(err)
			}
			if won, winner, err := s.ClaimRecord(ctx, claimRec("ended", "d2")); err != nil || won || winner != "d1" {
				t.Fatalf("replay after the marker expired: ClaimRecord = %v, %q, %v; want lost to d1", won, winner, err)
			}
			if err := s.Update(ctx, p); !errors.Is(err, ErrConflict) {
				t.Fatalf("Update of the ended record at its last revision = %v, want ErrConflict", err)
			}
		})
	}
}

// markersExpire waits until a group's pending bucket holds no message.
func markersExpire(ctx context.Context, s *Store) error {
	st, err := s.js.Stream(ctx, "KV_"+s.pending.Bucket())
	if err != nil {
		return err
	}
	// A fixed bound, not one made from markerTTL: markers that
	// lived a minute must fail this.
	return eventually(15*time.Second, func() error {
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("pending bucket holds %d messages after the record ended", info.State.Msgs)
		}
		return nil
	})
}

// A bucket whose creation is never answered (a cluster's meta leader lost
// the request) is tried again after one try's time, not waited for until
// Open's context ends.
func TestOpenTriesALostBucketCreationAgain(t *testing.T) {
	defer func(d time.Duration, f func(context.Context, jetstream.JetStream, jetstream.KeyValueConfig) (jetstream.KeyValue, error)) {
		bucketAttempt, createKeyValue = d, f
	}(bucketAttempt, createKeyValue)
	bucketAttempt = 500 * time.Millisecond
	real := createKeyValue
	var mu sync.Mutex
	lost := 0
	createKeyValue = func(ctx context.Context, js jetstream.JetStream, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		mu.Lock()
		first := lost == 0 && strings.HasPrefix(c.Bucket, "fulfiller_grants_")
		if first {
			lost++
		}
		mu.Unlock()
		if first {
			<-ctx.Done() // the answer never comes
			return nil, ctx.Err()
		}
		return real(ctx, js, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Mode: Mode{Kind: Memory}, Space: "s", Member: "m"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if lost != 1 {
		t.Fatalf("%d grants creations lost, want the first", lost)
	}
	if err := s.PutGrant(ctx, &Grant{ID: "g1", Expires: time.Now().Add(time.Hour), Doc: []byte(`{}`)}); err != nil {
		t.Fatalf("the grants bucket does not take a grant after the second try: %v", err)
	}
}
