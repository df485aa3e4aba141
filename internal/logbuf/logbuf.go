// Package logbuf provides a buffer that one goroutine reads while others
// write to it: a logger's output, a terminal UI's screen, a child
// process's stderr. bytes.Buffer is not safe for that.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it; Write and String may be called
// from any goroutine. The zero value is ready to use.
type Buffer struct {
	// Max, when positive, stops keeping what is written once the buffer
	// holds more than Max bytes (writes still succeed): the start of a
	// child's output explains its failure, and a chatty child must not
	// grow it without bound.
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p (drops it past Max).
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Max > 0 && b.b.Len() > b.Max {
		return len(p), nil
	}
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Reset discards what was written.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}
