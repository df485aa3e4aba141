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
