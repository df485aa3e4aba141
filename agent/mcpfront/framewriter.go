package mcpfront

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// A frame written to a client's or an upstream's stream is written by
// whoever writes it, and that is often the engine's own goroutine (the
// effects fulfil and answer). A peer that stops reading its pipe must
// not stop that goroutine: every other proposal, timer and reject would
// wait behind it, and an upstream blocked writing its result while the
// engine is blocked writing that upstream's input (and its reader is
// blocked handing the engine the last result) would never move again.
// So a frame is written at once, on the caller's goroutine (no
// hand-off: that keeps a call's round trip short), but for a few
// milliseconds at most; what the peer has not taken by then, and every
// frame after it, waits in a queue a goroutine of the writer's writes
// out in order. A peer that reads none of it for long, or lets too much
// pile up, has its connection failed: the calls waiting on it end as
// they end when a peer dies.

// wireLimits are a frameWriter's bounds.
type wireLimits struct {
	// fast is how long a caller may wait for the peer to take a frame
	// before the rest goes to the queue. A reader that is merely
	// descheduled on a loaded machine comes back within a scheduler
	// slice or two (Linux's is 0.75–3 ms); longer than that, one
	// goroutine hand-off costs less than the wait.
	fast time.Duration
	// stall is how long the peer may take nothing of what waits for it
	// before its connection fails: above any pause of a live peer (a
	// GC, a swap-in, a busy tool server whose pipe buffer is full),
	// below the 5 minutes the engine waits for an upstream's answer
	// (--fulfill-timeout), so that the calls get the peer's failure
	// rather than a timeout.
	stall time.Duration
	// maxQueued bounds the bytes waiting for the peer: two of the
	// largest frames either side reads (the SDK's DefaultMaxLineLength,
	// 16 MiB), so that one large result behind another still fits, and
	// a peer that reads slower than it is written to cannot grow the
	// sidecar's memory without end.
	maxQueued int
}

var defaultWireLimits = wireLimits{fast: 2 * time.Millisecond, stall: 30 * time.Second, maxQueued: 32 << 20}

// writePiece is the most drain writes at once to a stream that takes
// no deadline: a pipe's buffer on Linux.
const writePiece = 64 << 10

// writeDeadliner is a stream whose writes take a deadline (a pipe or a
// socket the runtime polls: os.Pipe's ends, exec.Cmd's StdinPipe, a
// pollable stdout).
type writeDeadliner interface {
	SetWriteDeadline(time.Time) error
}

// Why a frameWriter stopped writing.
var (
	errWriterClosed = errors.New("mcpfront: the stream is closed")
	// errPeerStalled and errPeerBacklog fail the connection (the peer's
	// read side reports them as its end).
	errPeerStalled = errors.New("the peer read nothing written to it")
	errPeerBacklog = errors.New("the peer fell too far behind reading what is written to it")
)

// frameWriter writes whole frames to a peer's stream without blocking
// its callers for longer than limits.fast (see the comment above). It
// is safe for concurrent use; the frames of concurrent Writes never
// interleave, and they reach the peer in the order their Writes
// returned.
type frameWriter struct {
	w      io.Writer
	dl     writeDeadliner // nil: w takes no deadline, so every frame is queued
	limits wireLimits
	// fail ends the connection: called once, with why, never under mu,
	// it must not block.
	fail func(error)

	mu      sync.Mutex
	queue   [][]byte // what the peer has not taken yet, oldest first: the head may be the rest of a frame
	queued  int      // bytes in queue
	running bool     // drain runs: only it writes to w
	drained chan struct{}
	err     error // set: every Write fails with it
}

// newFrameWriter writes to w; fail ends the connection when its peer
// stalls, falls behind, or its stream fails.
func newFrameWriter(w io.Writer, limits wireLimits, fail func(error)) *frameWriter {
	fw := &frameWriter{w: w, limits: limits, fail: fail}
	// Only a stream the runtime polls honours a deadline: a regular file
	// or a terminal says so here (os.ErrNoDeadline), and every frame to
	// it is queued, never written on the caller's goroutine.
	if d, ok := w.(writeDeadliner); ok && d.SetWriteDeadline(time.Time{}) == nil {
		fw.dl = d
	}
	return fw
}

// Write writes p, one whole frame, or queues it: it returns within
// limits.fast. An error: the writer has failed or is closed, and p is
// not written.
func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return 0, err
	}
	rest := p
	if !w.running && w.dl != nil {
		// Nothing waits: write now. mu is held across a write bounded by
		// the deadline, which keeps a second caller from slipping a frame
		// in before the rest of this one.
		var n int
		err := w.dl.SetWriteDeadline(time.Now().Add(w.limits.fast))
		if err == nil {
			n, err = w.w.Write(p)
			if err == nil {
				w.mu.Unlock()
				return n, nil
			}
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			w.mu.Unlock()
			err = fmt.Errorf("mcpfront: writing to the peer: %w", err)
			w.failWith(err)
			return n, err
		}
		rest = p[n:]
	}
	if w.queued+len(rest) > w.limits.maxQueued {
		w.mu.Unlock()
		err := fmt.Errorf("%w: more than %d bytes waited for it", errPeerBacklog, w.limits.maxQueued)
		w.failWith(err)
		return 0, err
	}
	w.queue = append(w.queue, append([]byte(nil), rest...))
	w.queued += len(rest)
	if !w.running {
		w.running = true
		w.drained = make(chan struct{})
		go w.drain(w.drained)
	}
	w.mu.Unlock()
	return len(p), nil
}

// drain writes the queue out, oldest first, until it is empty or the
// writer fails; then it ends (a later Write that must queue starts it
// again). It alone writes to w while it runs.
func (w *frameWriter) drain(done chan struct{}) {
	defer close(done)
	for {
		w.mu.Lock()
		if w.err != nil || len(w.queue) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		head := w.queue[0]
		w.mu.Unlock()
		n, err := w.writeOut(head)
		w.mu.Lock()
		if w.err == nil {
			if n == len(head) {
				w.queue[0] = nil
				w.queue = w.queue[1:]
			} else {
				w.queue[0] = head[n:]
			}
			w.queued -= n
		}
		w.mu.Unlock()
		if err != nil {
			w.failWith(err)
		}
	}
}

// writeOut writes b for drain: it fails when the peer takes none of it
// for limits.stall (errPeerStalled), or when the writer failed
// meanwhile.
func (w *frameWriter) writeOut(b []byte) (int, error) {
	if w.dl == nil {
		// No deadline: a watchdog fails the writer instead, and the
		// write ends once the stream is closed. In pieces, so that a
		// slow peer that reads is told from one that reads nothing.
		t := time.AfterFunc(w.limits.stall, func() {
			w.failWith(fmt.Errorf("%w for %v", errPeerStalled, w.limits.stall))
		})
		defer t.Stop()
		written := 0
		for written < len(b) {
			n, err := w.w.Write(b[written:min(len(b), written+writePiece)])
			written += n
			if err != nil {
				return written, fmt.Errorf("mcpfront: writing to the peer: %w", err)
			}
			w.mu.Lock()
			err = w.err
			w.mu.Unlock()
			if err != nil {
				return written, err
			}
			t.Reset(w.limits.stall)
		}
		return written, nil
	}
	written := 0
	for {
		// The deadline is set under mu so that a failure's (failWith:
		// now) is never overwritten by this one.
		w.mu.Lock()
		if err := w.err; err != nil {
			w.mu.Unlock()
			return written, err
		}
		err := w.dl.SetWriteDeadline(time.Now().Add(w.limits.stall))
		w.mu.Unlock()
		if err != nil {
			return written, fmt.Errorf("mcpfront: writing to the peer: %w", err)
		}
		n, err := w.w.Write(b[written:])
		written += n
		switch {
		case err == nil:
			return written, nil
		case errors.Is(err, os.ErrDeadlineExceeded) && n > 0:
			continue // it read some: a slow peer, not a stalled one
		case errors.Is(err, os.ErrDeadlineExceeded):
			return written, fmt.Errorf("%w for %v", errPeerStalled, w.limits.stall)
		}
		return written, fmt.Errorf("mcpfront: writing to the peer: %w", err)
	}
}

// failWith stops the writer for good, dropping what waits, and fails
// the connection with err, the first time only.
func (w *frameWriter) failWith(err error) {
	if w.stop(err) {
		w.fail(err)
	}
}

// stop makes every later Write fail with err, drops the queue and
// interrupts drain's write: true the first time.
func (w *frameWriter) stop(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return false
	}
	w.err = err
	w.queue, w.queued = nil, 0
	if w.dl != nil {
		_ = w.dl.SetWriteDeadline(time.Unix(1, 0)) // a pending write returns now
	}
	return true
}

// Close gives the peer up to wait to take what is queued, then stops
// the writer. It does not close the stream, which the caller closes
// next: a write to a polled stream still pending has ended when Close
// returns (its deadline is past); one to an io.Pipe ends when the pipe
// is closed (closed).
func (w *frameWriter) Close(wait time.Duration) {
	w.mu.Lock()
	running, drained, failed := w.running, w.drained, w.err != nil
	w.mu.Unlock()
	if running && !failed && wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
	}
	w.stop(errWriterClosed)
	w.mu.Lock()
	running, drained = w.running, w.drained
	w.mu.Unlock()
	if running && w.dl != nil {
		<-drained
	}
}

// closed waits for drain to end once the stream is closed, where
// closing it ends a pending write (an io.Pipe). A write to a terminal
// may outlast its close, and is not waited for.
func (w *frameWriter) closed() {
	w.mu.Lock()
	running, drained := w.running, w.drained
	w.mu.Unlock()
	if _, isPipe := w.w.(*io.PipeWriter); running && isPipe {
		<-drained
	}
}
