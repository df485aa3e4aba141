// Package logbuf provides a buffer that a test reads while other
// goroutines write to it: a logger's output, a terminal UI's screen, a
// process's stderr. bytes.Buffer is not safe for that.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it; Write and String may be called
// from any goroutine. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
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
