package logbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Writers on many goroutines and a reader at the same time: under -race
// this fails for a plain bytes.Buffer.
func TestBufferIsSafeToReadWhileWritten(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
			}
		})
	}
	for range 50 {
		_ = b.String()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
	b.Reset()
	if b.String() != "" {
		t.Fatal("Reset left text")
	}
}

// With Max, what is written past the bound is dropped, and the writer is
// never told of an error (a child process's output must not block or
// fail it).
func TestBufferKeepsTheStartUpToMax(t *testing.T) {
	b := Buffer{Max: 10}
	for _, s := range []string{"0123456789", "a", "b"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "0123456789a" {
		t.Fatalf("kept %q, want the writes until it held more than 10 bytes", got)
	}
}
