package clocktest

import (
	"testing"
	"time"
)

func TestManualFiresDueTimersInOrderAtTheirTime(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	c := New(t0)
	var fired []time.Duration
	record := func() { fired = append(fired, c.Now().Sub(t0)) }
	c.AfterFunc(2*time.Second, record)
	c.AfterFunc(time.Second, record)
	stop := c.AfterFunc(1500*time.Millisecond, record)
	c.AfterFunc(5*time.Second, record)
	if !stop() || stop() {
		t.Fatal("stop should report true once, then false")
	}
	if n := c.Armed(); n != 3 {
		t.Fatalf("Armed = %d, want 3", n)
	}
	c.Advance(3 * time.Second)
	if len(fired) != 2 || fired[0] != time.Second || fired[1] != 2*time.Second {
		t.Fatalf("fired at %v, want [1s 2s]", fired)
	}
	if got := c.Now().Sub(t0); got != 3*time.Second {
		t.Fatalf("Now = t0+%v, want t0+3s", got)
	}
	if n := c.Armed(); n != 1 {
		t.Fatalf("Armed after the advance = %d, want 1", n)
	}
}

func TestWaitArmedSeesATimerArmedLater(t *testing.T) {
	c := New(time.Unix(0, 0))
	go c.AfterFunc(time.Minute, func() {})
	if !c.WaitArmed(1, 10*time.Second) {
		t.Fatal("the timer armed on another goroutine was not seen")
	}
	if c.WaitArmed(2, 10*time.Millisecond) {
		t.Fatal("WaitArmed(2) with one timer armed reported true")
	}
}
