package mcpfront

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// frame is the i-th frame of writer g in the frameWriter tests: a JSON
// line long enough that a few fill a pipe's buffer.
func frame(g, i int) []byte {
	return fmt.Appendf(nil, `{"g":%d,"i":%d,"pad":%q}`+"\n", g, i, strings.Repeat("x", 4000))
}

// checkFrames reads n frames of each of writers writers from r, and
// checks each is whole and each writer's come in the order written.
func checkFrames(t *testing.T, r io.Reader, writers, n int) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	next := make([]int, writers)
	for range writers * n {
		if !sc.Scan() {
			t.Fatalf("the stream ended early: %v", sc.Err())
		}
		var g, i int
		if _, err := fmt.Sscanf(sc.Text(), `{"g":%d,"i":%d,`, &g, &i); err != nil || !bytes.Equal(append(sc.Bytes(), '\n'), frame(g, i)) {
			t.Fatalf("a frame not whole: %.60q… (%v)", sc.Text(), err)
		}
		if i != next[g] {
			t.Fatalf("writer %d's frame %d came where %d was due", g, i, next[g])
		}
		next[g]++
	}
}

// writeAll writes n frames from each of writers goroutines to w and
// returns the longest one Write took; it fails the test if the writes
// are not all done within 10 s (a writer blocked by its peer).
func writeAll(t *testing.T, w io.Writer, writers, n int) time.Duration {
	t.Helper()
	var mu sync.Mutex
	var longest time.Duration
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range n {
				start := time.Now()
				if _, err := w.Write(frame(g, i)); err != nil {
					t.Errorf("writer %d frame %d: %v", g, i, err)
					return
				}
				mu.Lock()
				longest = max(longest, time.Since(start))
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writes are blocked by a peer that does not read")
	}
	return longest
}

// noFail is the fail of a writer whose peer is not to be given up on.
func noFail(t *testing.T) func(error) {
	return func(err error) { t.Errorf("the connection failed: %v", err) }
}

// A peer that stops reading (a pipe whose buffer is full, many times
// over): every Write still returns at once, the frames queue, and once
// the peer reads again they all come, whole, each writer's in order.
// Over a polled pipe the first frames go straight through; over an
// io.Pipe (no deadline) every one is queued.
func TestFrameWriterPeerStopsReading(t *testing.T) {
	for name, pipe := range map[string]func() (io.ReadCloser, io.WriteCloser){
		"os.Pipe": func() (io.ReadCloser, io.WriteCloser) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			return r, w
		},
		"io.Pipe": func() (io.ReadCloser, io.WriteCloser) { return io.Pipe() },
	} {
		t.Run(name, func(t *testing.T) {
			r, pw := pipe()
			defer r.Close()
			fw := newFrameWriter(pw, wireLimits{fast: 2 * time.Millisecond, stall: time.Minute, maxQueued: 32 << 20}, noFail(t))
			if _, polled := pw.(*os.File); polled != (fw.dl != nil) {
				t.Fatalf("deadlines taken: %v, want %v", fw.dl != nil, polled)
			}
			const writers, n = 4, 50 // 800 KB: a 64 KiB pipe buffer twelve times over
			longest := writeAll(t, fw, writers, n)
			// The budget is 2 ms; allow for a loaded machine (and -race),
			// well under what a peer that never reads would cost: forever.
			if longest > 500*time.Millisecond {
				t.Errorf("a Write took %v", longest)
			}
			checkFrames(t, r, writers, n)
			fw.Close(time.Second)
			pw.Close()
			fw.closed()
		})
	}
}

// A peer that reads nothing for the stall bound has its connection
// failed (fail is told why, once), and every later Write fails; one
// that lets more than maxQueued bytes wait for it, the same at once.
func TestFrameWriterGivesUpOnAPeer(t *testing.T) {
	for _, c := range []struct {
		name   string
		limits wireLimits
		want   error
	}{
		{"stalled", wireLimits{fast: 2 * time.Millisecond, stall: 200 * time.Millisecond, maxQueued: 32 << 20}, errPeerStalled},
		{"backlog", wireLimits{fast: 2 * time.Millisecond, stall: time.Minute, maxQueued: 256 << 10}, errPeerBacklog},
	} {
		for _, polled := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/polled=%v", c.name, polled), func(t *testing.T) {
				var r io.ReadCloser
				var pw io.WriteCloser
				if polled {
					var err error
					if r, pw, err = os.Pipe(); err != nil {
						t.Fatal(err)
					}
				} else {
					r, pw = io.Pipe()
				}
				defer r.Close()
				failed := make(chan error, 2)
				fw := newFrameWriter(pw, c.limits, func(err error) { failed <- err })
				start := time.Now()
				for i := 0; ; i++ {
					if _, err := fw.Write(frame(0, i)); err != nil {
						if !errors.Is(err, c.want) {
							t.Errorf("Write: %v, want %v", err, c.want)
						}
						break
					}
					if c.want == errPeerStalled && i == 100 {
						break // 400 KB waits; now wait for the bound
					}
					if i > 1000 {
						t.Fatal("the writer took 4 MB and did not give up")
					}
				}
				select {
				case err := <-failed:
					if !errors.Is(err, c.want) {
						t.Errorf("failed with %v, want %v", err, c.want)
					}
					if c.want == errPeerStalled && time.Since(start) < c.limits.stall {
						t.Errorf("failed after %v, before the stall bound %v", time.Since(start), c.limits.stall)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the connection was not failed")
				}
				if _, err := fw.Write(frame(0, 0)); !errors.Is(err, c.want) {
					t.Errorf("a Write after the failure: %v, want %v", err, c.want)
				}
				fw.Close(time.Second)
				pw.Close()
				fw.closed()
				select {
				case err := <-failed:
					t.Errorf("failed twice, then with %v", err)
				default:
				}
			})
		}
	}
}

// The fast path's cost: a frame written straight through to a pipe
// with room, read back on the same goroutine (no other goroutine
// involved: what is measured is the write and one read).
func BenchmarkFrameWrite(b *testing.B) {
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p := []byte(`{"jsonrpc":"2.0","id":"fulfiller:1","method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}` + "\n")
	buf := make([]byte, 4096)
	fw := newBenchWriter(w)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fw.Write(p); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchWriter(w io.Writer) io.Writer {
	return newFrameWriter(w, defaultWireLimits, func(error) {})
}
