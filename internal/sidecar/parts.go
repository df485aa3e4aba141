package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"sync"
)

// part is one piece of a running sidecar, in the manner of Caddy's
// apps: Start starts it (ctx bounds the starting only: whatever it runs
// afterwards runs until Stop) and, when it fails, leaves nothing of it
// running; Stop stops everything Start started and waits for it. Every
// goroutine a part runs is its own: started in its Start, ended and
// waited for in its Stop. The runner calls Stop once, and only after a
// Start that succeeded. Stop returns what the sidecar's Stop is to
// return (the shutdown account's *ShutdownError); a failure worth only
// a log line (a store that does not close cleanly, a listener slow to
// shut down) the part logs, as the sidecar always has, and does not
// return.
type part interface {
	Start(ctx context.Context) error
	Stop() error
}

// namedPart is a part and the name the logs call it by.
type namedPart struct {
	name string
	part part
}

// runner starts parts in the order they were added and stops them in
// the reverse order. It is used from one goroutine at a time.
type runner struct {
	log     *slog.Logger
	parts   []namedPart
	begun   bool // Start was called
	started int  // parts[:started] are running
	done    bool // Start failed or Stop ran: nothing runs any more
	stopErr error
}

// add appends p, to start after the parts added before it.
func (r *runner) add(name string, p part) {
	r.parts = append(r.parts, namedPart{name, p})
}

// Start starts every part in order. When one fails, those started
// before it are stopped in reverse order and the error is its Start's,
// joined with whatever their Stops returned; the parts after it are
// neither started nor stopped, and the runner is done (Stop does
// nothing).
func (r *runner) Start(ctx context.Context) error {
	if r.begun || r.done {
		return errors.New("sidecar: parts started twice, or after Stop")
	}
	r.begun = true
	for _, p := range r.parts {
		if err := p.part.Start(ctx); err != nil {
			r.log.Debug("part did not start; stopping those that did", "part", p.name, "err", err)
			errs := append([]error{err}, r.unwind()...)
			return join(errs)
		}
		r.started++
		r.log.Debug("part started", "part", p.name)
	}
	return nil
}

// Stop stops the started parts in reverse order, each exactly once, and
// returns their errors joined. A second Stop returns the first's result.
func (r *runner) Stop() error {
	if r.done {
		return r.stopErr
	}
	r.stopErr = join(r.unwind())
	return r.stopErr
}

// unwind stops the started parts in reverse order, every one of them
// whatever the others return, and marks the runner done.
func (r *runner) unwind() []error {
	var errs []error
	for r.started > 0 {
		r.started--
		p := r.parts[r.started]
		if err := p.part.Stop(); err != nil {
			r.log.Debug("part stopped with an error", "part", p.name, "err", err)
			errs = append(errs, err)
			continue
		}
		r.log.Debug("part stopped", "part", p.name)
	}
	r.done = true
	return errs
}

// join is errors.Join, except that one error is returned as it is (its
// type and message are what callers test: a *StartError, a
// *ShutdownError).
func join(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// tasks are the goroutines of one part: go starts them from the part's
// Start, stop (from its Stop) cancels their context and waits for them.
// Their context keeps the values of Start's but not its cancellation:
// they run until stop.
type tasks struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// goRun runs f in a goroutine of t; ctx is the part's Start's.
func (t *tasks) goRun(ctx context.Context, f func(context.Context)) {
	if t.cancel == nil {
		t.ctx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	t.wg.Go(func() { f(t.ctx) })
}

// stop cancels the goroutines' context and waits for all of them.
func (t *tasks) stop() {
	if t.cancel == nil {
		return
	}
	t.cancel()
	t.wg.Wait()
}
