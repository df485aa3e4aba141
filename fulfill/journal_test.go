package fulfill

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// watchRecorder is a Recorder (the decision log) beside a watcher (the
// metrics, the demo): what each heard, in order.
type watchRecorder struct {
	mu       sync.Mutex
	recorded []Event
}

func (r *watchRecorder) Observe(e Event) {
	r.mu.Lock()
	r.recorded = append(r.recorded, e)
	r.mu.Unlock()
}
func (r *watchRecorder) Record(e Event) error {
	r.Observe(e)
	return nil
}

type watcher struct {
	mu   sync.Mutex
	seen []Event
}

func (w *watcher) Observe(e Event) { w.mu.Lock(); w.seen = append(w.seen, e); w.mu.Unlock() }

func (w *watcher) stages() []Stage {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Stage
	for _, e := range w.seen {
		out = append(out, e.Stage)
	}
	return out
}

// The journal turns the core's lines into the events observers have
// always had; an answer's line is written ahead to the decision log and
// told to the watchers only once its envelope is written.
func TestJournalWritesAnswersAheadAndAnnouncesThemWritten(t *testing.T) {
	t.Parallel()
	rec, watch := &watchRecorder{}, &watcher{}
	j := newJournal(Observers{rec, watch}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	line := lifecycle.Line{ProposalID: "p1", DecisionID: "d1", Revision: "r1", Proposer: "agent", Method: "tools/call", Tool: "rm", Target: "files"}
	at := func(stage string, fill func(*lifecycle.Line)) lifecycle.Line {
		l := line
		l.Stage = stage
		if fill != nil {
			fill(&l)
		}
		return l
	}
	j.Log(ctx, at("received", nil))
	j.Log(ctx, at("decided", nil)) // the policy step's event is the decided line
	j.Log(ctx, at("fulfilling", nil))
	if got, want := watch.stages(), []Stage{StageReceived}; !reflect.DeepEqual(got, want) {
		t.Fatalf("watchers heard %v before the request was written, want %v", got, want)
	}
	j.written("p1", "req-1")
	j.Log(ctx, at("fulfilled", func(l *lifecycle.Line) {
		l.Result, l.By, l.Latency = json.RawMessage(`{"ok":true}`), []string{"alice"}, 3*time.Millisecond
	}))
	if got, want := watch.stages(), []Stage{StageReceived, StageFulfilling, StageFulfilled}; !reflect.DeepEqual(got, want) {
		t.Fatalf("watchers heard %v, want %v", got, want)
	}
	rec.mu.Lock()
	recorded := append([]Event(nil), rec.recorded...)
	rec.mu.Unlock()
	var stages []Stage
	for _, e := range recorded {
		stages = append(stages, e.Stage)
	}
	if want := []Stage{StageReceived, StageFulfilling, StageFulfilled}; !reflect.DeepEqual(stages, want) {
		t.Fatalf("decision log has %v, want %v (fulfilling written ahead, no core decided line)", stages, want)
	}
	got := recorded[2]
	if got.ProposalID != "p1" || got.DecisionID != "d1" || got.Revision != "r1" || got.Proposer != "agent" || got.Method != "tools/call" ||
		got.Tool != "rm" || got.Target != "files" || string(got.Result) != `{"ok":true}` || !reflect.DeepEqual(got.By, []string{"alice"}) ||
		got.Latency != 3*time.Millisecond || got.Time.IsZero() {
		t.Fatalf("fulfilled event = %+v: the line's fields lost", got)
	}
}

// An answer that is not written is reported undelivered, never as
// written; shutdown counts the rejects owed and how many were not
// written.
func TestJournalReportsUndeliveredAndCountsShutdownAnswers(t *testing.T) {
	t.Parallel()
	watch := &watcher{}
	j := newJournal(Observers{&watchRecorder{}, watch}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	j.closed()
	for _, id := range []string{"p1", "p2"} {
		j.Log(ctx, lifecycle.Line{Stage: "rejected", ProposalID: id, DecisionID: "d-" + id, Proposer: "agent", Reason: "other"})
	}
	j.written("p1", "rej-1")
	j.undelivered("p2", "mcp/reject", UndeliveredNotWritten, "gateway gone")
	if got, want := watch.stages(), []Stage{StageRejected, StageUndelivered}; !reflect.DeepEqual(got, want) {
		t.Fatalf("watchers heard %v, want %v", got, want)
	}
	watch.mu.Lock()
	u := watch.seen[1]
	watch.mu.Unlock()
	if u.ProposalID != "p2" || u.DecisionID != "d-p2" || u.Proposer != "agent" || u.Envelope != "mcp/reject" || u.Reason != UndeliveredNotWritten || u.Message != "gateway gone" {
		t.Fatalf("undelivered event = %+v", u)
	}
	if owed, unwritten := j.shutdownAnswers(); owed != 2 || unwritten != 1 {
		t.Fatalf("shutdown answers = %d owed, %d unwritten; want 2, 1", owed, unwritten)
	}
}
