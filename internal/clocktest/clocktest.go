// Package clocktest provides a clock whose time moves only when a test
// says, for code that takes a lifecycle.Clock (the fulfiller's timers:
// the pending TTL, the fulfil timeout, the owner's rejoin grace, a task's
// deadline), so that "nothing happens before the deadline" and "this
// happens at it" are checked without waiting, and without a sleep that a
// loaded machine makes too short.
package clocktest

import (
	"sort"
	"sync"
	"time"
)

// Manual is a clock that stands still until Advance. Its zero value is not
// usable; make one with New.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	armed  chan struct{} // closed and replaced each time a timer is armed
}

type timer struct {
	at      time.Time
	f       func()
	stopped bool
}

// New returns a Manual clock reading now.
func New(now time.Time) *Manual {
	return &Manual{now: now, armed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that calls f, on the goroutine that advances the
// clock past it, d after the clock's time now.
func (c *Manual) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	close(c.armed)
	c.armed = make(chan struct{})
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Armed reports how many timers are armed and neither fired nor stopped.
func (c *Manual) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// WaitArmed blocks until at least n timers are armed, or d passes; it
// reports whether they were. Code under test arms its timers on its own
// goroutines: a test advances the clock only once the timer it means to
// fire exists, or the timer would be armed after the advance and never
// fire.
func (c *Manual) WaitArmed(n int, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		armed := 0
		for _, t := range c.timers {
			if !t.stopped {
				armed++
			}
		}
		ch := c.armed
		c.mu.Unlock()
		if armed >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// Advance moves the clock by d and runs the timers now due, earliest
// first, each after the clock reads its time.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	var due []*timer
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(end):
			t.stopped = true
			due = append(due, t)
		default:
			kept = append(kept, t)
		}
	}
	c.timers = kept
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	c.mu.Unlock()
	for _, t := range due {
		c.mu.Lock()
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
	c.mu.Lock()
	c.now = end
	c.mu.Unlock()
}
