package state

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// BenchmarkProposal is the store's cost of one proposal's life: its claim
// and record (ClaimRecord, as fulfill claims since issue 27; "apart" is
// the Claim then Put it replaced), Delete when answered. Run with -cpu to
// see whether concurrent proposals share fsyncs in DIR mode:
//
//	go test -run '^$' -bench Proposal -cpu 1,8 ./state/
func BenchmarkProposal(b *testing.B) {
	for _, mode := range []string{"memory", "dir"} {
		for _, claim := range []string{"record", "apart"} {
			b.Run(mode+"/"+claim, func(b *testing.B) {
				m := Mode{Kind: Memory}
				if mode == "dir" {
					m = Mode{Kind: Dir, Dir: filepath.Join(b.TempDir(), "state")}
				}
				s, err := Open(context.Background(), Config{Mode: m, Space: "bench", Member: "m"})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var n atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						id := fmt.Sprintf("p-%d", n.Add(1))
						p := samplePending(id, "m")
						if claim == "record" {
							p.Claim = "d-" + id
							if won, _, err := s.ClaimRecord(ctx, p); err != nil || !won {
								b.Errorf("ClaimRecord = %v, %v", won, err)
								return
							}
						} else {
							if won, err := s.Claim(ctx, id); err != nil || !won {
								b.Errorf("Claim = %v, %v", won, err)
								return
							}
							if err := s.Put(ctx, p); err != nil {
								b.Error(err)
								return
							}
						}
						if err := s.Delete(ctx, p); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
