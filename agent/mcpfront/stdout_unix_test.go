//go:build unix

package mcpfront

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stdoutChild is the test binary as a process whose stdout is a pipe
// its parent reads only later: it writes 800 KB of frames to it through
// a frameWriter on pollableStdout, says on stderr how long the longest
// Write took, waits for them to be read, lets stdout go and says
// whether it is blocking again.
func stdoutChild() int {
	out, closeOut := pollableStdout()
	fw := newFrameWriter(out, defaultWireLimits, func(err error) { fmt.Fprintln(os.Stderr, "failed:", err) })
	if out == os.Stdout || fw.dl == nil {
		fmt.Fprintln(os.Stderr, "stdout is not polled")
		return 1
	}
	var longest time.Duration
	for i := range 200 {
		start := time.Now()
		if _, err := fw.Write(frame(0, i)); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			return 1
		}
		longest = max(longest, time.Since(start))
	}
	fmt.Fprintf(os.Stderr, "written, the longest in %dus\n", longest.Microseconds())
	fw.Close(time.Minute)
	if err := closeOut(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	flags, err := unix.FcntlInt(1, unix.F_GETFL, 0)
	if err != nil || flags&unix.O_NONBLOCK != 0 {
		fmt.Fprintf(os.Stderr, "stdout still non-blocking (%#x, %v)\n", flags, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "blocking again")
	return 0
}

// fulfiller's stdout, a pipe from its client, takes deadlines: a client
// that does not read does not block a Write (800 KB to a 64 KiB pipe);
// the frames come whole and in order once it reads, and stdout is left
// blocking, as it was found.
func TestPollableStdout(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=stdout")
	cmd.Stdout = w
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	line := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("the child said nothing: its writes to the unread stdout are blocked")
		}
		return ""
	}
	var us int64
	if l := line(); !strings.HasPrefix(l, "written") {
		t.Fatalf("the child: %q", l)
	} else if _, err := fmt.Sscanf(l, "written, the longest in %dus", &us); err != nil || us > 500_000 {
		t.Errorf("the child: %q: a Write over 500 ms", l)
	}
	checkFrames(t, r, 1, 200)
	if l := line(); l != "blocking again" {
		t.Errorf("the child: %q", l)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the child: %v", err)
	}
}
