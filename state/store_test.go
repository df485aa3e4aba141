package state

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestEndedRecordLeavesNothingBehind: once a proposal has ended, its
// record's purge marker is gone within seconds (markerTTL), so a
// store does not hold one tombstone per finished proposal (with a minute,
// a memory store held a quarter of a million at bench load); and once it
// is gone, every guarantee that a marker could seem to carry still holds:
// the proposal stays claimed (a replay loses to the first claim), and a
// write at the record's last revision is refused.
func TestEndedRecordLeavesNothingBehind(t *testing.T) {
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
			st, err := s.js.Stream(ctx, "KV_"+s.pending.Bucket())
			if err != nil {
				t.Fatal(err)
			}
			// A fixed bound, not one made from markerTTL: markers that
			// lived a minute must fail this.
			if err := eventually(15*time.Second, func() error {
				info, err := st.Info(ctx)
				if err != nil {
					return err
				}
				if info.State.Msgs != 0 {
					return fmt.Errorf("pending bucket holds %d messages after the record ended", info.State.Msgs)
				}
				return nil
			}); err != nil {
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
