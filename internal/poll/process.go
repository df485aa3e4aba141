package poll

import (
	"testing"
	"time"
)

// slowest is the longest pause between two tries of UntilServed.
const slowest = 20 * time.Millisecond

// UntilServed is Until for a condition that asks another process: an HTTP
// request to a fulfiller under test (/readyz, /metrics, the operator
// API). It tries at Until's pace at first and then less and less often,
// up to every 20ms: a process starting under -race takes a second or more,
// and asked every 2ms it spends a good part of a core answering that it
// is not ready yet, on a machine where the tests beside it need the core.
func UntilServed(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Limit)
	for pause := interval; !cond(); pause = min(2*pause, slowest) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", Limit, what)
		}
		time.Sleep(pause)
	}
}
