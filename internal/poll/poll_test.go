package poll

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	ft := &fakeT{TB: t}
	Until(ft, "three", func() bool { return n.Load() == 3 })
	if ft.failed != "" {
		t.Fatalf("Until failed: %s", ft.failed)
	}
}

func TestWithinGivesUp(t *testing.T) {
	calls := 0
	if Within(20*time.Millisecond, func() bool { calls++; return false }) {
		t.Fatal("Within reported a condition that never held")
	}
	if calls < 2 {
		t.Fatalf("cond called %d times, want it asked again until the deadline", calls)
	}
}

// UntilServed asks a process less and less often while it is not ready:
// over 300ms, about 20 times rather than Until's 150.
func TestUntilServedBacksOff(t *testing.T) {
	start := time.Now()
	calls := 0
	ft := &fakeT{TB: t}
	UntilServed(ft, "300ms", func() bool { calls++; return time.Since(start) >= 300*time.Millisecond })
	if ft.failed != "" {
		t.Fatalf("UntilServed failed: %s", ft.failed)
	}
	if calls > 40 || calls < 2 {
		t.Errorf("cond called %d times in %s, want between 2 and 40", calls, time.Since(start))
	}
}
