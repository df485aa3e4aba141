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
