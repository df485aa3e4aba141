// Package poll waits in tests for a condition that nothing announces: a
// counter another goroutine bumps, a file another process writes, a page
// a browser renders. Where the code under test emits an event (a channel,
// an observer, a trace hook), wait on that instead; and never use a wait
// to show that something did not happen.
package poll

import (
	"testing"
	"time"
)

// Limit bounds every wait. It only decides how long a failing test takes
// to say so: a passing test returns as soon as its condition holds, so
// the bound is generous for a loaded 2-core CI machine.
const Limit = 30 * time.Second

// interval is short so that a test continues soon after the condition
// holds, and long enough not to take a core from the code under test.
const interval = 2 * time.Millisecond

// Until calls cond until it holds, and fails the test naming what it
// waited for when it does not hold within Limit.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Within(Limit, cond) {
		t.Fatalf("timed out after %s waiting for %s", Limit, what)
	}
}

// Within calls cond until it holds or d has passed, and reports whether
// it held: for the rare caller that must go on either way (a cleanup, a
// probe of an external process).
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}
