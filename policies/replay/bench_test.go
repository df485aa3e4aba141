package replay

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
)

// benchLog is a log of at least lines lines from the real writer: a third
// of the proposals escalate, and each escalation is answered (approved or
// declined) four proposals later, so proposals interleave.
func benchLog(b *testing.B, lines int) []byte {
	lb := newLog(b, decisionlog.Options{})
	tools := []string{"read_file", "write_file", "delete_file"}
	for i := 0; lb.n < lines; i++ {
		id := fmt.Sprintf("b%d", i)
		switch i % 3 {
		case 0:
			lb.decide(id, "coder", tools[0], "/srv/app/x", decision.Decision{Action: decision.Fulfill})
			lb.outcome(id, fulfill.StageFulfilling, "")
		case 1:
			lb.decide(id, "coder", tools[1], "/srv/app/x", decision.Decision{Action: decision.Escalate})
		case 2:
			lb.decide(id, "coder", tools[2], "/srv/app/x", decision.Decision{Action: decision.Reject, Reason: "policy"})
			lb.outcome(id, fulfill.StageRejected, "policy")
		}
		if i >= 4 && (i-4)%3 == 1 {
			prev := fmt.Sprintf("b%d", i-4)
			if i%2 == 0 {
				lb.answer(prev, "alice", "accept", true)
				lb.outcome(prev, fulfill.StageApproved, "")
			} else {
				lb.answer(prev, "alice", "decline", false)
				lb.outcome(prev, fulfill.StageRejected, decision.ReasonDisagree)
			}
		}
	}
	return lb.bytes()
}

// BenchmarkReplay replays a 100k-line log with the mixed policy; the
// allocations per line are what bounded memory depends on.
func BenchmarkReplay(b *testing.B) {
	log := benchLog(b, 100_000)
	eng := engine(b, mixedPolicy)
	lines := bytes.Count(log, []byte("\n"))
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	b.ResetTimer()
	var rep *Report
	for b.Loop() {
		var err error
		rep, err = Replay(b.Context(), bytes.NewReader(log), eng, Options{OnChange: func(Change) error { return nil }})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if rep.Malformed.Count != 0 || rep.Replayed == 0 {
		b.Fatalf("report %+v", rep)
	}
	b.ReportMetric(float64(lines), "lines/op")
	b.ReportMetric(float64(rep.Pending.Peak), "peak-held")
}
